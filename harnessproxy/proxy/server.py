"""The recording proxy: one listener = one rollout.

Identity comes from the listener: every call arriving on this socket belongs to `rollout_id`, whatever the
request says. Bytes stream to the agent as they arrive; reassembly runs beside the stream; the record is
fsync'd to the rollout's journal before the agent's response completes."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import time
from typing import Any

from aiohttp import web

from harnessproxy.proxy.codecs import Codec, Json, Reassembler, get_codec, loads
from harnessproxy.proxy.record import CallRecord, Journal, body_text, redact
from harnessproxy.proxy.routes import Route, refine_kind, route
from harnessproxy.proxy.sse import SSEEvent, SSEParser
from harnessproxy.proxy.upstream import (
    HOP_BY_HOP,
    Upstream,
    UpstreamBroken,
    UpstreamResponse,
    UpstreamTimeout,
    UpstreamUnreachable,
)

DEFAULT_MAX_BODY = 32 * 1024 * 1024
# Never forwarded upstream: hop-by-hop, recomputed by the client library, or the agent's (dummy) credentials.
_DROP_REQUEST = HOP_BY_HOP | {
    "host",
    "content-length",
    "content-encoding",
    "accept-encoding",
    "authorization",
    "x-api-key",
    "api-key",
    "x-goog-api-key",
    "cookie",
}
# Never copied back: the body is re-framed (and already decompressed) by this server.
_DROP_RESPONSE = HOP_BY_HOP | {"content-length", "content-encoding", "server", "date"}


class BadRequest(Exception):
    def __init__(self, status: int, kind: str, message: str) -> None:
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


class ProxyServer:
    def __init__(
        self,
        rollout_id: str,
        upstream: Upstream,
        journal: Journal,
        *,
        upstream_key: str | None = None,
        max_body: int = DEFAULT_MAX_BODY,
    ) -> None:
        self.rollout_id = rollout_id
        self.upstream = upstream
        self.journal = journal
        self.upstream_key = upstream_key
        self.max_body = max_body
        self._seq = 0
        self._writes: set[asyncio.Future[None]] = set()  # journal appends in flight (stop() waits for them)
        self._runner: web.AppRunner | None = None
        self.host: str | None = None
        self.port: int | None = None

    # -- lifecycle -------------------------------------------------------------------------------------
    async def start(self, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None) -> None:
        """Listen on host:port, or on an already-bound socket (e.g. one made inside a sandbox's netns)."""
        app = web.Application(client_max_size=self.max_body + 1)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        # handler_cancellation: a client that hangs up cancels the handler, which cancels the upstream call.
        self._runner = web.AppRunner(app, access_log=None, handler_cancellation=True)
        await self._runner.setup()
        site: web.BaseSite
        if sock is not None:
            site = web.SockSite(self._runner, sock)
        else:
            site = web.TCPSite(self._runner, host, port, reuse_address=True)
        await site.start()
        bound = site._server.sockets[0].getsockname()  # type: ignore[union-attr]
        self.host, self.port = bound[0], bound[1]

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._writes:  # a client that hung up cancelled its handler, not the record's write
            await asyncio.gather(*self._writes, return_exceptions=True)

    # -- one call --------------------------------------------------------------------------------------
    async def _handle(self, request: web.Request) -> web.StreamResponse:
        self._seq += 1
        headers = dict(request.headers)
        r = route(request.method, request.path, headers)
        rec = CallRecord(
            self.rollout_id,
            self._seq,
            request.method,
            request.path_qs,
            r.protocol,
            r.kind,
            endpoint=r.endpoint,
        )
        rec.request = {"headers": redact(headers), "body": None, "body_encoding": "none"}
        codec = get_codec(r.protocol)
        written = False
        try:
            if r.kind == "probe":
                rec.status = 200
                return web.Response(status=200)
            if r.endpoint is None:
                raise BadRequest(
                    404,
                    "unknown_path",
                    f"{request.method} {request.path} is not an endpoint this proxy serves",
                )
            raw, body = await self._read_body(request, rec)
            if isinstance(body, dict):
                rec.model = body.get("model") if isinstance(body.get("model"), str) else None
                rec.stream = body.get("stream") is True
            rec.kind = refine_kind(r, body)
            response, written = await self._forward(request, rec, codec, r, raw)
            return response
        except BadRequest as exc:
            rec.status = exc.status
            rec.fail(exc.kind, exc.message)
            return web.json_response(codec.error_body(exc.status, exc.message), status=exc.status)
        except (asyncio.CancelledError, ConnectionResetError):
            rec.fail(
                "client_disconnected",
                "the client closed the connection before the response completed",
                incomplete=True,
            )
            self._finish_sync(rec)
            written = True
            raise
        finally:
            if not written:
                await self._finish(rec)

    async def _read_body(self, request: web.Request, rec: CallRecord) -> tuple[bytes | None, Any]:
        if request.method != "POST":
            return None, None
        if request.content_length is not None and request.content_length > self.max_body:
            raise BadRequest(
                413,
                "body_too_large",
                f"request body of {request.content_length} bytes exceeds the "
                f"proxy limit of {self.max_body} bytes",
            )
        buf = bytearray()
        try:
            async for chunk in request.content.iter_chunked(1 << 16):
                buf += chunk
                if len(buf) > self.max_body:
                    raise BadRequest(
                        413,
                        "body_too_large",
                        f"request body exceeds the proxy limit of {self.max_body} bytes",
                    )
        except BadRequest:
            raise
        except Exception as exc:  # a body aiohttp could not decompress or de-chunk
            raise BadRequest(400, "unreadable_body", f"could not read the request body: {exc}") from exc
        raw = bytes(buf)
        rec.request["body"], rec.request["body_encoding"] = body_text(raw)
        try:
            return raw, loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise BadRequest(400, "invalid_json", f"request body is not valid JSON: {exc}") from exc

    def _upstream_headers(self, request: web.Request, codec: Codec) -> dict[str, str]:
        named = {h.strip().lower() for h in request.headers.get("connection", "").split(",")}
        out = {
            k: v
            for k, v in request.headers.items()
            if k.lower() not in _DROP_REQUEST and k.lower() not in named
        }
        if self.upstream_key:
            out.update(codec.auth_headers(self.upstream_key))
        return out

    async def _forward(
        self, request: web.Request, rec: CallRecord, codec: Codec, r: Route, raw: bytes | None
    ) -> tuple[web.StreamResponse, bool]:
        assert r.endpoint is not None
        headers = self._upstream_headers(request, codec)
        rec.upstream_request = {
            "url": self.upstream.url_for(r.endpoint, request.query_string),
            "headers": redact(headers),
            "body": None,  # passthrough: byte-identical to request.body
            "body_identical": True,
        }
        try:
            up = await self.upstream.send(request.method, r.endpoint, request.query_string, headers, raw)
        except UpstreamTimeout as exc:
            raise BadRequest(504, "upstream_timeout", str(exc)) from exc
        except UpstreamUnreachable as exc:
            raise BadRequest(502, "upstream_unreachable", str(exc)) from exc
        try:
            rec.status = up.status
            rec.response["headers"] = dict(up.headers)
            if up.headers.get("content-type", "").startswith("text/event-stream"):
                return await self._stream(request, rec, codec, up), True
            return await self._whole(rec, codec, up), False
        finally:
            up.close()

    async def _whole(self, rec: CallRecord, codec: Codec, up: UpstreamResponse) -> web.StreamResponse:
        try:
            data = await up.read()
        except UpstreamTimeout as exc:
            raise BadRequest(504, "upstream_timeout", str(exc)) from exc
        except UpstreamBroken as exc:
            raise BadRequest(502, "upstream_reset", str(exc)) from exc
        rec.first_byte_at = time.time()
        text, encoding = body_text(data)
        parsed: Json | None = None
        with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
            parsed = loads(data) if data else None
        rec.response["body"] = parsed if parsed is not None else text
        if parsed is None and encoding != "utf-8":
            rec.response["body_encoding"] = encoding
        if up.status < 400 and isinstance(parsed, dict):
            rec.usage = codec.usage(parsed)
            rec.stop_reason = codec.stop_reason(parsed)
        elif up.status >= 400:
            rec.fail("upstream_status", f"upstream answered HTTP {up.status}")
        return web.Response(status=up.status, body=data, headers=_client_headers(up))

    async def _stream(
        self, request: web.Request, rec: CallRecord, codec: Codec, up: UpstreamResponse
    ) -> web.StreamResponse:
        resp = web.StreamResponse(status=up.status, headers=_client_headers(up))
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        parser = SSEParser()
        reasm = codec.reassembler()
        # the stream exactly as received; the event list is derived from it at load time
        raw: list[bytes] = []
        broken: str | None = None
        held = b""  # bytes of an unfinished event: forwarded once it ends, dropped if the stream breaks
        unparsed = b""
        try:
            async for chunk in up.chunks():
                if rec.first_byte_at is None:
                    rec.first_byte_at = time.time()
                raw.append(chunk)  # recorded before forwarding: a client hanging up mid-write loses nothing
                unparsed = chunk
                ready, held = split_at_event_end(held + chunk)
                if ready:
                    await resp.write(ready)
                unparsed = b""
                _feed(rec, reasm, parser.feed(chunk))
        except UpstreamBroken as exc:
            broken = str(exc)
        except (asyncio.CancelledError, ConnectionResetError):
            _feed(rec, reasm, parser.feed(unparsed))  # the client hung up: keep all that arrived
            _stream_result(rec, codec, reasm, raw)
            raise
        if broken is None:
            if held:
                await resp.write(held)
            _feed(rec, reasm, parser.flush())
        _stream_result(rec, codec, reasm, raw)
        if broken is not None:
            rec.fail("upstream_reset", broken, incomplete=True)
        elif reasm.error is not None:
            rec.fail("upstream_stream_error", json.dumps(reasm.error)[:2000])
        elif up.status >= 400:
            rec.fail("upstream_status", f"upstream answered HTTP {up.status}")
        await self._finish(rec)
        # The call is recorded; a client that hangs up once it has its last event (Qwen Code does, after
        # [DONE]) only misses the chunked terminator.
        with contextlib.suppress(ConnectionResetError):
            if broken is not None:
                await resp.write(reasm.error_tail(f"upstream connection broke mid-stream: {broken}"))
            await resp.write_eof()
        return resp

    async def _finish(self, rec: CallRecord) -> None:
        rec.ended_at = time.time()
        write = asyncio.ensure_future(asyncio.to_thread(self.journal.append, rec))
        self._writes.add(write)
        write.add_done_callback(self._writes.discard)
        await asyncio.shield(write)

    def _finish_sync(self, rec: CallRecord) -> None:
        # Used while being cancelled: no awaiting, the record must still reach the journal.
        if rec.ended_at is not None:  # _finish already handed it to a writer thread
            return
        rec.ended_at = time.time()
        self.journal.append(rec)


def split_at_event_end(data: bytes) -> tuple[bytes, bytes]:
    """Split after the last complete SSE event, so a client never holds half an event when a stream breaks."""
    end = 0
    for sep in (b"\n\n", b"\r\n\r\n", b"\r\r"):
        at = data.rfind(sep)
        if at >= 0:
            end = max(end, at + len(sep))
    return data[:end], data[end:]


def _feed(rec: CallRecord, reasm: Reassembler, events: list[SSEEvent]) -> None:
    """Reassembly is a side job: an event the codec chokes on is noted, and the stream goes on untouched."""
    for event in events:
        try:
            reasm.feed(event)
        except Exception as exc:
            rec.response.setdefault("reassembly_errors", []).append(f"{type(exc).__name__}: {exc}"[:500])


def _stream_result(rec: CallRecord, codec: Codec, reasm: Reassembler, raw: list[bytes]) -> None:
    try:
        final = reasm.result()
    except Exception as exc:
        final = None
        rec.response.setdefault("reassembly_errors", []).append(f"{type(exc).__name__}: {exc}"[:500])
    text, encoding = body_text(b"".join(raw))
    rec.response.update(
        reassembled=final,
        raw_sse=text,
        unknown_event_types=reasm.unknown_event_types,
        terminated=reasm.terminated,
    )
    if encoding != "utf-8":
        rec.response["raw_sse_encoding"] = encoding
    rec.usage = codec.usage(final)
    rec.stop_reason = codec.stop_reason(final)


def _client_headers(up: UpstreamResponse) -> dict[str, str]:
    named = {h.strip().lower() for h in up.headers.get("connection", "").split(",")}
    return {k: v for k, v in up.headers.items() if k.lower() not in _DROP_RESPONSE and k.lower() not in named}
