"""The docker backend, through the `docker` SDK: the task's image, `--network none`, cpu/memory/pids limits,
labels for gc. The workspace is the same host-side overlay as the local backend's, bind-mounted at the
workdir, so `diff()` is the same; the proxy's socket is made inside the container's network namespace."""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from harnessproxy.sandbox import SandboxError, SandboxSpec
from harnessproxy.sandbox.base import OUTPUT_CAP, SandboxBase
from harnessproxy.sandbox.limits import cgroup_dirs, read_counters
from harnessproxy.sandbox.workspace import (
    RUNTIME_ROOT,
    OverlayWorkspace,
    alive,
    kill_namespace,
    teardown,
    wait_child,
)

LABEL = "harnessproxy.sandbox"
HOLD = ["sleep", "2147483647"]  # the container's main process: keeps it up between commands
USER_HOME = "/tmp/home"  # HOME of an unprivileged spec.user (on the container's own /tmp)


def client() -> Any:
    """A docker client, or a SandboxError that says why there is none."""
    try:
        import docker

        c = docker.from_env(timeout=120)
        c.ping()
        return c
    except Exception as exc:
        raise SandboxError(f"no docker engine reachable: {exc}") from exc


class DockerSandbox(SandboxBase):
    def __init__(
        self, spec: SandboxSpec, *, image: str, sandbox_id: str | None = None, docker: Any = None
    ) -> None:
        self.spec = spec
        self.image = image
        self.id = sandbox_id or f"sb-{uuid.uuid4().hex[:12]}"
        self.state = RUNTIME_ROOT / self.id
        self.workspace = OverlayWorkspace(self.state, Path(spec.workspace), spec.limits.disk_mb)
        self._docker = docker
        self.container: Any = None
        self.pid: int | None = None  # the container's init (tini), as the host numbers it
        self._holder: int | None = None  # its child that keeps the container up
        self._started = time.monotonic()

    @property
    def home(self) -> str:
        return USER_HOME if self.spec.user else "/root"

    @property
    def docker(self) -> Any:
        if self._docker is None:
            self._docker = client()
        return self._docker

    def start(self) -> None:
        import docker.errors
        from docker.types import Mount

        docker_client = self.docker
        self._started = time.monotonic()
        try:  # never pull: an image that is not here is an error, not a download (and no traffic leaves)
            docker_client.images.get(self.image)
        except docker.errors.ImageNotFound as exc:
            raise SandboxError(f"docker image {self.image!r} not found locally (nothing is pulled)") from exc
        self.workspace.mount()
        if self.spec.user:
            self.workspace.give_to(self.spec.user)
        limits = self.spec.limits
        mounts = [Mount(self.spec.workdir, str(self.workspace.merged), type="bind")]
        mounts += [
            Mount(inside, host, type="bind", read_only=True) for host, inside in self.spec.ro_mounts.items()
        ]
        mounts += [Mount(inside, host, type="bind") for host, inside in self.spec.rw_mounts.items()]
        try:
            self.container = docker_client.containers.run(
                self.image,
                HOLD,
                detach=True,
                name=f"harnessproxy-{self.id}",
                network_mode="none",
                dns=["127.0.0.1"],  # a resolver on the sandbox's own loopback, where nothing answers
                labels={LABEL: self.id, f"{LABEL}.controller_pid": str(os.getpid())},
                mounts=mounts,
                working_dir=self.spec.workdir,
                environment=self.spec.env,
                init=True,  # a real pid 1 (tini) reaps orphans: killed processes must not linger as zombies
                nano_cpus=int(limits.cpus * 1e9) if limits.cpus else None,
                mem_limit=f"{limits.memory_mb}m" if limits.memory_mb else None,
                memswap_limit=f"{limits.memory_mb}m" if limits.memory_mb else None,
                pids_limit=limits.pids,
                tmpfs={"/tmp": f"size={limits.disk_mb}m" if limits.disk_mb else ""},
            )
            self.container.reload()
            self.pid = int(self.container.attrs["State"]["Pid"])
            self._holder = wait_child(self.pid, "sleep", 10.0)
        except docker.errors.DockerException as exc:
            self.stop()
            raise SandboxError(f"docker could not start the sandbox: {exc}") from exc
        if not self.pid or not self._holder:
            self.stop()
            raise SandboxError("docker started the container but it is not running")
        if self.spec.user:
            uid = str(self.spec.user)
            self._exec(["sh", "-c", f'mkdir -p {USER_HOME} && chown "$1:$1" {USER_HOME}', "sh", uid], uid=0)

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
        from docker.utils.socket import frames_iter

        api = self.docker.api
        exec_id = api.exec_create(
            self.container.id,
            argv,
            stdin=stdin is not None,
            environment={"HOME": USER_HOME, **env} if uid else env,
            workdir=cwd,
            user=f"{uid}:{uid}" if uid else "",
        )["Id"]
        sock = api.exec_start(exec_id, socket=True)
        raw = getattr(sock, "_sock", sock)
        if stdin is not None:
            raw.sendall(stdin)
        raw.shutdown(socket.SHUT_WR)
        bufs: dict[int, bytearray] = {1: bytearray(), 2: bytearray()}

        def read() -> None:
            try:
                for stream, chunk in frames_iter(sock, tty=False):
                    if stream in bufs and len(bufs[stream]) <= OUTPUT_CAP:
                        bufs[stream] += chunk
            except (OSError, ValueError):  # closed under it: a background child kept the stream open
                pass

        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        timed_out = False
        deadline = None if timeout is None else time.monotonic() + timeout
        while reader.is_alive():
            reader.join(0.05)
            if not api.exec_inspect(exec_id)["Running"]:
                reader.join(0.2)  # a background child may hold the stream: do not wait for it
                break
            if deadline is not None and time.monotonic() >= deadline:
                timed_out = True
                kill_namespace(self.pid, keep={self.pid, self._holder})  # all but tini and the holder
                deadline = None
        code = api.exec_inspect(exec_id).get("ExitCode")
        sock.close()
        if timed_out or code is None:
            code = -9  # as the local backend reports a SIGKILL; docker itself would say 137
        return bytes(bufs[1]), bytes(bufs[2]), code, timed_out

    def _counters(self) -> dict[str, int]:
        return read_counters(cgroup_dirs(self.pid)) if self.pid else {}

    def _enforced(self) -> dict[str, str]:
        return dict.fromkeys(self.spec.limits.requested(), "docker")

    def halt(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):  # already stopped, or the engine went away
                self.container.kill()

    def stop(self) -> None:
        if self.container is not None:
            with contextlib.suppress(Exception):  # already gone, or the engine went away: nothing to keep
                self.container.remove(force=True)
            self.container = None
        teardown(self.state)


def gc(docker_client: Any = None) -> list[str]:
    """Remove containers (and their workspaces) whose controller process is gone."""
    try:
        c = docker_client or client()
    except SandboxError:
        return []
    removed = []
    for container in c.containers.list(all=True, filters={"label": LABEL}):
        owner = container.labels.get(f"{LABEL}.controller_pid")
        if owner and owner.isdigit() and alive(int(owner)):
            continue
        sandbox_id = container.labels.get(LABEL, "")
        container.remove(force=True)
        if sandbox_id:
            teardown(RUNTIME_ROOT / sandbox_id)
        removed.append(sandbox_id)
    return removed
