"""Resource limits for a local sandbox: one cgroup per sandbox (v2 where mounted, else the v1 controllers),
rlimits through prlimit where no cgroup can be written. Counters tell which limit a command ran into."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from harnessproxy.sandbox import Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP = "harnessproxy"


class Cgroups:
    """The cgroup(s) of one sandbox; `applied` says how each limit is enforced ("cgroup v1", "rlimit")."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = name
        self.limits = limits
        self.dirs: dict[str, Path] = {}  # controller -> cgroup dir ("all" on v2)
        self.applied: dict[str, str] = {}

    @property
    def v2(self) -> bool:
        return (CGROUP_ROOT / "cgroup.controllers").exists()

    def create(self) -> None:
        wanted = self.limits.requested()
        if not wanted:
            return
        try:
            self._create_v2(wanted) if self.v2 else self._create_v1(wanted)
        except OSError:
            self.remove()
            self.dirs, self.applied = {}, {}
        for key in wanted - set(self.applied):
            if key in ("memory", "pids"):
                self.applied[key] = "rlimit"  # per process (RLIMIT_AS, RLIMIT_NPROC), weaker than a cgroup
            else:
                self.applied[key] = "none"

    def _create_v2(self, wanted: set[str]) -> None:
        parent = CGROUP_ROOT / GROUP
        parent.mkdir(exist_ok=True)
        enable = " ".join(f"+{c}" for c in sorted(wanted))
        (CGROUP_ROOT / "cgroup.subtree_control").write_text(enable)
        (parent / "cgroup.subtree_control").write_text(enable)
        d = parent / self.name
        d.mkdir(exist_ok=True)
        self.dirs["all"] = d
        if self.limits.memory_mb is not None:
            (d / "memory.max").write_text(str(self.limits.memory_mb << 20))
            with contextlib.suppress(OSError):
                (d / "memory.swap.max").write_text("0")
        if self.limits.pids is not None:
            (d / "pids.max").write_text(str(self.limits.pids))
        if self.limits.cpus is not None:
            (d / "cpu.max").write_text(f"{int(self.limits.cpus * 100_000)} 100000")
        self.applied = dict.fromkeys(wanted, "cgroup v2")

    def _create_v1(self, wanted: set[str]) -> None:
        for controller in wanted:
            d = CGROUP_ROOT / controller / GROUP / self.name
            d.mkdir(parents=True, exist_ok=True)
            self.dirs[controller] = d
        if self.limits.memory_mb is not None:
            d = self.dirs["memory"]
            (d / "memory.limit_in_bytes").write_text(str(self.limits.memory_mb << 20))
            with contextlib.suppress(OSError):  # no swap accounting on some kernels
                (d / "memory.memsw.limit_in_bytes").write_text(str(self.limits.memory_mb << 20))
        if self.limits.pids is not None:
            (self.dirs["pids"] / "pids.max").write_text(str(self.limits.pids))
        if self.limits.cpus is not None:
            (self.dirs["cpu"] / "cpu.cfs_period_us").write_text("100000")
            (self.dirs["cpu"] / "cpu.cfs_quota_us").write_text(str(int(self.limits.cpus * 100_000)))
        self.applied = dict.fromkeys(wanted, "cgroup v1")

    def procs_files(self) -> list[str]:
        return [str(d / "cgroup.procs") for d in self.dirs.values()]

    def join(self, pid: int) -> None:
        for f in self.procs_files():
            with contextlib.suppress(OSError):
                Path(f).write_text(str(pid))

    def rlimit_args(self) -> list[str]:
        """prlimit options for the limits no cgroup enforces."""
        args = []
        if self.applied.get("memory") == "rlimit" and self.limits.memory_mb is not None:
            args.append(f"--as={self.limits.memory_mb << 20}")
        if self.applied.get("pids") == "rlimit" and self.limits.pids is not None:
            args.append(f"--nproc={self.limits.pids}")
        return args

    def counters(self) -> dict[str, int]:
        return read_counters(self.dirs)

    def remove(self) -> None:
        for d in self.dirs.values():
            _rmdir(d)


def read_counters(dirs: dict[str, Path]) -> dict[str, int]:
    """Monotonic counts of limit hits in a cgroup (controller -> dir, or "all" -> the v2 dir): OOM kills
    ("memory") and refused forks ("pids")."""
    out: dict[str, int] = {}
    files = {
        "memory": ("memory.events", "all") if "all" in dirs else ("memory.oom_control", "memory"),
        "pids": ("pids.events", "all" if "all" in dirs else "pids"),
    }
    for limit, (name, controller) in files.items():
        d = dirs.get(controller)
        if d is not None and (d / name).exists():
            out[limit] = _field(d / name, "oom_kill" if limit == "memory" else "max")
    return out


def cgroup_dirs(pid: int) -> dict[str, Path]:
    """The memory and pids cgroups of a process (e.g. a container's init), shaped for read_counters."""
    dirs: dict[str, Path] = {}
    try:
        lines = Path(f"/proc/{pid}/cgroup").read_text().splitlines()
    except OSError:
        return dirs
    for line in lines:
        _, names, path = line.split(":", 2)
        if names == "":
            if (CGROUP_ROOT / "cgroup.controllers").exists():
                dirs["all"] = CGROUP_ROOT / path.lstrip("/")
            continue
        for controller in ("memory", "pids"):
            if controller in names.split(","):
                dirs[controller] = CGROUP_ROOT / controller / path.lstrip("/")
    return dirs


def _rmdir(d: Path) -> None:
    for _ in range(100):  # killed processes leave their cgroup asynchronously
        try:
            d.rmdir()
            return
        except FileNotFoundError:
            return
        except OSError:
            time.sleep(0.01)


def exec_timeout(limits: Limits, started: float, timeout: float | None) -> float | None:
    """The timeout an exec really gets: its own, cut to what is left of the sandbox's wall clock."""
    if limits.wall_s is None:
        return timeout
    left = max(0.0, started + limits.wall_s - time.monotonic())
    return left if timeout is None else min(timeout, left)


def _field(path: Path, key: str) -> int:
    try:
        for line in path.read_text().splitlines():
            name, _, value = line.partition(" ")
            if name == key:
                return int(value)
    except (OSError, ValueError):
        pass
    return 0


def remove_stale(name: str) -> None:
    """gc: the cgroups of sandbox `name`, in whichever hierarchy they were made."""
    for d in [
        CGROUP_ROOT / GROUP / name,
        *(CGROUP_ROOT / c / GROUP / name for c in ("memory", "pids", "cpu")),
    ]:
        if d.is_dir():
            for pid in (d / "cgroup.procs").read_text().split() if (d / "cgroup.procs").exists() else []:
                with contextlib.suppress(OSError):
                    os.kill(int(pid), 9)
            _rmdir(d)
