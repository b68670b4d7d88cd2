"""The docker sandbox against a real engine (started by scripts/setup.sh with --bridge=none --iptables=false),
on a base image made here. Skips only when no engine can be reached, saying why."""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from harnessproxy.api import start_proxy
from harnessproxy.proxy.scripted import ScriptedUpstream
from harnessproxy.sandbox import Limits, SandboxError, SandboxSpec
from harnessproxy.sandbox.docker import LABEL, DockerSandbox, client, gc
from harnessproxy.sandbox.images import ensure_base_image
from harnessproxy.sandbox.workspace import RUNTIME_ROOT, pids_in_pidns


def _engine():  # type: ignore[no-untyped-def]
    try:
        return client(), None
    except SandboxError as exc:
        return None, str(exc)


ENGINE, WHY = _engine()
pytestmark = [
    pytest.mark.skipif(ENGINE is None, reason=f"no docker engine could be reached: {WHY}"),
    pytest.mark.skipif(os.geteuid() != 0, reason="the sandbox workspace is an overlay mount: needs root"),
]


@pytest.fixture(scope="module")
def image() -> str:
    return ensure_base_image(ENGINE)


@pytest.fixture
def task(tmp_path: Path) -> Path:
    ws = tmp_path / "task"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("hello\n")
    (ws / "sub" / "k.txt").write_text("keep\n")
    return ws


@pytest.fixture
def sandbox(task: Path, image: str):
    sb = DockerSandbox(SandboxSpec(task, env={"FROM_SPEC": "spec"}), image=image, docker=ENGINE)
    sb.start()
    yield sb
    sb.stop()


def sh(sb: DockerSandbox, script: str, **kw):
    return sb.exec(["sh", "-c", script], **kw)


def test_exec_exit_code_streams_env_cwd_stdin(sandbox: DockerSandbox) -> None:
    r = sh(sandbox, "echo out; echo err >&2; pwd; echo $FROM_SPEC $PER_CALL; exit 7", env={"PER_CALL": "c"})
    assert (r.exit_code, r.stdout, r.stderr) == (7, "out\n/workspace\nspec c\n", "err\n")
    assert sh(sandbox, "pwd", cwd="/workspace/sub").stdout == "/workspace/sub\n"
    assert sandbox.exec(["cat"], timeout=5).stdout == ""
    assert sandbox.exec(["cat"], stdin=b"piped").stdout == "piped"


def test_nothing_of_the_host_leaks_in(sandbox: DockerSandbox, monkeypatch) -> None:
    monkeypatch.setenv("HP_HOST_SECRET", "sk-should-not-leak")
    r = sh(sandbox, "env; ls -a /root; ls /")
    assert "sk-should-not-leak" not in r.stdout and "HP_HOST_SECRET" not in r.stdout
    assert ".bashrc" not in r.stdout and "home" not in r.stdout.split()


def test_no_route_out_but_the_proxy(sandbox: DockerSandbox, tmp_path: Path) -> None:
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    port = host.getsockname()[1]
    try:
        r = sh(
            sandbox,
            f"nc -w 2 127.0.0.1 {port} </dev/null && echo REACHED || echo refused; "
            "nslookup example.com >/dev/null 2>&1 && echo RESOLVED || echo no-dns; "
            "ls /sys/class/net",
            timeout=20,
        )
    finally:
        host.close()
    assert r.stdout.split() == ["refused", "no-dns", "lo"], r.stdout + r.stderr

    async def via_proxy() -> str:
        up = ScriptedUpstream()
        await up.start()
        proxy = await start_proxy(up.url, rollout_id="dk", journal_dir=tmp_path, sock=sandbox.listen())
        body = '{"model": "chat_text", "messages": []}'
        cmd = (
            f"wget -q -O - --header 'Content-Type: application/json' --post-data '{body}' "
            f"http://127.0.0.1:{proxy.server.port}/v1/chat/completions"
        )
        try:
            res = await asyncio.to_thread(sh, sandbox, cmd, timeout=20)
        finally:
            await proxy.stop()
            await up.stop()
        return res.stdout + res.stderr

    assert "FINAL_ANSWER_OK" in asyncio.run(via_proxy())


def test_writes_outside_the_workspace_vanish(sandbox: DockerSandbox) -> None:
    sh(sandbox, "echo x > /etc/hp-x; echo y > /tmp/hp-y")
    assert sandbox.diff().empty
    assert not Path("/etc/hp-x").exists() and not Path("/tmp/hp-y").exists()


def test_timeout_kills_the_tree_background_children_too(sandbox: DockerSandbox) -> None:
    r = sh(sandbox, "sleep 101 & setsid sleep 102 & sleep 103", timeout=1)
    assert r.timed_out and r.exit_code == -9 and r.duration_s < 5
    left = [Path(f"/proc/{p}/cmdline").read_bytes() for p in pids_in_pidns(sandbox.pid)]
    assert not [c for c in left if b"sleep\x0010" in c], left
    assert sh(sandbox, "echo alive").stdout == "alive\n"


def test_diff_is_exactly_the_change(sandbox: DockerSandbox, task: Path) -> None:
    sh(sandbox, "echo more >> a.txt; rm -r sub; echo n > new.txt")
    d = sandbox.diff()
    assert (d.added, d.modified, d.deleted) == (["new.txt"], ["a.txt"], ["sub/k.txt"])
    assert "+more" in d.patch
    assert (task / "a.txt").read_text() == "hello\n"


def test_limits_contain_fork_bomb_memory_hog_disk_filler(task: Path, image: str) -> None:
    spec = SandboxSpec(task, limits=Limits(cpus=0.5, memory_mb=64, pids=32, disk_mb=16))
    with DockerSandbox(spec, image=image, docker=ENGINE) as sb:
        assert sb.limits_applied == {"cpu": "docker", "memory": "docker", "pids": "docker", "disk": "tmpfs"}
        r = sh(sb, "bomb() { bomb | bomb & }; bomb; sleep 30", timeout=3)
        assert "pids" in r.limits_hit
        r = sh(sb, "awk 'BEGIN { s = \"xxxxxxxxxxxxxxxx\"; while (1) s = s s }'", timeout=30)
        assert r.exit_code != 0 and "memory" in r.limits_hit
        r = sh(sb, "head -c 64000000 /dev/zero > big.bin; echo rc=$?", timeout=30)
        assert "rc=1" in r.stdout and "disk" in r.limits_hit
        r = sh(sb, "head -c 64000000 /dev/zero > /tmp/big.bin; echo rc=$?", timeout=30)
        assert "rc=1" in r.stdout
        assert sh(sb, "echo usable", timeout=30).stdout == "usable\n"


def test_twenty_in_parallel_do_not_interfere(task: Path, image: str) -> None:
    results: dict[int, tuple] = {}

    def one(i: int) -> None:
        with DockerSandbox(SandboxSpec(task), image=image, docker=ENGINE) as sb:
            sh(sb, f"echo {i} > mine.txt")
            results[i] = (sh(sb, "cat mine.txt").stdout, sb.diff().added)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: (f"{i}\n", ["mine.txt"]) for i in range(20)}


def test_missing_image_is_a_clear_error(task: Path) -> None:
    sb = DockerSandbox(SandboxSpec(task), image="harnessproxy-no-such-image:nope", docker=ENGINE)
    with pytest.raises(SandboxError, match="not found"):
        sb.start()
    assert not sb.state.exists()


def test_gc_removes_what_a_killed_controller_left(task: Path, image: str) -> None:
    script = textwrap.dedent(f"""
        import time
        from pathlib import Path
        from harnessproxy.sandbox import SandboxSpec
        from harnessproxy.sandbox.docker import DockerSandbox
        sb = DockerSandbox(SandboxSpec(Path({str(task)!r})), image={image!r})
        sb.start()
        print(sb.id, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    sandbox_id = proc.stdout.readline().strip()
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert ENGINE.containers.list(filters={"label": f"{LABEL}={sandbox_id}"})  # left behind
    assert sandbox_id in gc(ENGINE)
    assert not ENGINE.containers.list(all=True, filters={"label": f"{LABEL}={sandbox_id}"})
    assert not (RUNTIME_ROOT / sandbox_id).exists()


def test_wall_clock_bounds_the_whole_sandbox(task: Path, image: str) -> None:
    with DockerSandbox(SandboxSpec(task, limits=Limits(wall_s=2)), image=image, docker=ENGINE) as sb:
        r = sh(sb, "sleep 30", timeout=60)
        assert r.timed_out and r.duration_s < 4
        assert sh(sb, "echo too late").timed_out


def test_builds_the_tasks_dockerfile_offline(task: Path, image: str, tmp_path: Path) -> None:
    from harnessproxy.sandbox.images import build_image

    env = tmp_path / "environment"
    env.mkdir()
    (env / "tool.sh").write_text("echo from the task image\n")
    (env / "Dockerfile").write_text(
        f"FROM {image}\nCOPY tool.sh /opt/tool.sh\nRUN echo built > /opt/built.txt\n"
    )
    tag = build_image(ENGINE, env)
    assert build_image(ENGINE, env) == tag  # an unchanged context is built once
    with DockerSandbox(SandboxSpec(task), image=tag, docker=ENGINE) as sb:
        assert sh(sb, "cat /opt/built.txt; sh /opt/tool.sh").stdout == "built\nfrom the task image\n"
    (env / "Dockerfile").write_text(f"FROM {image}\nRUN exit 3\n")
    with pytest.raises(SandboxError, match=r"building .*Dockerfile failed"):
        build_image(ENGINE, env)
    # A base image that is not here is refused before the builder could try to pull it.
    (env / "Dockerfile").write_text("FROM not-on-this-machine:1\n")
    with pytest.raises(SandboxError, match="is not on this machine"):
        build_image(ENGINE, env)


def test_base_images_of_a_dockerfile() -> None:
    from harnessproxy.sandbox.images import base_images

    text = (
        "ARG V=1\nFROM python:3.12 AS build\nRUN x\nFROM build\n"
        "FROM --platform=linux/amd64 deb:$V\nFROM scratch\n"
    )
    assert base_images(text) == ["python:3.12"]


def test_an_unprivileged_user_owns_the_workspace_and_nothing_else(task: Path, image: str) -> None:
    with DockerSandbox(SandboxSpec(task, user=1000), image=image, docker=ENGINE) as sb:
        r = sh(
            sb,
            "id -u; echo more >> a.txt && echo new > b.txt && echo home > $HOME/h && echo ok; "
            "touch /etc/hp-nope 2>/dev/null || echo denied",
        )
        assert r.stdout.split() == ["1000", "ok", "denied"], r.stdout + r.stderr
        d = sb.diff()
        assert (d.added, d.modified, d.deleted) == (["b.txt"], ["a.txt"], [])  # the hand-over left no trace
    assert (task / "a.txt").read_text() == "hello\n" and (task / "a.txt").stat().st_uid == 0


def test_gc_of_either_backend_leaves_a_live_sandbox_alone(sandbox: DockerSandbox) -> None:
    from harnessproxy.sandbox import local

    assert sandbox.id not in gc(ENGINE) + local.gc()
    assert sh(sandbox, "cat a.txt").stdout == "hello\n"  # its workspace is still mounted
