"""Sandboxes: one per rollout, whose only network is the rollout's own proxy.

`Sandbox` is the small interface the controller uses; backends live beside it (`local`: bubblewrap)."""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol


class SandboxError(Exception):
    """An infrastructure failure (the sandbox could not start, a mount failed): never the agent's fault."""


@dataclass
class Limits:
    cpus: float | None = None
    memory_mb: int | None = None
    pids: int | None = None
    disk_mb: int | None = None  # for the workspace's changes, and for /tmp, each
    wall_s: float | None = None  # the sandbox's whole life: every exec's timeout is cut to what is left

    def requested(self) -> set[str]:
        """The process limits asked for (cpu, memory, pids); disk and wall clock are handled apart."""
        asked = (("cpu", self.cpus), ("memory", self.memory_mb), ("pids", self.pids))
        return {name for name, value in asked if value is not None}


@dataclass
class SandboxSpec:
    workspace: Path  # the task's files: the sandbox sees a copy-on-write view, this folder is never modified
    workdir: str = "/workspace"  # where the workspace appears inside, and where commands start
    # local backend: a root filesystem folder, read-only (with /proc, /dev, /tmp); default: the host's /usr
    rootfs: Path | None = None
    user: int = 0  # uid (and gid) commands run as; the workspace is handed to it
    env: dict[str, str] = field(default_factory=dict)
    # host path -> sandbox path, read-only (e.g. the host's agent cache)
    ro_mounts: dict[str, str] = field(default_factory=dict)
    # host path -> sandbox path, writable (e.g. the evaluator's fresh /logs and its copy of the tests)
    rw_mounts: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)


@dataclass
class ExecResult:
    exit_code: int  # -N when killed by signal N
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    stdout_truncated: bool = False
    stderr_truncated: bool = False
    limits_hit: list[str] = field(default_factory=list)  # memory (OOM kill), pids (fork refused), disk (full)


@dataclass
class Diff:
    """The rollout's change to the workspace."""

    patch: str  # unified, git-style, text files only: `git apply` reproduces them
    added: list[str] = field(default_factory=list)
    modified: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    binary: list[str] = field(default_factory=list)  # changed files the patch cannot carry
    archive: bytes = b""  # tar.gz of every added or modified file, binary included

    @property
    def empty(self) -> bool:
        return not (self.added or self.modified or self.deleted)


class Sandbox(Protocol):
    spec: SandboxSpec

    @property
    def home(self) -> str:
        """HOME for commands: private to this sandbox, so every rollout starts with a scratch one."""
        ...

    def start(self) -> None: ...

    def exec(
        self,
        argv: list[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        timeout: float | None = None,
        stdin: bytes | None = None,
    ) -> ExecResult: ...

    def read_file(self, path: str) -> bytes: ...

    def write_file(self, path: str, data: bytes) -> None: ...

    def listen(self, port: int = 0) -> socket.socket:
        """A listening socket on 127.0.0.1 *inside* the sandbox's network, for the rollout's proxy."""
        ...

    def halt(self) -> None:
        """Kill every process inside, keep the workspace (take the diff for scoring after this)."""
        ...

    def diff(self) -> Diff: ...

    def stop(self) -> None: ...
