"""Where a call goes after the proxy records it. `Upstream` is the seam: hosted APIs and OpenAI-/Anthropic-
compatible servers use `HttpUpstream`; later the oracle and token-id upstreams plug in here."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Protocol

import aiohttp

HOP_BY_HOP = {
    "connection",
    "keep-alive",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "trailers",
    "transfer-encoding",
    "upgrade",
}


class UpstreamUnreachable(Exception):
    """Refused or reset before any response arrived (→ 502)."""


class UpstreamTimeout(Exception):
    """No response within the timeout (→ 504)."""


class UpstreamBroken(Exception):
    """The response body broke off after it had started."""


class UpstreamResponse(Protocol):
    status: int
    headers: Mapping[str, str]

    def chunks(self) -> AsyncIterator[bytes]: ...

    async def read(self) -> bytes: ...

    def close(self) -> None: ...


class Upstream(Protocol):
    def url_for(self, endpoint: str, query: str) -> str: ...

    async def send(
        self, method: str, endpoint: str, query: str, headers: dict[str, str], body: bytes | None
    ) -> UpstreamResponse: ...

    async def aclose(self) -> None: ...


@contextlib.contextmanager
def _broken_body(on_timeout: type[Exception]) -> Iterator[None]:
    """A body that stops mid-way: read timeout -> `on_timeout`, dropped connection -> UpstreamBroken."""
    try:
        yield
    except TimeoutError as exc:
        raise on_timeout("upstream stopped sending (read timeout)") from exc
    except (aiohttp.ClientError, ConnectionError) as exc:
        raise UpstreamBroken(f"upstream connection broke mid-response: {exc or type(exc).__name__}") from exc


class _AiohttpResponse:
    def __init__(self, resp: aiohttp.ClientResponse) -> None:
        self._resp = resp
        self.status = resp.status
        self.headers = resp.headers

    async def chunks(self) -> AsyncIterator[bytes]:
        with _broken_body(UpstreamBroken):
            async for chunk in self._resp.content.iter_any():
                yield chunk

    async def read(self) -> bytes:
        with _broken_body(UpstreamTimeout):
            return await self._resp.read()

    def close(self) -> None:
        self._resp.close()


class HttpUpstream:
    """Passthrough to a server speaking the same protocol, with the host-side key added per protocol."""

    def __init__(
        self,
        base_url: str,
        *,
        connect_timeout: float = 30.0,
        read_timeout: float = 600.0,
        session: aiohttp.ClientSession | None = None,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self._timeout = aiohttp.ClientTimeout(total=None, connect=connect_timeout, sock_read=read_timeout)
        self._session = session
        self._owns_session = session is None

    def url_for(self, endpoint: str, query: str) -> str:
        # A base that already ends in /v1 (vLLM, most gateways) must not get a second /v1.
        path = endpoint[3:] if self.base_url.endswith("/v1") and endpoint.startswith("/v1/") else endpoint
        return self.base_url + path + (f"?{query}" if query else "")

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                timeout=self._timeout,
                connector=aiohttp.TCPConnector(limit=0, enable_cleanup_closed=True),
                auto_decompress=True,
                skip_auto_headers=("User-Agent",),
            )
        return self._session

    async def send(
        self, method: str, endpoint: str, query: str, headers: dict[str, str], body: bytes | None
    ) -> UpstreamResponse:
        url = self.url_for(endpoint, query)
        try:
            resp = await self._client().request(
                method, url, headers=headers, data=body, timeout=self._timeout
            )
        except TimeoutError as exc:
            raise UpstreamTimeout(f"upstream {self.base_url} did not answer in time") from exc
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            raise UpstreamUnreachable(
                f"upstream {self.base_url} unreachable: {exc or type(exc).__name__}"
            ) from exc
        return _AiohttpResponse(resp)

    async def aclose(self) -> None:
        if self._session is not None and self._owns_session:
            await self._session.close()
        self._session = None
