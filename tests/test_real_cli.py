"""The real Claude Code CLI, unmodified, in a local sandbox whose only network is its rollout's proxy, against
the scripted upstream. (Adapters and the oracle come with the agent issue; this checks the proxy and the
sandbox against a real client, not only the SDKs.)"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from harnessproxy.api import start_proxy
from harnessproxy.proxy.record import read_journal
from harnessproxy.proxy.scripted import ScriptedUpstream
from harnessproxy.sandbox import SandboxSpec
from harnessproxy.sandbox.local import LocalSandbox

CLAUDE = "@anthropic-ai/claude-code@2.1.197"  # the version AGENT_CLIS.md measured

pytestmark = [
    pytest.mark.skipif(os.geteuid() != 0, reason="the local sandbox mounts an overlay: needs root"),
    pytest.mark.skipif(
        shutil.which("bwrap") is None, reason="bubblewrap is not installed (scripts/setup.sh)"
    ),
    pytest.mark.skipif(
        shutil.which("npm") is None, reason="npm is not installed (scripts/setup.sh installs it)"
    ),
]


@pytest.fixture(scope="module")
def agents(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("agents")
    done = subprocess.run(
        ["npm", "install", "--silent", "--no-audit", "--no-fund", "--prefix", str(cache), CLAUDE],
        capture_output=True,
        text=True,
        timeout=300,
    )
    if done.returncode != 0:
        pytest.skip(f"npm could not install {CLAUDE}: {done.stderr.strip()[-300:]}")
    return cache


def test_claude_code_runs_in_the_sandbox_through_the_proxy(agents: Path, tmp_path: Path) -> None:
    task = tmp_path / "task"
    task.mkdir()
    (task / "README.md").write_text("hello\n")

    async def run() -> tuple:
        up = ScriptedUpstream()
        await up.start()
        sb = LocalSandbox(SandboxSpec(task, ro_mounts={str(agents): "/opt/agents"}))
        sb.start()
        proxy = await start_proxy(
            up.url,
            rollout_id="claude-smoke",
            journal_dir=tmp_path,
            sock=sb.listen(),
            upstream_key="sk-host-key",
        )
        env = {
            "ANTHROPIC_BASE_URL": f"http://127.0.0.1:{proxy.server.port}",
            "ANTHROPIC_API_KEY": "sk-ant-dummy",
            "ANTHROPIC_MODEL": "anthropic_text",
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_MAX_RETRIES": "0",
            "CLAUDE_CONFIG_DIR": "/home/sandbox/.claude",
            "IS_SANDBOX": "1",
        }
        argv = [
            "/opt/agents/node_modules/.bin/claude",
            "-p",
            "say hi",
            "--output-format",
            "stream-json",
            "--verbose",
            "--dangerously-skip-permissions",
            "--no-session-persistence",
        ]
        try:
            result = await asyncio.to_thread(sb.exec, argv, env=env, timeout=120)
        finally:
            await proxy.stop()
            sb.stop()
            await up.stop()
        return result, read_journal(proxy.journal.path), up.requests

    result, calls, seen_upstream = asyncio.run(run())
    assert result.exit_code == 0, result.stderr[-2000:]
    final = json.loads(result.stdout.strip().splitlines()[-1])
    assert final["type"] == "result" and "FINAL_ANSWER_OK" in final["result"]
    main = [c for c in calls if c["kind"] == "main"]
    assert main and all(c["rollout_id"] == "claude-smoke" and c["protocol"] == "anthropic" for c in main)
    assert main[-1]["stream"] is True and main[-1]["stop_reason"] == "end_turn"
    assert main[-1]["path"].startswith("/v1/messages")
    # The CLI's dummy key never left the sandbox; the upstream saw only the host's.
    assert {r["headers"].get("x-api-key") for r in seen_upstream} == {"sk-host-key"}
