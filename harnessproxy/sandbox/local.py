"""The local backend: bubblewrap, no daemon.

A long-lived holder process runs in fresh pid/ipc/uts/net/mount namespaces with a read-only view of the host's
/usr, a generated minimal /etc, private /tmp, /proc and /dev, and the workspace: an overlay whose lower dir is
the task's files (shared by every rollout, never written) and whose upper dir is exactly this rollout's change
set. Commands enter the holder's namespaces with nsenter. The network namespace has loopback only; the
rollout's proxy listens inside it (see `listen`).

Debian 12's bubblewrap (0.8) has no --overlay, so the overlay is mounted by the host, which needs root. Each
sandbox keeps its state under RUNTIME_ROOT/<id>; `gc()` removes what a killed controller left behind."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import shutil
import signal
import subprocess
import time
import uuid
from pathlib import Path

from harnessproxy.sandbox import SandboxError, SandboxSpec
from harnessproxy.sandbox.base import OUTPUT_CAP, SandboxBase
from harnessproxy.sandbox.limits import Cgroups, remove_stale
from harnessproxy.sandbox.workspace import (
    RUNTIME_ROOT,
    OverlayWorkspace,
    alive,
    kill_namespace,
    read_owner,
    teardown,
    wait_child,
    write_owner,
)

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_HOME = "/home/sandbox"
_ETC = {
    "passwd": "root:x:0:0:root:/root:/bin/sh\nsandbox:x:1000:1000:sandbox:/home/sandbox:/bin/sh\n"
    "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
    "group": "root:x:0:\nsandbox:x:1000:\nnogroup:x:65534:\n",
    "hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    "hostname": "sandbox\n",
}


_ETC_BINDS = ("/etc/ssl", "/etc/ca-certificates", "/etc/alternatives")  # CA certificates, tool symlinks


def _need(tool: str) -> str:
    path = shutil.which(tool)
    if path is None:
        raise SandboxError(
            f"the local sandbox needs `{tool}` (Debian: apt-get install bubblewrap util-linux)"
        )
    return path


class LocalSandbox(SandboxBase):
    def __init__(self, spec: SandboxSpec, *, sandbox_id: str | None = None) -> None:
        self.spec = spec
        self.id = sandbox_id or f"sb-{uuid.uuid4().hex[:12]}"
        self.state = RUNTIME_ROOT / self.id
        self.workspace = OverlayWorkspace(self.state, Path(spec.workspace), spec.limits.disk_mb)
        self.cgroups = Cgroups(self.id, spec.limits)
        self._holder: subprocess.Popen[bytes] | None = None
        self.pid: int | None = None  # bwrap's init in the sandbox, as the host sees it: nsenter's target
        self._sleeper: int | None = None  # the holder command, kept alive for the sandbox's lifetime
        self._started = time.monotonic()

    # -- lifecycle -----------------------------------------------------------------------------------
    def start(self) -> None:
        self._started = time.monotonic()
        bwrap, _ = _need("bwrap"), _need("nsenter")
        self.workspace.mount()
        (self.state / "etc").mkdir(exist_ok=True)
        for name, text in _ETC.items():
            (self.state / "etc" / name).write_text(text)
        for extra in _ETC_BINDS:  # mount points for the host parts bound into the read-only /etc
            (self.state / "etc" / Path(extra).name).mkdir(exist_ok=True)
        self.cgroups.create()
        self._write_owner()
        r, w = os.pipe()
        try:
            self._holder = subprocess.Popen(
                [bwrap, *self._bwrap_args(), "--info-fd", str(w), "--", "sleep", "infinity"],
                pass_fds=(w,),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
            os.close(w)
            w = -1
            info = _read_all(r)
        finally:
            if w >= 0:
                os.close(w)
            os.close(r)
        try:
            self.pid = int(json.loads(info)["child-pid"])
        except (ValueError, KeyError):
            self.pid = None
        # bwrap reports its in-sandbox init (pid 1 there) before the mounts are done; the init starts the
        # holder command only after, so a `sleep` child means the sandbox is ready.
        self._sleeper = wait_child(self.pid, "sleep", 10.0) if self.pid else None
        if self._sleeper is None:
            if self._holder.poll() is None:
                os.killpg(self._holder.pid, signal.SIGKILL)
            err = self._holder.stderr.read().decode(errors="replace") if self._holder.stderr else ""
            self.stop()
            raise SandboxError(f"bubblewrap did not start: {err.strip() or 'the sandbox did not answer'}")
        for pid in (self.pid, self._sleeper):
            self.cgroups.join(pid)
        self._write_owner()
        if self.spec.user:
            self.workspace.give_to(self.spec.user)
            uid = str(self.spec.user)
            self._exec(["sh", "-c", 'mkdir -p "$HOME" && chown "$1:$1" "$HOME"', "sh", uid], uid=0)

    def _enforced(self) -> dict[str, str]:
        return dict(self.cgroups.applied)

    @property
    def home(self) -> str:
        return "/tmp/home" if self.spec.rootfs else SANDBOX_HOME

    def _bwrap_args(self) -> list[str]:
        args = ["--die-with-parent", "--new-session", "--hostname", "sandbox"]
        args += ["--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-net", "--unshare-cgroup-try"]
        if self.spec.rootfs:  # the task's own root filesystem, its /etc included
            args += ["--ro-bind", str(Path(self.spec.rootfs).resolve()), "/"]
        else:  # the host's system, read-only, with a generated /etc
            args += ["--ro-bind", "/usr", "/usr"]
            for top in ("bin", "sbin", "lib", "lib64", "lib32"):  # merged-/usr hosts: symlinks; else bind
                host = Path("/") / top
                if host.is_symlink():
                    args += ["--symlink", os.readlink(host), f"/{top}"]
                elif host.is_dir():
                    args += ["--ro-bind", str(host), f"/{top}"]
            args += ["--ro-bind", str(self.state / "etc"), "/etc"]
            for extra in _ETC_BINDS:
                if Path(extra).is_dir():
                    args += ["--ro-bind", extra, extra]
        tmp_size = ["--size", str(self.spec.limits.disk_mb << 20)] if self.spec.limits.disk_mb else []
        args += ["--proc", "/proc", "--dev", "/dev", *tmp_size, "--tmpfs", "/tmp"]
        if not self.spec.rootfs:
            args += ["--tmpfs", "/run", "--dir", "/root"]
        args += ["--dir", self.home]
        for host_path, inside in self.spec.ro_mounts.items():
            args += ["--ro-bind", host_path, inside]
        for host_path, inside in self.spec.rw_mounts.items():
            args += ["--bind", host_path, inside]
        args += ["--bind", str(self.workspace.merged), self.spec.workdir]
        args += ["--chdir", self.spec.workdir, "--clearenv"]
        return args

    def halt(self) -> None:
        if self.pid is not None:
            kill_namespace(self.pid, keep=set())
            self.pid = None  # once dead, the number can be reused by another sandbox's init
        if self._holder is not None:
            if self._holder.poll() is None:
                os.killpg(self._holder.pid, signal.SIGKILL)
                self._holder.wait()
            if self._holder.stderr:
                self._holder.stderr.close()

    def stop(self) -> None:
        """Always cleans up, also after a failed start; safe to call twice."""
        self.halt()
        self.cgroups.remove()
        teardown(self.state)

    # -- inside --------------------------------------------------------------------------------------
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
        full_env = {"PATH": DEFAULT_PATH, "HOME": self.home, **self.spec.env, **env}
        cmd = ["nsenter", "-t", str(self.pid), "-m", "-u", "-i", "-n", "-p", "-r", f"--wdns={cwd}"]
        if uid:
            cmd += [f"--setuid={uid}", f"--setgid={uid}"]
        cmd += ["--", "env", "-i", *(f"{k}={v}" for k, v in full_env.items()), *argv]
        if self.cgroups.rlimit_args():
            cmd = ["prlimit", *self.cgroups.rlimit_args(), "--", *cmd]
        if self.cgroups.dirs:  # the command and all it starts belong to the sandbox's cgroup(s)
            files = " ".join(self.cgroups.procs_files())
            cmd = ["/bin/sh", "-c", f'echo $$ | tee {files} >/dev/null && exec "$@"', "sh", *cmd]
        proc = subprocess.Popen(
            cmd,
            stdin=subprocess.PIPE if stdin else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        if stdin and proc.stdin:
            # A command may exit without reading all its input (or fail to start): its exit code says so.
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(stdin)
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.close()
        out, err, timed_out = self._collect(proc, timeout)
        return out, err, proc.returncode if proc.returncode is not None else -signal.SIGKILL, timed_out

    def _counters(self) -> dict[str, int]:
        return self.cgroups.counters()

    def _collect(self, proc: subprocess.Popen[bytes], timeout: float | None) -> tuple[bytes, bytes, bool]:
        """Read both pipes until the command exits; a background child that keeps a pipe open does not hold
        the call once the command itself is done. On timeout every process of the command's tree dies."""
        deadline = None if timeout is None else time.monotonic() + timeout
        bufs = {"out": bytearray(), "err": bytearray()}
        sel = selectors.DefaultSelector()
        assert proc.stdout and proc.stderr
        sel.register(proc.stdout, selectors.EVENT_READ, "out")
        sel.register(proc.stderr, selectors.EVENT_READ, "err")
        exited_at: float | None = None
        timed_out = False
        while sel.get_map():
            now = time.monotonic()
            if deadline is not None and now >= deadline and proc.poll() is None:
                timed_out = True
                self._kill_tree(proc)
                deadline = None
            if proc.poll() is not None:
                exited_at = exited_at or now
                if now - exited_at > 0.2:  # leftover background writers: stop listening to them
                    break
            for key, _ in sel.select(0.05):  # EOF wakes it at once; the tick serves timeouts and leftovers
                chunk = os.read(key.fileobj.fileno(), 65536)  # type: ignore[union-attr]
                if not chunk:
                    sel.unregister(key.fileobj)
                elif len(bufs[key.data]) <= OUTPUT_CAP:
                    bufs[key.data] += chunk
        sel.close()
        proc.wait()
        proc.stdout.close()
        proc.stderr.close()
        return bytes(bufs["out"]), bytes(bufs["err"]), timed_out

    def _kill_tree(self, proc: subprocess.Popen[bytes]) -> None:
        """Kill every process in the sandbox but the holder: background children and setsid escapees too."""
        assert self.pid is not None
        kill_namespace(self.pid, keep={self.pid, self._sleeper})
        proc.kill()

    def _write_owner(self) -> None:
        """What gc needs to clean up after a controller that was killed before stop()."""
        pidns = None
        if self.pid:
            with contextlib.suppress(OSError):
                pidns = os.readlink(f"/proc/{self.pid}/ns/pid")
        write_owner(
            self.state,
            holder_pid=self._holder.pid if self._holder else None,
            sandbox_pid=self.pid,
            pidns=pidns,
        )


def _read_all(fd: int) -> bytes:
    chunks = []
    while chunk := os.read(fd, 4096):
        chunks.append(chunk)
        if b"}" in chunk:
            break
    return b"".join(chunks)


def gc() -> list[str]:
    """Remove sandboxes whose controller is gone (killed), of either backend: processes, cgroups, overlay
    mounts, state dirs. (docker.gc removes the containers.)"""
    removed = []
    if not RUNTIME_ROOT.is_dir():
        return removed
    for state in sorted(RUNTIME_ROOT.iterdir()):
        owner = read_owner(state)
        if alive(owner.get("controller_pid")):
            continue
        holder = owner.get("holder_pid")
        if alive(holder):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(holder, signal.SIGKILL)
        inner = owner.get("sandbox_pid")
        with contextlib.suppress(OSError):  # only if that pid still is the sandbox's (pids get reused)
            if inner and os.readlink(f"/proc/{inner}/ns/pid") == owner.get("pidns"):
                kill_namespace(inner, keep=set())
        remove_stale(state.name)
        teardown(state)
        removed.append(state.name)
    return removed
