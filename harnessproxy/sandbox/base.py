"""What both backends share once started: the overlay workspace, the proxy's socket inside the sandbox's
network namespace, and the public exec that runs as the spec's user."""

from __future__ import annotations

import socket
from typing import Self

from harnessproxy.sandbox import Diff, ExecResult, SandboxError, SandboxSpec
from harnessproxy.sandbox.netns import listen_in_netns
from harnessproxy.sandbox.workspace import OverlayWorkspace


class SandboxBase:
    spec: SandboxSpec
    workspace: OverlayWorkspace
    pid: int | None  # a process inside the sandbox, as the host numbers it

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def _exec(
        self,
        argv: list[str],
        *,
        uid: int,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        raise NotImplementedError

    def exec(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult:
        return self._exec(argv, env=env, cwd=cwd, timeout=timeout, stdin=stdin, uid=self.spec.user)

    def read_file(self, path: str) -> bytes:
        return self.workspace.read_file(path, self.spec.workdir)

    def write_file(self, path: str, data: bytes) -> None:
        self.workspace.write_file(path, self.spec.workdir, data)

    def listen(self, port: int = 0) -> socket.socket:
        """A listening socket on 127.0.0.1 inside the sandbox's network namespace, for the rollout's proxy."""
        if self.pid is None:
            raise SandboxError("listen on a sandbox that is not started")
        return listen_in_netns(self.pid, "127.0.0.1", port)

    def diff(self) -> Diff:
        return self.workspace.diff()

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
