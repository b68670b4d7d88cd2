"""What every backend shares: the workspace as a host-side overlay, and the host's view of a sandbox's
processes.

The overlay's lower dir is the task's files (shared by every rollout, never written); its upper dir is
exactly this rollout's change set, on a size-limited tmpfs when the spec limits disk. The backend mounts the
merged view at the sandbox's workdir (bubblewrap --bind, docker bind mount)."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any

from harnessproxy.sandbox import Diff, SandboxError
from harnessproxy.sandbox.changes import diff_overlay

_libc = ctypes.CDLL(None, use_errno=True)
MNT_DETACH = 2
RUNTIME_ROOT = Path(os.environ.get("HARNESSPROXY_RUNTIME", "/tmp/harnessproxy-sandboxes"))


class OverlayWorkspace:
    def __init__(self, state: Path, lower: Path, disk_mb: int | None = None) -> None:
        self.state = state
        self.lower = lower.resolve()
        self.disk_mb = disk_mb
        self.rw = state / "rw"  # upper + work (they must share a filesystem)
        self.upper = self.rw / "upper"
        self.merged = state / "merged"

    def mount(self) -> None:
        if os.geteuid() != 0:
            raise SandboxError("the sandbox mounts an overlay for the workspace and needs root here")
        if not self.lower.is_dir():
            raise SandboxError(f"workspace {self.lower} is not a directory")
        self.state.mkdir(parents=True, exist_ok=True)
        write_owner(self.state)  # before any mount: gc must never take a sandbox that is starting for dead
        for d in (self.rw, self.merged):
            d.mkdir(parents=True, exist_ok=True)
        if self.disk_mb is not None:
            self._mount("tmpfs", self.rw, "tmpfs", f"size={self.disk_mb}m,mode=0755", "disk")
        for d in ("upper", "work"):
            (self.rw / d).mkdir(exist_ok=True)
        opts = f"lowerdir={self.lower},upperdir={self.upper},workdir={self.rw / 'work'}"
        try:  # metacopy: a chown (see give_to) copies up metadata, not file contents
            self._mount("overlay", self.merged, "overlay", opts + ",metacopy=on", "overlay", cleanup=False)
        except SandboxError:
            self._mount("overlay", self.merged, "overlay", opts, "overlay")

    def _mount(
        self, source: str, target: Path, fstype: str, options: str, what: str, cleanup: bool = True
    ) -> None:
        # mount(2) directly: a `mount` subprocess costs more than the rest of a sandbox's start.
        if _libc.mount(source.encode(), str(target).encode(), fstype.encode(), 0, options.encode()) != 0:
            err = ctypes.get_errno()
            if cleanup:
                teardown(self.state)
            raise SandboxError(f"mounting the workspace {what} failed: {os.strerror(err)}")

    def host_path(self, path: str, workdir: str) -> Path:
        """A workspace path (absolute inside the sandbox, or relative to the workdir) on the host side."""
        rel = os.path.relpath(path, workdir) if os.path.isabs(path) else path
        target = (self.merged / rel).resolve()
        if target != self.merged and self.merged not in target.parents:
            raise SandboxError(f"{path} is outside the workspace {workdir}")
        return target

    def read_file(self, path: str, workdir: str) -> bytes:
        return self.host_path(path, workdir).read_bytes()

    def write_file(self, path: str, workdir: str, data: bytes) -> None:
        target = self.host_path(path, workdir)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)

    def diff(self) -> Diff:
        return diff_overlay(self.lower, self.upper, self.merged)

    def give_to(self, uid: int) -> None:
        """Hand the workspace to an unprivileged user. With metacopy this copies up metadata only."""
        for dirpath, dirnames, filenames in os.walk(self.merged):
            for name in [*dirnames, *filenames]:
                os.lchown(os.path.join(dirpath, name), uid, uid)
        os.lchown(self.merged, uid, uid)

    def full(self) -> bool:
        return self.disk_mb is not None and os.statvfs(self.rw).f_bavail == 0


def write_owner(state: Path, **extra: object) -> None:
    """Who made this sandbox (the controller's pid) and what gc needs to clean up after it was killed."""
    (state / "owner.json").write_text(json.dumps({"controller_pid": os.getpid(), **extra}))


def read_owner(state: Path) -> dict[str, Any]:
    try:
        owner = json.loads((state / "owner.json").read_text())
    except (OSError, ValueError):
        return {}
    return owner if isinstance(owner, dict) else {}


def teardown(state: Path) -> None:
    """Unmount and remove a sandbox's state dir; safe on a half-made or already removed one."""
    for mount in (state / "merged", state / "rw"):  # the overlay first: it sits on rw
        if mount.is_dir() and os.path.ismount(mount):
            _libc.umount2(str(mount).encode(), MNT_DETACH)
    shutil.rmtree(state, ignore_errors=True)


def pids_in_pidns(pid: int) -> list[int]:
    """Every process (as the host numbers them) in the pid namespace of `pid`."""
    ns = _pidns(pid)
    return _members(ns) if ns else []


def _pidns(pid: int) -> str | None:
    """The pid namespace of `pid`, never the host's own: a sandbox's init that has died leaves its number to
    be reused, and what then holds it must not be taken for the sandbox."""
    try:
        ns = os.readlink(f"/proc/{pid}/ns/pid")
    except OSError:
        return None
    return None if ns == os.readlink("/proc/self/ns/pid") else ns


def _members(ns: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == ns:
                    out.append(int(entry))
            except OSError:
                continue
    return out


def kill_namespace(pid: int, keep: set[int | None]) -> None:
    """SIGKILL every process in the pid namespace of `pid` but `keep`, until none is left: a fork bomb forks
    while it is being killed. An open fd pins the namespace meanwhile: once freed, its inode number (what
    /proc shows) is reused by the next sandbox's namespace, which must not be taken for this one."""
    try:
        fd = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY)
    except OSError:
        return
    try:
        ns = os.readlink(f"/proc/self/fd/{fd}")
        if ns == os.readlink("/proc/self/ns/pid"):
            return
        for _ in range(50):
            victims = [p for p in _members(ns) if p not in keep]
            if not victims:
                return
            for victim in victims:
                kill(victim)
    finally:
        os.close(fd)


def wait_child(pid: int, comm: str, timeout: float) -> int | None:
    """The first child of `pid` running `comm`: a sandbox's holder process, once its init has started it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split():
                if Path(f"/proc/{child}/comm").read_text().strip() == comm:
                    return int(child)
        except OSError:
            return None
        time.sleep(0.001)
    return None


def kill(pid: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)


def alive(pid: int | None) -> bool:
    if not pid:
        return False
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
