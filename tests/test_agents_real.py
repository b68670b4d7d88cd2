"""The real agent CLIs, installed from npm / PyPI by `agents install`, run unmodified in the local sandbox
through the proxy against the oracle (`agents check`): exit 0, the solution's file in the diff, every call
recorded with the adapter's protocol, and no route out but the proxy."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from harnessproxy import api
from harnessproxy.agents.spec import get_adapter
from harnessproxy.cli import app
from harnessproxy.controller.run import run_rollouts
from harnessproxy.proxy.record import read_journal
from harnessproxy.tasks import harbor

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the local sandbox mounts an overlay: needs root"),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup.sh)"
    ),
    pytest.mark.skipif(
        shutil.which("npm") is None, reason="npm is not installed (scripts/setup.sh installs it)"
    ),
]
CHECK_TASK = Path(api.__file__).parent / "tasks" / "check_task"
WORKING = ["claude-code", "codex", "qwen-code", "pi", "opencode", "mini-swe-agent"]


@pytest.fixture(scope="module")
def installed() -> dict[str, bool]:
    """Each CLI installed once into the test cache; a second install is a no-op."""
    fresh = {}
    for name in [*WORKING, "gemini-cli"]:
        _, fresh[name] = api.install_agent(name)
        _, again = api.install_agent(name)
        assert not again
    return fresh


@pytest.mark.parametrize("name", WORKING)
def test_real_cli_solves_the_check_task_through_the_proxy(
    name: str, installed: dict[str, bool], tmp_path: Path
) -> None:
    adapter = get_adapter(name)
    task = harbor.load_one(CHECK_TASK, stage=tmp_path / "stage")
    result = run_rollouts([task], adapter, "oracle", runs_dir=tmp_path, retries=0)
    r = result.rollouts[0]
    assert r.agent_exit_code == 0, r.error
    assert r.outcome == "passed" and r.evaluation and r.evaluation.reward == 1.0
    assert "hello.txt" in r.diff["added"]
    calls = read_journal(r.journal)
    main = [c for c in calls if c["kind"] == "main"]
    assert len(main) >= 2 and all(c["protocol"] == adapter.protocol for c in main)
    assert all(c["rollout_id"] == r.rollout_id and c["status"] == 200 for c in calls if c["kind"] != "probe")
    # Only the dummy key existed in the sandbox, and even it is redacted in the record.
    assert "sk-harnessproxy-0000" not in json.dumps([c["request"]["headers"] for c in calls])
    assert adapter.run.stdout_artifact in r.artifacts


@pytest.mark.parametrize("name", ["claude-code", "codex"])
def test_agents_check_cli_says_ok(name: str, installed: dict[str, bool]) -> None:
    out = CliRunner().invoke(app, ["agents", "check", name])
    assert out.exit_code == 0, out.output
    assert out.output.strip().splitlines()[-1] == "OK"


def test_agents_check_says_exactly_what_broke(installed: dict[str, bool], tmp_path: Path) -> None:
    """An adapter that names the wrong shell tool: the CLI runs, but the oracle cannot call the tool."""
    text = (Path(get_adapter("pi").source)).read_text().replace('name = "pi"', 'name = "pi-wrong"')
    (tmp_path / "pi-wrong.toml").write_text(text.replace('name = "bash"', 'name = "shell"'))
    import harnessproxy.agents.install as inst

    src = inst.install_dir(get_adapter("pi"))
    dst = inst.cache_root() / "pi-wrong" / src.name
    dst.parent.mkdir(parents=True, exist_ok=True)
    if not dst.exists():
        dst.symlink_to(src)
    out = CliRunner().invoke(app, ["agents", "check", "pi-wrong", "--adapters", str(tmp_path)])
    assert out.exit_code == 1
    assert "FAILED: the CLI offers no tool named 'shell' (it offers: read, bash" in out.output
    assert "hello.txt is not in the sandbox's diff" in out.output


def test_gemini_cli_is_reported_as_not_served(installed: dict[str, bool]) -> None:
    """Gemini CLI installs and runs, but speaks the Gemini API, which the proxy does not serve yet: the check
    must say so (and this test will flip when a Gemini codec lands)."""
    ok, lines = api.check_agent("gemini-cli")
    assert not ok
    assert any("streamGenerateContent" in line and "404" in line for line in lines), lines
