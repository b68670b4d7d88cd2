"""Rollouts end to end: tasks fanned out to sandboxes, real CLIs through the proxy against the oracle, scored
in fresh sandboxes, joined in DuckDB; failures classified; a killed controller resumed without loss or
double count."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest

from harnessproxy import api
from harnessproxy.agents.spec import get_adapter
from harnessproxy.controller.run import run_rollouts
from harnessproxy.proxy.record import read_journal
from harnessproxy.sandbox import SandboxError, backends
from harnessproxy.tasks import harbor
from tests.conftest import EXAMPLES

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the local sandbox mounts an overlay: needs root"),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup.sh)"
    ),
]
CHECK_TASK = Path(api.__file__).parent / "tasks" / "check_task"
EXPECTED = {
    "add-cli-flag": 4,
    "fix-failing-test": 4,
    "repair-shell-script": 4,
    "transform-csv": 4,
    "wrong-solution": 0,
}
# One chat call through the proxy, then the check task's solution: a home-grown "harness" (command adapter).
CALL_THEN_SOLVE = (
    'python3 -c "import json, os, urllib.request as u; u.urlopen(u.Request('
    "os.environ['OPENAI_BASE_URL'] + '/chat/completions', json.dumps({'model': 'm', 'messages': "
    "[{'role': 'user', 'content': 'hi'}]}).encode(), {'content-type': 'application/json'})).read()\""
    " && sleep 0.5 && echo hello from the oracle > hello.txt"
)


def make_task(root: Path, name: str, *, test: str, solve: str = "true\n", toml: str = "") -> Path:
    d = root / name
    (d / "tests").mkdir(parents=True)
    (d / "solution").mkdir()
    (d / "environment" / "app").mkdir(parents=True)
    (d / "environment" / "Dockerfile").write_text(
        "FROM harnessproxy-base:busybox\nWORKDIR /app\nCOPY app/ /app/\n"
    )
    (d / "environment" / "app" / "README").write_text("workspace\n")
    (d / "instruction.md").write_text(f"do {name}\n")
    (d / "task.toml").write_text(toml)
    (d / "tests" / "test.sh").write_text(test)
    (d / "solution" / "solve.sh").write_text(solve)
    return d


def outcomes(db: Path) -> dict[str, tuple[int, int]]:
    con = duckdb.connect(str(db))
    rows = con.execute("SELECT task_id, n, passed FROM task_summary").fetchall()
    con.close()
    return {t: (n, p) for t, n, p in rows}


@pytest.mark.parametrize("agent", ["claude-code", "codex"])
def test_examples_with_a_real_cli_and_the_oracle(agent: str, tmp_path: Path) -> None:
    api.install_agent(agent)
    db = tmp_path / "runs.duckdb"
    report = api.run([EXAMPLES], agent, "oracle", n=4, concurrency=4, db=db, runs_dir=tmp_path / "runs")
    assert {row["task"]: row["passed"] for row in report.summary} == EXPECTED
    assert outcomes(db) == {t: (4, p) for t, p in EXPECTED.items()}
    con = duckdb.connect(str(db))
    # Every rollout has its evaluation and its calls; every call joins to a rollout of this run.
    assert con.execute("SELECT count(*) FROM rollouts r JOIN evaluations USING (rollout_id)").fetchone() == (
        20,
    )
    assert con.execute("SELECT min(llm_calls) >= 2 FROM rollout_summary").fetchone() == (True,)
    orphans = (
        "SELECT count(*) FROM llm_calls c LEFT JOIN rollouts r USING (rollout_id) WHERE r.rollout_id IS NULL"
    )
    assert con.execute(orphans).fetchone() == (0,)
    protocol = get_adapter(agent).protocol
    assert con.execute("SELECT DISTINCT protocol FROM llm_calls WHERE kind = 'main'").fetchall() == [
        (protocol,)
    ]
    assert con.execute("SELECT count(DISTINCT rollout_id) FROM artifacts").fetchone() == (20,)
    timings = con.execute(
        "SELECT min(sandbox_start_s), min(agent_s), min(eval_s), min(total_s) FROM rollouts"
    )
    assert all(v is not None and v > 0 for v in timings.fetchone())  # type: ignore[union-attr]
    con.close()


def test_reward_integrity(tmp_path: Path) -> None:
    """The agent writes a reward file, replaces the visible test and adds its own tests/ folder: nothing
    counts, because scoring uses a fresh sandbox, the task's own tests and a fresh /logs/verifier."""
    cheat = (
        "mkdir -p /logs/verifier 2>/dev/null; echo 1 > /logs/verifier/reward.txt 2>/dev/null;"
        " mkdir -p tests && printf '#!/bin/sh\\necho 1 > /logs/verifier/reward.txt\\n' > tests/test.sh;"
        " printf 'import unittest\\n' > test_stats.py; true"
    )
    task = harbor.load_one(EXAMPLES / "fix-failing-test", stage=tmp_path / "stage")
    r = run_rollouts(
        [task], get_adapter("command"), "oracle", agent_command=cheat, runs_dir=tmp_path
    ).rollouts[0]
    assert r.agent_exit_code == 0 and "tests/test.sh" in r.diff["added"]
    assert r.outcome == "failed" and r.evaluation is not None and r.evaluation.reward == 0.0


def test_a_reward_symlink_planted_by_agent_code_is_not_followed(tmp_path: Path) -> None:
    """The verifier imports the agent's code, which swaps reward.txt for a link to a host file."""
    plant = (
        'printf \'import os\\nos.symlink("/etc/hostname", "/logs/verifier/reward.txt")\\n'
        "def mean(v):\\n    return sum(v) / len(v)\\n"
        "def spread(v):\\n    return max(v) - min(v)\\n' > stats.py"
    )
    task = harbor.load_one(EXAMPLES / "fix-failing-test", stage=tmp_path / "stage")
    r = run_rollouts(
        [task], get_adapter("command"), "oracle", agent_command=plant, runs_dir=tmp_path
    ).rollouts[0]
    assert r.outcome == "error" and r.error_kind == "eval" and "not a plain file" in (r.error or "")


def test_failures_are_classified(tmp_path: Path) -> None:
    root = tmp_path / "tasks"
    make_task(
        root, "agent-timeout", test="echo 1 > /logs/verifier/reward.txt\n", toml="[agent]\ntimeout_sec = 2\n"
    )
    make_task(root, "verifier-timeout", test="sleep 30\n", toml="[verifier]\ntimeout_sec = 2\n")
    make_task(root, "verifier-garbage", test="echo banana > /logs/verifier/reward.txt\n")
    make_task(root, "exit-code-only", test="test -f /app/README\n")
    bad = make_task(root, "malformed", test="true\n", toml="[agent]\ntimeout_sec = 'soon'\n")
    (root / "no-instruction").mkdir()
    (root / "no-instruction" / "task.toml").write_text("")
    report = api.run([root], "command", "oracle", agent_command="sleep 10", runs_dir=tmp_path / "runs")
    by = {r.task_id: r for r in report.result.rollouts}
    assert by["agent-timeout"].outcome == "timeout" and by["agent-timeout"].error_kind == "agent"
    assert by["verifier-timeout"].outcome == "error" and by["verifier-timeout"].error_kind == "eval"
    assert "timed out" in (by["verifier-timeout"].error or "")
    assert by["verifier-garbage"].error_kind == "eval" and "banana" in (by["verifier-garbage"].error or "")
    assert by["exit-code-only"].outcome == "passed"  # no reward file: the exit code counts
    assert "malformed" not in by and "no-instruction" not in by
    assert any(f"{bad / 'task.toml'}" in e and "timeout_sec" in e for e in report.task_errors)
    assert any("no-instruction" in e and "instruction.md" in e for e in report.task_errors)


def test_agent_failure_is_not_retried_but_an_infra_failure_is(tmp_path: Path, monkeypatch) -> None:
    real, failed = backends.create, []

    def flaky(spec, backend="local", image=None):
        if not failed:
            failed.append(1)
            raise SandboxError("injected: the sandbox could not start")
        return real(spec, backend, image)

    monkeypatch.setattr(backends, "create", flaky)
    task = harbor.load_one(CHECK_TASK, stage=tmp_path / "stage")
    r = run_rollouts(
        [task], get_adapter("command"), "oracle", agent_command=CALL_THEN_SOLVE, runs_dir=tmp_path
    )
    retried = r.rollouts[0]
    assert retried.attempt == 2 and retried.outcome == "passed"
    lines = [json.loads(x) for x in (r.run_dir / "run.jsonl").read_text().splitlines()]
    assert [x["state"] for x in lines if x.get("state") == "retry"] == ["retry"]
    crash = run_rollouts(
        [task], get_adapter("command"), "oracle", agent_command="exit 3", runs_dir=tmp_path / "b"
    )
    c = crash.rollouts[0]
    assert c.attempt == 1 and c.agent_exit_code == 3 and c.error_kind == "agent" and c.outcome == "failed"


def test_sigkill_the_controller_then_resume(tmp_path: Path) -> None:
    tasks = tmp_path / "tasks"
    for i in range(4):
        shutil.copytree(CHECK_TASK, tasks / f"t{i}")
    db, runs = tmp_path / "runs.duckdb", tmp_path / "runs"
    argv = [
        sys.executable,
        "-m",
        "harnessproxy.cli",
        "run",
        str(tasks),
        "--agent",
        "command",
        "--upstream",
        "oracle",
        "--agent-command",
        CALL_THEN_SOLVE,
        "-n",
        "3",
        "-c",
        "2",
        "--run-id",
        "r1",
        "--runs-dir",
        str(runs),
        "--db",
        str(db),
    ]
    proc = subprocess.Popen(
        argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    journal = runs / "r1" / "run.jsonl"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        done = journal.read_text().count('"type": "rollout"') if journal.exists() else 0
        if done >= 3:
            break
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    killed_done = journal.read_text().count('"type": "rollout"')
    assert 3 <= killed_done < 12
    subprocess.run(
        [sys.executable, "-m", "harnessproxy.cli", "sandbox", "gc"], check=True, capture_output=True
    )
    resumed = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert journal.read_text().count('"type": "rollout"') == 12
    con = duckdb.connect(str(db))
    assert con.execute("SELECT count(*), count(DISTINCT rollout_id) FROM rollouts").fetchone() == (12, 12)
    assert con.execute("SELECT count(*) FROM rollouts WHERE outcome = 'passed'").fetchone() == (12,)
    # Exactly one call per rollout: half-finished attempts' calls are kept aside, never counted.
    assert con.execute("SELECT count(*), count(DISTINCT rollout_id) FROM llm_calls").fetchone() == (12, 12)
    con.close()
    again = subprocess.run([*argv, "--resume"], capture_output=True, text=True, timeout=120)
    assert again.returncode == 0 and outcomes(db) == {f"t{i}": (3, 3) for i in range(4)}


def test_resume_without_a_run_and_rerun_without_resume_are_clear_errors(tmp_path: Path) -> None:
    task = harbor.load_one(CHECK_TASK, stage=tmp_path / "stage")
    adapter = get_adapter("command")
    with pytest.raises(api.ConfigError, match="no run nope to resume"):
        run_rollouts(
            [task], adapter, "oracle", agent_command="true", run_id="nope", resume=True, runs_dir=tmp_path
        )
    run_rollouts([task], adapter, "oracle", agent_command="true", run_id="x", runs_dir=tmp_path)
    with pytest.raises(api.ConfigError, match="pass --resume"):
        run_rollouts([task], adapter, "oracle", agent_command="true", run_id="x", runs_dir=tmp_path)


def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout


def swebench_repo(tmp_path: Path) -> tuple[Path, dict]:
    """A small real Python repo with a bug, its fix (gold patch) and a test patch, as a SWE-bench row."""
    repo = tmp_path / "repos" / "acme__mathy"
    (repo / "mathy").mkdir(parents=True)
    (repo / "tests").mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "mathy" / "__init__.py").write_text("")
    (repo / "mathy" / "ops.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a + b\n"
    )
    (repo / "tests" / "__init__.py").write_text("")
    test = "import unittest\n\nfrom mathy.ops import add, sub\n\n\nclass OpsTest(unittest.TestCase):\n"
    test += "    def test_add(self):\n        self.assertEqual(add(2, 3), 5)\n"
    (repo / "tests" / "test_ops.py").write_text(test)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD").strip()
    (repo / "mathy" / "ops.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef sub(a, b):\n    return a - b\n"
    )
    gold = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", ".")
    (repo / "tests" / "test_ops.py").write_text(
        test + "\n    def test_sub(self):\n        self.assertEqual(sub(5, 3), 2)\n"
    )
    test_patch = _git(repo, "diff")
    _git(repo, "checkout", "-q", "--", ".")
    row = {
        "instance_id": "acme__mathy-1",
        "repo": "acme/mathy",
        "base_commit": base,
        "problem_statement": "sub(5, 3) returns 8; it should subtract.",
        "patch": gold,
        "test_patch": test_patch,
        "FAIL_TO_PASS": json.dumps(["test_sub (tests.test_ops.OpsTest.test_sub)"]),
        "PASS_TO_PASS": json.dumps(["test_add (tests.test_ops.OpsTest.test_add)"]),
        "test_cmd": "python3 -m unittest -v",
    }
    return repo.parent, row


def test_swebench_instances_graded_like_swebench(tmp_path: Path) -> None:
    repos, row = swebench_repo(tmp_path)
    broken = {k: v for k, v in row.items() if k != "base_commit"} | {"instance_id": "acme__mathy-broken"}
    data = tmp_path / "instances.jsonl"
    data.write_text(json.dumps(row) + "\n" + json.dumps(broken) + "\n")
    api.install_agent("claude-code")
    oracle = api.run([data], "claude-code", "oracle", repos=repos, runs_dir=tmp_path / "runs")
    [r] = oracle.result.rollouts
    assert r.outcome == "passed" and r.diff["modified"] == ["mathy/ops.py"]
    assert r.evaluation and r.evaluation.metrics["FAIL_TO_PASS"] == "1/1" and r.evaluation.metrics["resolved"]
    assert any("acme__mathy-broken" in e and "base_commit" in e for e in oracle.task_errors)
    idle = api.run([data], "command", "oracle", agent_command="true", repos=repos, runs_dir=tmp_path / "r2")
    [nothing] = idle.result.rollouts
    assert nothing.outcome == "failed" and nothing.evaluation
    assert nothing.evaluation.metrics == {"FAIL_TO_PASS": "0/1", "PASS_TO_PASS": "1/1", "resolved": False}


def test_docker_backend_once(tmp_path: Path) -> None:
    from harnessproxy.sandbox import docker, images

    try:
        images.ensure_base_image(docker.client())
    except SandboxError as exc:
        pytest.skip(f"no docker engine could start here: {exc}")
    task = harbor.load_one(CHECK_TASK, stage=tmp_path / "stage")
    # The busybox image has no python: the call goes out with busybox wget (without --header: it would send a
    # second Content-Type, which aiohttp rejects).
    body = json.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    call = (
        f"wget -q -O- --post-data '{body}' "
        '"$OPENAI_BASE_URL/chat/completions" && echo hello from the oracle > hello.txt'
    )
    res = run_rollouts(
        [task],
        get_adapter("command"),
        "oracle",
        sandbox="docker",
        agent_command=call,
        runs_dir=tmp_path,
        n=2,
        concurrency=2,
    )
    assert [r.outcome for r in res.rollouts] == ["passed", "passed"], [r.error for r in res.rollouts]
    assert all(r.diff["added"] == ["hello.txt"] for r in res.rollouts)
    assert all(len(read_journal(r.journal)) == 1 for r in res.rollouts)  # the call went through the proxy


def test_cli_run_prints_the_summary_and_sql_reads_the_store(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from harnessproxy.cli import app

    db, runs = tmp_path / "r.duckdb", tmp_path / "runs"
    common = ["--agent", "command", "--upstream", "oracle", "--runs-dir", str(runs), "--db", str(db)]
    runner = CliRunner()
    out = runner.invoke(app, ["run", str(CHECK_TASK), *common, "--agent-command", CALL_THEN_SOLVE, "-n", "2"])
    assert out.exit_code == 0, out.output
    assert "check_task" in out.output and "pass@2" in out.output and "2 rollouts in" in out.output
    rows = runner.invoke(
        app, ["sql", "--db", str(db), "-f", "csv", "SELECT n, passed, pass_at_1 FROM task_summary"]
    )
    assert rows.output.splitlines()[1] == "2,2,1.0"
    empty = runner.invoke(app, ["run", str(tmp_path / "nothing"), *common, "--agent-command", "true"])
    assert empty.exit_code == 2 and "no task to run" in empty.output and "Traceback" not in empty.output
