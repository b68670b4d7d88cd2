"""Resource limits for a local sandbox: one cgroup per sandbox (v2 where mounted, else the v1 controllers),
rlimits through prlimit where no cgroup can be written. Counters tell which limit a command ran into."""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from harnessproxy.sandbox import ExecResult, Limits

CGROUP_ROOT = Path("/sys/fs/cgroup")
GROUP = "harnessproxy"


def _write(path: Path, value: str) -> None:
    path.write_text(value)


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
        wanted = {
            k
            for k, v in (
                ("memory", self.limits.memory_mb),
                ("pids", self.limits.pids),
                ("cpu", self.limits.cpus),
            )
            if v is not None
        }
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
        _write(CGROUP_ROOT / "cgroup.subtree_control", enable)
        _write(parent / "cgroup.subtree_control", enable)
        d = parent / self.name
        d.mkdir(exist_ok=True)
        self.dirs["all"] = d
        if self.limits.memory_mb is not None:
            _write(d / "memory.max", str(self.limits.memory_mb << 20))
            with contextlib.suppress(OSError):
                _write(d / "memory.swap.max", "0")
        if self.limits.pids is not None:
            _write(d / "pids.max", str(self.limits.pids))
        if self.limits.cpus is not None:
            _write(d / "cpu.max", f"{int(self.limits.cpus * 100_000)} 100000")
        self.applied = dict.fromkeys(wanted, "cgroup v2")

    def _create_v1(self, wanted: set[str]) -> None:
        for controller in wanted:
            d = CGROUP_ROOT / controller / GROUP / self.name
            d.mkdir(parents=True, exist_ok=True)
            self.dirs[controller] = d
        if self.limits.memory_mb is not None:
            d = self.dirs["memory"]
            _write(d / "memory.limit_in_bytes", str(self.limits.memory_mb << 20))
            with contextlib.suppress(OSError):  # no swap accounting on some kernels
                _write(d / "memory.memsw.limit_in_bytes", str(self.limits.memory_mb << 20))
        if self.limits.pids is not None:
            _write(self.dirs["pids"] / "pids.max", str(self.limits.pids))
        if self.limits.cpus is not None:
            _write(self.dirs["cpu"] / "cpu.cfs_period_us", "100000")
            _write(self.dirs["cpu"] / "cpu.cfs_quota_us", str(int(self.limits.cpus * 100_000)))
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
        """Monotonic counts of limit hits: OOM kills, refused forks."""
        out: dict[str, int] = {}
        mem = self.dirs.get("memory") or self.dirs.get("all")
        if mem is not None:
            name = "memory.events" if "all" in self.dirs else "memory.oom_control"
            out["memory"] = _field(mem / name, "oom_kill")
        pids = self.dirs.get("pids") or self.dirs.get("all")
        if pids is not None:
            out["pids"] = _field(pids / "pids.events", "max")
        return out

    def remove(self) -> None:
        for d in self.dirs.values():
            for _ in range(100):  # killed processes leave their cgroup asynchronously
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.01)


def exec_timeout(limits: Limits, started: float, timeout: float | None) -> float | None:
    """The timeout an exec really gets: its own, cut to what is left of the sandbox's wall clock."""
    if limits.wall_s is None:
        return timeout
    left = max(0.0, started + limits.wall_s - time.monotonic())
    return left if timeout is None else min(timeout, left)


def spent(limits: Limits, started: float) -> ExecResult | None:
    """The answer to an exec once the sandbox's wall clock is used up: nothing more runs."""
    if limits.wall_s is not None and time.monotonic() >= started + limits.wall_s:
        return ExecResult(-9, "", "the sandbox's wall clock is used up\n", 0.0, timed_out=True)
    return None


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
            for _ in range(100):
                try:
                    d.rmdir()
                    break
                except OSError:
                    time.sleep(0.01)


def has_prlimit() -> bool:
    return shutil.which("prlimit") is not None
