"""A scripted model server that replays golden transcripts byte for byte.

It stands in for the one thing that cannot run here, the upstream model server, for the demo, tests and
benchmarks. The request's `model` picks the script: `NAME[@opt=value,...]`, where NAME is a golden in
harnessproxy/goldens (NAME.sse streamed, NAME.json otherwise); an unknown name gets the protocol's plain text
golden. Options inject the faults the proxy must survive:
  chunk=N      write the stream in N-byte pieces (splits events anywhere), else one write per event
  delay=S      sleep S seconds before each write
  reset_after=N  abort the connection after N writes
  status=CODE  answer HTTP CODE with the protocol's error body
  hang=S       sleep S seconds before answering at all
  drop=1       reset the connection before any response (refused mid-request)
  repeat=N     (bench) repeat the golden's delta events to make a long stream
  gzip=1       send a non-streaming body gzip-compressed (Content-Encoding: gzip)
"""

from __future__ import annotations

import asyncio
import gzip
import json
import signal
import socket
import struct
from pathlib import Path
from typing import Any

from aiohttp import web

from harnessproxy.proxy.codecs import Codec, get_codec
from harnessproxy.proxy.routes import Route, route
from harnessproxy.resources import GOLDENS

_DEFAULT = {"anthropic": "anthropic_text", "openai_chat": "chat_text", "openai_responses": "responses_text"}


def parse_script(model: str | None) -> tuple[str, dict[str, str]]:
    name, _, opts = (model or "").partition("@")
    options = dict(o.split("=", 1) for o in opts.split(",") if "=" in o)
    return name, options


def golden_events(name: str) -> list[bytes]:
    """A golden stream split into its events, each with its terminating blank line, bytes untouched."""
    raw = (GOLDENS / f"{name}.sse").read_bytes()
    parts = raw.split(b"\n\n")
    return [p + b"\n\n" for p in parts if p.strip()]


_TEXT_DELTA = (b'"text_delta"', b'"delta": {"content"', b'"response.output_text.delta"')


def _lengthen(events: list[bytes], repeat: int) -> list[bytes]:
    """Repeat the text-delta events (for long benchmark streams); everything else stays once, in place."""
    at = [i for i, e in enumerate(events) if any(m in e for m in _TEXT_DELTA)]
    if not at or repeat <= 1:
        return events
    deltas = [events[i] for i in at]
    return events[: at[-1] + 1] + deltas * (repeat - 1) + events[at[-1] + 1 :]


class ScriptedUpstream:
    """An aiohttp server; `url` is what a proxy's --upstream points at."""

    def __init__(self, goldens: Path = GOLDENS, keep_requests: bool = True) -> None:
        self.goldens = goldens
        self.requests: list[dict[str, Any]] = []
        self.keep_requests = keep_requests
        self._runner: web.AppRunner | None = None
        self.url = ""
        self._events_cache: dict[str, list[bytes]] = {}
        self.abandoned_streams = 0  # streams whose reader went away before the end (proves cancellation)

    async def start(self, host: str = "127.0.0.1", port: int = 0, sock: socket.socket | None = None) -> str:
        app = web.Application(client_max_size=64 * 1024 * 1024)
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        site = web.SockSite(self._runner, sock) if sock else web.TCPSite(self._runner, host, port)
        await site.start()
        h, p = site._server.sockets[0].getsockname()[:2]  # type: ignore[union-attr]
        self.url = f"http://{h}:{p}"
        return self.url

    async def stop(self) -> None:
        if self._runner:
            await self._runner.cleanup()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        r = route(request.method, request.path, dict(request.headers))
        codec = get_codec(r.protocol)
        try:
            body = json.loads(raw) if raw else {}
            if not isinstance(body, dict):
                raise ValueError("the body must be a JSON object")
            return await self._answer(request, r, codec, raw, body)
        except (ValueError, TypeError) as exc:  # bad JSON, or an option like status=abc
            return web.json_response(codec.error_body(400, f"scripted upstream: {exc}"), status=400)

    async def _answer(
        self, request: web.Request, r: Route, codec: Codec, raw: bytes, body: dict[str, Any]
    ) -> web.StreamResponse:
        if self.keep_requests:
            self.requests.append(
                {
                    "method": request.method,
                    "path": request.path_qs,
                    "headers": dict(request.headers),
                    "body": body,
                }
            )
        if r.kind == "models":
            names = sorted(p.stem for p in self.goldens.glob("*.sse"))
            return web.json_response(
                {"object": "list", "data": [{"id": n, "object": "model"} for n in names]}
            )
        if r.kind == "count_tokens":
            return web.json_response({"input_tokens": max(1, len(raw) // 4)})
        name, opts = parse_script(body.get("model"))
        if "drop" in opts:
            _reset(request)
            return web.Response()
        if "hang" in opts:
            await asyncio.sleep(float(opts["hang"]))
        if "status" in opts:
            status = int(opts["status"])
            return web.json_response(codec.error_body(status, f"scripted failure {status}"), status=status)
        if not (self.goldens / f"{name}.sse").exists():
            name = _DEFAULT[r.protocol]
        if not body.get("stream"):
            twin = self.goldens / f"{name}.json"
            if not twin.exists():
                raise ValueError(f"golden {name!r} is stream-only: send stream=true")
            data = twin.read_bytes()
            if "gzip" in opts:
                return web.Response(
                    body=gzip.compress(data),
                    headers={"content-type": "application/json", "content-encoding": "gzip"},
                )
            return web.Response(body=data, content_type="application/json")
        return await self._stream(request, name, opts)

    async def _stream(self, request: web.Request, name: str, opts: dict[str, str]) -> web.StreamResponse:
        key = f"{name}:{opts.get('repeat', '1')}"
        if key not in self._events_cache:
            self._events_cache[key] = _lengthen(golden_events(name), int(opts.get("repeat", "1")))
        writes = self._events_cache[key]
        if "chunk" in opts:
            blob, size = b"".join(writes), int(opts["chunk"])
            writes = [blob[i : i + size] for i in range(0, len(blob), size)]
        resp = web.StreamResponse(headers={"content-type": "text/event-stream", "cache-control": "no-cache"})
        await resp.prepare(request)
        delay = float(opts.get("delay", 0))
        reset_after = int(opts["reset_after"]) if "reset_after" in opts else None
        for i, piece in enumerate(writes):
            if reset_after is not None and i == reset_after:
                _reset(request)
                return resp
            if delay:
                await asyncio.sleep(delay)
            try:
                await resp.write(piece)
            except ConnectionError:
                self.abandoned_streams += 1
                return resp
        await resp.write_eof()
        return resp


def _reset(request: web.Request) -> None:
    """Abort with RST (SO_LINGER 0), not a polite FIN: what a crashed server or a dropped route looks like."""
    transport = request.transport
    if transport is None:
        return
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    transport.abort()


def serve_forever(host: str, port: int, on_ready: Any = None) -> None:
    async def main() -> None:
        up = ScriptedUpstream(keep_requests=False)  # a long-running server must not grow without bound
        url = await up.start(host, port)
        if on_ready:
            on_ready(url)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
        await up.stop()

    asyncio.run(main())
