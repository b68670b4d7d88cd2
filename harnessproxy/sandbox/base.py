"""What both backends share once started: the overlay workspace, the proxy's socket inside the sandbox's
network namespace, and exec around a backend's own way to run a command (`_run`): the wall clock, output caps,
and which limits a command ran into."""

from __future__ import annotations

import socket
import time
from typing import Self

from harnessproxy.sandbox import Diff, ExecResult, SandboxError, SandboxSpec
from harnessproxy.sandbox.limits import exec_timeout
from harnessproxy.sandbox.netns import listen_in_netns
from harnessproxy.sandbox.workspace import OverlayWorkspace

OUTPUT_CAP = 1 << 20  # bytes kept per stream of one exec


class SandboxBase:
    spec: SandboxSpec
    workspace: OverlayWorkspace
    pid: int | None  # a process inside the sandbox, as the host numbers it
    _started: float  # when start() began: the wall clock counts from here

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def halt(self) -> None:
        """Kill every process inside but keep the workspace: a diff taken after this cannot be raced."""
        raise NotImplementedError

    def _run(
        self,
        argv: list[str],
        *,
        uid: int,
        env: dict[str, str],
        cwd: str,
        timeout: float | None,
        stdin: bytes | None,
    ) -> tuple[bytes, bytes, int, bool]:
        """Run one command inside; (stdout, stderr, exit code or -signal, timed out). Output past OUTPUT_CAP
        may be dropped; on timeout every process the command started must be dead."""
        raise NotImplementedError

    def _counters(self) -> dict[str, int]:
        """Monotonic counts of limit hits (memory: OOM kills, pids: refused forks)."""
        return {}

    def _enforced(self) -> dict[str, str]:
        return {}

    @property
    def limits_applied(self) -> dict[str, str]:
        """How each requested limit is enforced: "cgroup v2", "cgroup v1", "docker", "tmpfs", "rlimit"."""
        applied = self._enforced()
        if self.spec.limits.disk_mb is not None:
            applied["disk"] = "tmpfs"
        return applied

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
        if self.pid is None:
            raise SandboxError("exec on a sandbox that is not started")
        limits = self.spec.limits
        if limits.wall_s is not None and time.monotonic() >= self._started + limits.wall_s:
            return ExecResult(-9, "", "the sandbox's wall clock is used up\n", 0.0, timed_out=True)
        before = self._counters()
        start = time.monotonic()
        out, err, code, timed_out = self._run(
            argv,
            uid=uid,
            env=env or {},
            cwd=cwd or self.spec.workdir,
            timeout=exec_timeout(limits, self._started, timeout),
            stdin=stdin,
        )
        after = self._counters()
        hit = [k for k in sorted(after) if after[k] > before.get(k, 0)]
        if self.workspace.full():
            hit.append("disk")
        return ExecResult(
            exit_code=code,
            stdout=out[:OUTPUT_CAP].decode(errors="replace"),
            stderr=err[:OUTPUT_CAP].decode(errors="replace"),
            duration_s=time.monotonic() - start,
            timed_out=timed_out,
            stdout_truncated=len(out) > OUTPUT_CAP,
            stderr_truncated=len(err) > OUTPUT_CAP,
            limits_hit=hit,
        )

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
