"""The local (bubblewrap) sandbox: isolation, exec, diff, cleanup. Real bwrap, namespaces and overlay."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from harnessproxy.api import start_proxy
from harnessproxy.proxy.scripted import ScriptedUpstream
from harnessproxy.sandbox import Limits, SandboxError, SandboxSpec
from harnessproxy.sandbox.local import LocalSandbox, gc
from harnessproxy.sandbox.workspace import RUNTIME_ROOT, pids_in_pidns

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the local sandbox mounts an overlay: needs root"),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup.sh)"
    ),
]


@pytest.fixture
def task(tmp_path: Path) -> Path:
    ws = tmp_path / "task"
    (ws / "sub").mkdir(parents=True)
    (ws / "a.txt").write_text("hello\n")
    (ws / "sub" / "k.txt").write_text("keep\n")
    (ws / "gone.txt").write_text("x\n")
    (ws / "blob.bin").write_bytes(bytes(range(256)))
    return ws


@pytest.fixture
def sandbox(task: Path):
    sb = LocalSandbox(SandboxSpec(task, env={"FROM_SPEC": "spec"}))
    sb.start()
    yield sb
    sb.stop()


def sh(sb: LocalSandbox, script: str, **kw):
    return sb.exec(["sh", "-c", script], **kw)


def test_exec_exit_code_streams_env_cwd_stdin(sandbox: LocalSandbox) -> None:
    r = sh(
        sandbox, "echo out; echo err >&2; pwd; echo $FROM_SPEC $PER_CALL $HOME; exit 7", env={"PER_CALL": "c"}
    )
    assert r.exit_code == 7
    assert r.stdout.split("\n")[:3] == ["out", "/workspace", "spec c /home/sandbox"]
    assert r.stderr == "err\n"
    assert sh(sandbox, "pwd", cwd="/workspace/sub").stdout == "/workspace/sub\n"
    assert sandbox.exec(["cat"], timeout=5).stdout == ""  # stdin closed by default: cat ends at once
    assert sandbox.exec(["cat"], stdin=b"piped").stdout == "piped"


def test_output_is_capped_and_says_so(sandbox: LocalSandbox) -> None:
    r = sh(sandbox, "head -c 3000000 /dev/zero | tr '\\0' x")
    assert r.stdout_truncated and len(r.stdout) == 1 << 20
    assert not r.stderr_truncated


def test_nothing_of_the_host_leaks_in(sandbox: LocalSandbox, monkeypatch) -> None:
    monkeypatch.setenv("HP_HOST_SECRET", "sk-should-not-leak")
    home_file = Path.home() / f".hp-host-file-{os.getpid()}"
    home_file.write_text("host secret")
    try:
        r = sh(sandbox, f"env; ls -a /root /home; cat {home_file} 2>/dev/null; ls /etc")
    finally:
        home_file.unlink()
    assert "sk-should-not-leak" not in r.stdout and "HP_HOST_SECRET" not in r.stdout
    assert home_file.name not in r.stdout and "host secret" not in r.stdout
    assert "ANTHROPIC" not in r.stdout and "OPENAI" not in r.stdout
    assert "shadow" not in r.stdout  # a generated /etc, not the host's


def test_no_route_out_but_the_proxy(sandbox: LocalSandbox, tmp_path: Path) -> None:
    host = socket.socket()
    host.bind(("127.0.0.1", 0))
    host.listen(1)
    port = host.getsockname()[1]
    probe = textwrap.dedent(f"""
        import socket
        try:
            socket.create_connection(("127.0.0.1", {port}), timeout=2); print("host loopback: REACHED")
        except OSError as e:
            print("host loopback:", type(e).__name__)
        try:
            socket.getaddrinfo("example.com", 80); print("dns: RESOLVED")
        except OSError as e:
            print("dns:", type(e).__name__)
        print("interfaces:", sorted(n for _, n in socket.if_nameindex()))
    """)
    try:
        r = sandbox.exec(["python3", "-c", probe], timeout=20)
    finally:
        host.close()
    assert "host loopback: ConnectionRefusedError" in r.stdout, r.stdout + r.stderr
    assert "dns: gaierror" in r.stdout
    assert "interfaces: ['lo']" in r.stdout

    async def via_proxy() -> str:
        up = ScriptedUpstream()
        await up.start()
        proxy = await start_proxy(up.url, rollout_id="sb", journal_dir=tmp_path, sock=sandbox.listen())
        call = (
            "import json, urllib.request as u; req = u.Request("
            f"'http://127.0.0.1:{proxy.server.port}/v1/chat/completions', data=json.dumps("
            "{'model': 'chat_text', 'messages': []}).encode(), "
            "headers={'content-type': 'application/json'}); "
            "print(json.load(u.urlopen(req))['choices'][0]['message']['content'])"
        )
        try:
            res = await asyncio.to_thread(sandbox.exec, ["python3", "-c", call], timeout=20)
        finally:
            await proxy.stop()
            await up.stop()
        with pytest.raises(OSError):  # and the proxy's socket is not on the host's loopback
            socket.create_connection(("127.0.0.1", proxy.server.port), timeout=1)
        return res.stdout + res.stderr

    assert "FINAL_ANSWER_OK" in asyncio.run(via_proxy())


def test_writes_outside_the_workspace_fail_or_vanish(sandbox: LocalSandbox) -> None:
    r = sh(sandbox, "touch /usr/hp-x; echo $?; touch /etc/hp-x; echo $?; echo t > /tmp/hp-vanish && echo ok")
    codes = r.stdout.split()
    assert codes[0] != "0" and codes[1] != "0" and codes[2] == "ok"
    assert not Path("/usr/hp-x").exists() and not Path("/tmp/hp-vanish").exists()
    assert sandbox.diff().empty


def test_timeout_kills_the_tree_background_and_setsid_children_too(sandbox: LocalSandbox) -> None:
    r = sh(sandbox, "sleep 101 & setsid sleep 102 & (sleep 103 &) ; sleep 104", timeout=1)
    assert r.timed_out and r.exit_code < 0
    assert r.duration_s < 5
    left = []
    for pid in pids_in_pidns(sandbox.pid):
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
        left.append(cmdline.decode())
    assert not [c for c in left if "sleep 10" in c], left
    assert sh(sandbox, "echo alive").stdout == "alive\n"  # the sandbox itself lives on


def test_background_child_holding_stdout_does_not_hold_the_call(sandbox: LocalSandbox) -> None:
    r = sh(sandbox, "sleep 30 & echo started", timeout=20)
    assert r.stdout == "started\n" and r.exit_code == 0 and not r.timed_out and r.duration_s < 5


def test_diff_is_exactly_the_change_and_git_applies_it(
    sandbox: LocalSandbox, task: Path, tmp_path: Path
) -> None:
    sh(
        sandbox,
        "echo changed >> a.txt; rm gone.txt; rm -r sub; mkdir -p new/deep; printf 'x' > new/deep/n.txt;"
        " printf '\\0\\1' > blob.bin; echo unchanged > same.txt; rm same.txt; touch empty.txt",
    )
    d = sandbox.diff()
    assert d.added == ["empty.txt", "new/deep/n.txt"]
    assert d.modified == ["a.txt", "blob.bin"]
    assert d.deleted == ["gone.txt", "sub/k.txt"]
    assert d.binary == ["blob.bin"]
    assert (task / "a.txt").read_text() == "hello\n" and (task / "gone.txt").exists()  # the task is untouched
    # The patch reproduces every text change on a pristine copy of the task.
    copy = tmp_path / "copy"
    shutil.copytree(task, copy)
    subprocess.run(["git", "apply", "--unsafe-paths", "-"], input=d.patch.encode(), cwd=copy, check=True)
    assert (copy / "a.txt").read_text() == "hello\nchanged\n"
    assert not (copy / "gone.txt").exists() and not (copy / "sub" / "k.txt").exists()
    assert (copy / "new" / "deep" / "n.txt").read_text() == "x"
    # The archive carries every added or modified file, binary included.
    import io
    import tarfile

    with tarfile.open(fileobj=io.BytesIO(d.archive)) as tar:
        assert sorted(tar.getnames()) == ["a.txt", "blob.bin", "empty.txt", "new/deep/n.txt"]
        assert tar.extractfile("blob.bin").read() == b"\0\1"


def test_files_in_and_out_and_no_escape(sandbox: LocalSandbox) -> None:
    sandbox.write_file("sub/w.txt", b"written")
    assert sh(sandbox, "cat sub/w.txt").stdout == "written"
    sh(sandbox, "echo inside > /workspace/i.txt")
    assert sandbox.read_file("/workspace/i.txt") == b"inside\n"
    for bad in ("../../etc/passwd", "/etc/passwd"):
        with pytest.raises(SandboxError, match="outside the workspace"):
            sandbox.read_file(bad)


def test_twenty_sandboxes_in_parallel_do_not_interfere(task: Path) -> None:
    results: dict[int, tuple] = {}

    def one(i: int) -> None:
        sb = LocalSandbox(SandboxSpec(task))
        sb.start()
        try:
            sh(sb, f"echo {i} > mine.txt; echo {i} >> a.txt")
            r = sh(sb, "cat mine.txt; tail -1 a.txt")
            d = sb.diff()
            results[i] = (r.stdout, d.added, d.modified)
        finally:
            sb.stop()

    threads = [threading.Thread(target=one, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert results == {i: (f"{i}\n{i}\n", ["mine.txt"], ["a.txt"]) for i in range(20)}
    assert (task / "a.txt").read_text() == "hello\n"


def test_start_failure_is_a_clear_error_and_cleans_up(tmp_path: Path) -> None:
    sb = LocalSandbox(SandboxSpec(tmp_path / "missing"))
    with pytest.raises(SandboxError, match="is not a directory"):
        sb.start()
    sb.stop()  # idempotent
    assert not sb.state.exists()


def test_gc_removes_what_a_killed_controller_left(task: Path) -> None:
    script = textwrap.dedent(f"""
        import sys, time
        from pathlib import Path
        from harnessproxy.sandbox import SandboxSpec
        from harnessproxy.sandbox.local import LocalSandbox
        sb = LocalSandbox(SandboxSpec(Path({str(task)!r})))
        sb.start()
        print(sb.id, sb.pid, flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    sandbox_id, pid = proc.stdout.readline().split()
    state = RUNTIME_ROOT / sandbox_id
    assert os.path.ismount(state / "merged")
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert state.exists()  # a SIGKILL leaves the mount and the state behind
    assert sandbox_id in gc()
    assert not state.exists()
    for _ in range(200):  # the sandbox's processes are dead (gone, or zombies awaiting their reaper)
        if _dead(int(pid)):
            break
        time.sleep(0.01)
    assert _dead(int(pid))


def test_gc_leaves_a_live_controllers_sandbox_alone(sandbox: LocalSandbox) -> None:
    assert sandbox.id not in gc()
    assert sh(sandbox, "echo still here").stdout == "still here\n"


def _dead(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def test_cli_sandbox_run_shows_output_exit_and_diff_and_never_touches_dir(task: Path) -> None:
    cli = [sys.executable, "-m", "harnessproxy.cli", "sandbox", "run", "--workspace", str(task)]
    r = subprocess.run(
        [*cli, "--", "sh", "-c", "echo hi; echo more >> a.txt; exit 3"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 3
    assert r.stdout.startswith("hi\n") and "+more" in r.stdout
    assert "exit code 3" in r.stderr and "changed: +0 ~1 -0" in r.stderr
    assert (task / "a.txt").read_text() == "hello\n"
    r = subprocess.run(
        [*cli, "--timeout", "0.5", "--", "sleep", "30"], capture_output=True, text=True, timeout=60
    )
    assert r.returncode == 124 and "timed out" in r.stderr
    r = subprocess.run(
        [sys.executable, "-m", "harnessproxy.cli", "sandbox", "gc"], capture_output=True, text=True
    )
    assert r.returncode == 0 and "removed" in r.stdout


@pytest.fixture
def limited(task: Path):
    sb = LocalSandbox(SandboxSpec(task, limits=Limits(cpus=0.5, memory_mb=96, pids=48, disk_mb=16)))
    sb.start()
    yield sb
    sb.stop()


def test_limits_say_how_they_are_enforced(limited: LocalSandbox) -> None:
    applied = limited.limits_applied
    assert applied["disk"] == "tmpfs"
    assert {applied["memory"], applied["pids"], applied["cpu"]} <= {"cgroup v1", "cgroup v2"}, applied


def test_fork_bomb_is_contained_and_reported(limited: LocalSandbox) -> None:
    r = sh(limited, "bomb() { bomb | bomb & }; bomb; sleep 30", timeout=3)
    assert "pids" in r.limits_hit
    assert sh(limited, "echo still usable", timeout=30).stdout == "still usable\n"


def test_memory_hog_is_killed_and_reported(limited: LocalSandbox) -> None:
    r = limited.exec(["python3", "-c", "x = bytearray(400 * 1024 * 1024); print('survived')"], timeout=30)
    assert r.exit_code == -9 and "survived" not in r.stdout
    assert r.limits_hit == ["memory"]


def test_disk_filler_is_contained_and_reported(limited: LocalSandbox) -> None:
    r = sh(limited, "head -c 64000000 /dev/zero > big.bin; echo rc=$?", timeout=30)
    assert "No space left on device" in r.stderr and "rc=1" in r.stdout
    assert "disk" in r.limits_hit
    r = sh(limited, "head -c 64000000 /dev/zero > /tmp/big.bin; echo rc=$?", timeout=30)
    assert "rc=1" in r.stdout  # /tmp has its own cap


def test_bwrap_failure_is_a_clear_error_and_cleans_up(task: Path) -> None:
    sb = LocalSandbox(SandboxSpec(task, ro_mounts={"/nonexistent-hp-cache": "/opt/cache"}))
    with pytest.raises(SandboxError, match=r"bubblewrap did not start: .*nonexistent-hp-cache"):
        sb.start()
    assert not sb.state.exists()


def test_wall_clock_bounds_the_whole_sandbox(task: Path) -> None:
    with LocalSandbox(SandboxSpec(task, limits=Limits(wall_s=1.5))) as sb:
        assert sh(sb, "sleep 0.2; echo first").stdout == "first\n"
        r = sh(sb, "sleep 30", timeout=60)  # its own timeout is longer: the sandbox's clock wins
        assert r.timed_out and r.duration_s < 3
        assert sh(sb, "echo too late").timed_out


def test_a_tasks_own_root_filesystem(task: Path, tmp_path: Path) -> None:
    from harnessproxy.sandbox.images import busybox_rootfs

    rootfs = busybox_rootfs(tmp_path / "rootfs")
    with LocalSandbox(SandboxSpec(task, rootfs=rootfs)) as sb:
        r = sh(sb, "ls /; cat /etc/passwd; echo $HOME; cat a.txt; ls /usr 2>&1 | head -1")
        listing, rest = r.stdout.split("root:x:0:0", 1)
        assert listing.split() == sorted(p.name for p in rootfs.iterdir())  # the task's root, not the host's
        assert "/tmp/home\nhello\n" in rest and "No such file" in rest
        sh(sb, "echo changed > a.txt")
        assert sb.diff().modified == ["a.txt"]
        assert sh(sb, "touch /bin/x 2>&1; echo $?").stdout.strip().endswith("1")  # read-only


def test_an_unprivileged_user_owns_the_workspace_and_nothing_else(task: Path) -> None:
    with LocalSandbox(SandboxSpec(task, user=1000)) as sb:
        r = sh(
            sb,
            "id -u; echo more >> a.txt && echo new > b.txt && echo home > $HOME/h && echo ok; "
            "touch /etc/hp-nope 2>/dev/null || echo denied",
        )
        assert r.stdout.split() == ["1000", "ok", "denied"], r.stdout + r.stderr
        d = sb.diff()
        assert (d.added, d.modified, d.deleted) == (["b.txt"], ["a.txt"], [])  # the hand-over left no trace
    assert (task / "a.txt").read_text() == "hello\n" and (task / "a.txt").stat().st_uid == 0


def test_without_writable_cgroups_limits_fall_back_to_rlimits(task: Path, monkeypatch) -> None:
    from harnessproxy.sandbox import limits

    monkeypatch.setattr(limits, "CGROUP_ROOT", Path("/proc/hp-no-cgroups-here"))  # nothing can be made there
    with LocalSandbox(SandboxSpec(task, limits=Limits(memory_mb=200, cpus=1))) as sb:
        assert sb.limits_applied == {"memory": "rlimit", "cpu": "none"}  # said plainly, not pretended
        r = sb.exec(["python3", "-c", "x = bytearray(400 * 1024 * 1024); print('survived')"], timeout=30)
        assert r.exit_code != 0 and "MemoryError" in r.stderr
        assert sb.exec(["python3", "-c", "x = bytearray(50 * 1024 * 1024); print('fits')"]).stdout == "fits\n"
