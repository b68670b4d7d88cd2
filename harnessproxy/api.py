"""Library entry points; the CLI is a thin layer over these."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnessproxy.proxy.record import Journal
from harnessproxy.proxy.server import DEFAULT_MAX_BODY, ProxyServer
from harnessproxy.proxy.upstream import HttpUpstream, Upstream
from harnessproxy.sandbox import Sandbox, SandboxSpec
from harnessproxy.store import connect, load_journals

DEFAULT_JOURNAL_DIR = Path("harnessproxy-journals")


class ConfigError(Exception):
    """A user-facing configuration mistake; the CLI prints the message, never a traceback."""


def new_rollout_id() -> str:
    return f"r-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def upstream_key_from_env(var: str | None) -> str | None:
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise ConfigError(f"--upstream-key-env names {var}, but {var} is not set in this environment")
    return key


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--listen must be HOST:PORT, got {listen!r}")
    return host or "127.0.0.1", int(port)


@dataclass
class RunningProxy:
    server: ProxyServer
    journal: Journal
    upstream: Upstream

    @property
    def url(self) -> str:
        return self.server.url

    async def stop(self) -> None:
        await self.server.stop()
        await self.upstream.aclose()
        self.journal.close()


async def start_proxy(
    upstream: str | Upstream,
    *,
    rollout_id: str | None = None,
    journal_dir: str | Path = DEFAULT_JOURNAL_DIR,
    host: str = "127.0.0.1",
    port: int = 0,
    sock: socket.socket | None = None,
    upstream_key: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
) -> RunningProxy:
    """Start one recording listener for one rollout; `sock` may be a socket made inside a sandbox's netns."""
    rollout_id = rollout_id or new_rollout_id()
    up = HttpUpstream(upstream) if isinstance(upstream, str) else upstream
    journal = Journal(Path(journal_dir) / f"{rollout_id}.jsonl")
    server = ProxyServer(rollout_id, up, journal, upstream_key=upstream_key, max_body=max_body)
    try:
        await server.start(host, port, sock=sock)
    except OSError as exc:
        journal.close()
        await up.aclose()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return RunningProxy(server, journal, up)


def serve_proxy(
    listen: str,
    upstream: str,
    *,
    upstream_key_env: str | None = None,
    rollout_id: str | None = None,
    db: str | Path | None = None,
    journal_dir: str | Path = DEFAULT_JOURNAL_DIR,
    on_ready: Any = None,
) -> int:
    """Run a standalone proxy until SIGINT/SIGTERM, then load its journal into `db`. Returns calls loaded."""
    host, port = parse_listen(listen)
    key = upstream_key_from_env(upstream_key_env)

    async def main() -> Path:
        proxy = await start_proxy(
            upstream, rollout_id=rollout_id, journal_dir=journal_dir, host=host, port=port, upstream_key=key
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if on_ready:
            on_ready(proxy)
        await stop.wait()
        await proxy.stop()
        return proxy.journal.path

    journal_path = asyncio.run(main())
    return load_journals(db, [journal_path]) if db else 0


def query(db: str | Path, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    con = connect(db)
    try:
        cur = con.execute(sql)
        columns = [d[0] for d in cur.description] if cur.description else []
        return columns, cur.fetchall() if columns else []
    finally:
        con.close()


def make_sandbox(spec: SandboxSpec, backend: str = "local", image: str | None = None) -> Sandbox:
    """A sandbox of the named backend (not started)."""
    if backend == "local":
        from harnessproxy.sandbox.local import LocalSandbox

        return LocalSandbox(spec)
    if backend == "docker":
        from harnessproxy.sandbox.docker import DockerSandbox

        if not image:
            raise ConfigError("the docker backend needs an image")
        return DockerSandbox(spec, image=image)
    raise ConfigError(f"unknown sandbox backend {backend!r} (available: local, docker)")


def gc_sandboxes() -> list[str]:
    """Remove what killed controllers left behind, in both backends."""
    from harnessproxy.sandbox import docker, local

    return docker.gc() + local.gc()
