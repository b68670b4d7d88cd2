"""One agent run inside a started sandbox: config files written, the headless command run with stdin closed,
artifacts read back. The sandbox and the proxy listener are the caller's; this file knows only the adapter."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from harnessproxy.agents.spec import AGENT_DIR, Adapter, render
from harnessproxy.sandbox import ExecResult, Sandbox

DUMMY_KEY = "sk-harnessproxy-0000000000000000000000000000"  # shaped like a key; the proxy adds the real one
SANDBOX_UID = 1000
MAX_ARTIFACT_FILES = 64


@dataclass
class AgentRun:
    result: ExecResult
    artifacts: dict[str, bytes] = field(default_factory=dict)  # name -> content


def sandbox_user(adapter: Adapter) -> int:
    return SANDBOX_UID if adapter.run.user == "sandbox" else 0


def agent_mounts(adapter: Adapter, install: Path | None) -> dict[str, str]:
    """The host cache's install, read-only, where `{agent_dir}` points."""
    return {str(install): AGENT_DIR} if adapter.needs_install() and install else {}


def values(
    sandbox: Sandbox, *, proxy_url: str, model: str, instruction: str, command: str | None
) -> dict[str, str]:
    v = {
        "instruction": instruction,
        "model": model,
        "proxy_url": proxy_url,
        "api_key": DUMMY_KEY,
        "home": sandbox.home,
        "agent_dir": AGENT_DIR,
        "workdir": sandbox.spec.workdir,
    }
    if command is not None:
        v["command"] = command
    return v


def _write(sandbox: Sandbox, path: str, content: str) -> None:
    script = 'mkdir -p "$(dirname "$1")" && cat > "$1"'
    done = sandbox.exec(["sh", "-c", script, "sh", path], stdin=content.encode(), timeout=30)
    if done.exit_code != 0:
        raise OSError(f"cannot write {path} in the sandbox: {done.stderr.strip()}")


def collect(sandbox: Sandbox, paths: list[str]) -> dict[str, bytes]:
    """Files (or every file under folders) inside the sandbox, by path; missing ones are skipped."""
    out: dict[str, bytes] = {}
    for path in paths:
        listing = sandbox.exec(
            ["sh", "-c", 'find "$1" -type f 2>/dev/null | head -n 64', "sh", path], timeout=30
        )
        for name in listing.stdout.splitlines()[: MAX_ARTIFACT_FILES - len(out)]:
            got = sandbox.exec(["cat", "--", name], timeout=30)
            if got.exit_code == 0:
                out[name] = got.stdout.encode()
    return out


def run_agent(
    sandbox: Sandbox,
    adapter: Adapter,
    *,
    proxy_url: str,
    model: str,
    instruction: str,
    timeout: float | None,
    command: str | None = None,
) -> AgentRun:
    """Prepare and run the harness headless; a non-zero exit or a timeout is the agent's, never raised."""
    v = values(sandbox, proxy_url=proxy_url, model=model, instruction=instruction, command=command)
    for f in adapter.files:
        _write(sandbox, render(f.path, v), render(f.content, v).lstrip("\n"))
    env = {k: render(val, v) for k, val in adapter.run.env.items()}
    argv = [render(a, v) for a in adapter.run.argv]
    result = sandbox.exec(argv, env=env, timeout=timeout)
    artifacts = collect(sandbox, [render(p, v) for p in adapter.artifacts])
    if adapter.run.stdout_artifact:
        artifacts[adapter.run.stdout_artifact] = result.stdout.encode()
    artifacts["agent.stderr"] = result.stderr.encode()
    return AgentRun(result, artifacts)
