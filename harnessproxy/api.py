"""Library entry points; the CLI is a thin layer over these."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import time
import uuid
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harnessproxy.errors import ConfigError
from harnessproxy.proxy.record import Journal
from harnessproxy.proxy.server import DEFAULT_MAX_BODY, ProxyServer
from harnessproxy.proxy.upstream import HttpUpstream, Upstream
from harnessproxy.sandbox import Sandbox, SandboxSpec, backends
from harnessproxy.store import connect, load_journals

DEFAULT_JOURNAL_DIR = Path("harnessproxy-journals")


def new_rollout_id() -> str:
    return f"r-{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:6]}"


def upstream_key_from_env(var: str | None) -> str | None:
    if not var:
        return None
    key = os.environ.get(var)
    if not key:
        raise ConfigError(f"--upstream-key-env names {var}, but {var} is not set in this environment")
    return key


def parse_listen(listen: str) -> tuple[str, int]:
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise ConfigError(f"--listen must be HOST:PORT, got {listen!r}")
    return host or "127.0.0.1", int(port)


@dataclass
class RunningProxy:
    server: ProxyServer
    journal: Journal
    upstream: Upstream

    @property
    def url(self) -> str:
        return self.server.url

    async def stop(self) -> None:
        await self.server.stop()
        await self.upstream.aclose()
        self.journal.close()


async def start_proxy(
    upstream: str | Upstream,
    *,
    rollout_id: str | None = None,
    journal_dir: str | Path = DEFAULT_JOURNAL_DIR,
    host: str = "127.0.0.1",
    port: int = 0,
    sock: socket.socket | None = None,
    upstream_key: str | None = None,
    max_body: int = DEFAULT_MAX_BODY,
) -> RunningProxy:
    """Start one recording listener for one rollout; `sock` may be a socket made inside a sandbox's netns."""
    rollout_id = rollout_id or new_rollout_id()
    up = HttpUpstream(upstream) if isinstance(upstream, str) else upstream
    journal = Journal(Path(journal_dir) / f"{rollout_id}.jsonl")
    server = ProxyServer(rollout_id, up, journal, upstream_key=upstream_key, max_body=max_body)
    try:
        await server.start(host, port, sock=sock)
    except OSError as exc:
        journal.close()
        await up.aclose()
        raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from exc
    return RunningProxy(server, journal, up)


def serve_proxy(
    listen: str,
    upstream: str,
    *,
    upstream_key_env: str | None = None,
    rollout_id: str | None = None,
    db: str | Path | None = None,
    journal_dir: str | Path = DEFAULT_JOURNAL_DIR,
    on_ready: Any = None,
) -> int:
    """Run a standalone proxy until SIGINT/SIGTERM, then load its journal into `db`. Returns calls loaded."""
    host, port = parse_listen(listen)
    key = upstream_key_from_env(upstream_key_env)

    async def main() -> Path:
        proxy = await start_proxy(
            upstream, rollout_id=rollout_id, journal_dir=journal_dir, host=host, port=port, upstream_key=key
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if on_ready:
            on_ready(proxy)
        await stop.wait()
        await proxy.stop()
        return proxy.journal.path

    journal_path = asyncio.run(main())
    return load_journals(db, [journal_path]) if db else 0


def query(db: str | Path, sql: str) -> tuple[list[str], list[tuple[Any, ...]]]:
    con = connect(db)
    try:
        cur = con.execute(sql)
        columns = [d[0] for d in cur.description] if cur.description else []
        return columns, cur.fetchall() if columns else []
    finally:
        con.close()


def make_sandbox(spec: SandboxSpec, backend: str = "local", image: str | None = None) -> Sandbox:
    """A sandbox of the named backend (not started)."""
    return backends.create(spec, backend, image)


def gc_sandboxes() -> list[str]:
    """Remove what killed controllers left behind, in both backends."""
    from harnessproxy.sandbox import docker, local

    return docker.gc() + local.gc()


# -- agents ------------------------------------------------------------------------------------------------
def list_agents(adapters_dir: Path | None = None) -> list[dict[str, Any]]:
    """Every adapter (a broken file is listed with its error) and the versions in the host cache."""
    from harnessproxy.agents.install import installed_versions
    from harnessproxy.agents.spec import AdapterError, list_adapters, load_adapter

    out = []
    for path in list_adapters(adapters_dir):
        try:
            a = load_adapter(path)
        except AdapterError as exc:
            out.append({"name": path.stem, "error": str(exc)})
            continue
        out.append(
            {
                "name": a.name,
                "protocol": a.protocol,
                "package": a.install.package or "-",
                "pinned": a.install.version or "-",
                "installed": installed_versions(a) if a.needs_install() else ["(none needed)"],
                "description": a.description,
            }
        )
    return out


def parse_agent(spec: str) -> tuple[str, str | None]:
    name, _, version = spec.partition("@") if not spec.startswith("@") else (spec, "", "")
    return name, version or None


def install_agent(spec: str, adapters_dir: Path | None = None) -> tuple[Path, bool]:
    """NAME[@VERSION] into the host cache; (folder, whether anything was installed)."""
    from harnessproxy.agents.install import install
    from harnessproxy.agents.spec import get_adapter

    name, version = parse_agent(spec)
    return install(get_adapter(name, adapters_dir), version)


def run(
    paths: list[Path],
    agent: str,
    upstream: str,
    *,
    n: int = 1,
    concurrency: int = 4,
    sandbox: str = "local",
    db: Path | None = None,
    model: str | None = None,
    run_id: str | None = None,
    resume: bool = False,
    runs_dir: Path | None = None,
    image: str | None = None,
    upstream_key_env: str | None = None,
    agent_command: str | None = None,
    repos: Path | None = None,
    adapters_dir: Path | None = None,
    on_progress: Any = None,
) -> RunReport:
    """Load tasks, run every task x n rollouts, load the run into `db`. Malformed tasks are reported."""
    from harnessproxy.agents.spec import get_adapter
    from harnessproxy.controller.run import DEFAULT_RUNS_DIR, new_run_id, run_rollouts
    from harnessproxy.store import load_run
    from harnessproxy.tasks import load_tasks

    name, version = parse_agent(agent)
    adapter = get_adapter(name, adapters_dir)
    run_id = run_id or new_run_id()
    runs_dir = runs_dir or DEFAULT_RUNS_DIR
    tasks, errors = load_tasks(list(paths), stage=runs_dir / ".workspaces" / run_id, repos=repos)
    if not tasks:
        raise ConfigError("no task to run:\n" + "\n".join(str(e) for e in errors))
    result = run_rollouts(
        tasks,
        adapter,
        upstream,
        n=n,
        concurrency=concurrency,
        sandbox=sandbox,
        model=model,
        run_id=run_id,
        resume=resume,
        runs_dir=runs_dir,
        image=image,
        upstream_key=upstream_key_from_env(upstream_key_env),
        agent_command=agent_command,
        agent_version=version,
        on_progress=on_progress or (lambda p: None),
    )
    if db is not None:
        load_run(db, result.run_dir)
    return RunReport(result, [str(e) for e in errors] + result.skipped, summarize(result.rollouts))


@dataclass
class RunReport:
    result: Any  # controller.run.RunResult
    task_errors: list[str]
    summary: list[dict[str, Any]]


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k: 1 - C(n-c, k) / C(n, k)."""
    if n - c < k:
        return 1.0
    prod = 1.0
    for i in range(n - c + 1, n + 1):
        prod *= 1.0 - k / i
    return 1.0 - prod


def summarize(rollouts: list[Any]) -> list[dict[str, Any]]:
    """Per task: n, passed, pass@1, pass@n, mean reward, errors by kind, mean duration."""
    by_task: dict[str, list[Any]] = {}
    for r in rollouts:
        by_task.setdefault(r.task_id, []).append(r)
    rows = []
    for task_id in sorted(by_task):
        rs = by_task[task_id]
        n, c = len(rs), sum(r.passed for r in rs)
        rewards = [r.evaluation.reward for r in rs if r.evaluation is not None and r.evaluation.error is None]
        kinds = Counter(r.error_kind for r in rs if r.error_kind)
        rows.append(
            {
                "task": task_id,
                "n": n,
                "passed": c,
                "pass@1": pass_at_k(n, c, 1),
                f"pass@{n}": pass_at_k(n, c, n),
                "mean reward": sum(rewards) / len(rewards) if rewards else None,
                "errors": ", ".join(f"{k} {v}" for k, v in sorted(kinds.items())) or "-",
                "mean s": sum(r.timings.get("total", 0.0) for r in rs) / n,
            }
        )
    return rows


def check_agent(
    name: str, *, sandbox: str = "local", image: str | None = None, adapters_dir: Path | None = None
) -> tuple[bool, list[str]]:
    """Run the CLI in a sandbox against the oracle on the built-in tiny task; (ok, report lines)."""
    import tempfile

    from harnessproxy.agents.spec import get_adapter
    from harnessproxy.controller.run import run_rollouts
    from harnessproxy.proxy.oracle import tool_names
    from harnessproxy.proxy.record import read_journal
    from harnessproxy.tasks import harbor

    agent, version = parse_agent(name)
    adapter = get_adapter(agent, adapters_dir)
    with tempfile.TemporaryDirectory(prefix="hp-check-") as tmp:
        task = harbor.load_one(Path(__file__).parent / "tasks" / "check_task", stage=Path(tmp) / "stage")
        # The command adapter has no harness to check: its command does what the oracle would have asked.
        command = task.solution if adapter.name == "command" else None
        result = run_rollouts(
            [task],
            adapter,
            "oracle",
            sandbox=sandbox,
            image=image,
            runs_dir=Path(tmp),
            agent_command=command,
            agent_version=version,
            retries=0,
        )
        r = result.rollouts[0]
        calls = read_journal(r.journal) if r.journal and Path(r.journal).is_file() else []
    lines = [
        f"{adapter.name} {version or adapter.install.version or ''} on the {sandbox} sandbox, oracle upstream"
    ]
    kinds = Counter(f"{c['protocol']} {c['kind']}" for c in calls)
    lines.append("calls: " + (", ".join(f"{k} x{v}" for k, v in sorted(kinds.items())) or "none"))
    problems = []
    if r.error_kind == "infra":
        problems.append(f"infrastructure: {r.error}")
    main = [c for c in calls if c["kind"] == "main"]
    if r.error_kind != "infra" and adapter.name != "command":
        if not main:
            problems.append("the CLI made no model call through the proxy")
        bad = {c["protocol"] for c in main} - {adapter.protocol}
        if bad and adapter.protocol != "any":
            problems.append(
                f"the CLI spoke {', '.join(sorted(bad))}; the adapter declares {adapter.protocol}"
            )
        failed = [c for c in calls if (c.get("status") or 0) >= 400]
        if failed:
            problems.append(
                f"{len(failed)} call(s) failed, first: {failed[0]['method']} {failed[0]['path']} → "
                f"{failed[0].get('status')}"
            )
        names: list[str] = []  # every tool any main call offered (a title call offers none)
        for c in main:
            body = json.loads(c["request"]["body"]) if c["request"].get("body") else {}
            names += [t for t in tool_names(c["protocol"], body.get("tools")) if t not in names]
        if main and adapter.shell_tool.name not in names:
            problems.append(
                f"the CLI offers no tool named {adapter.shell_tool.name!r} (it offers: "
                f"{', '.join(names[:15]) or 'none'})"
            )
    if r.agent_exit_code not in (0, None) or r.outcome == "timeout":
        problems.append(r.error or f"the CLI exited {r.agent_exit_code}")
    if r.error_kind != "infra" and "hello.txt" not in (r.diff.get("added") or []):
        problems.append("hello.txt is not in the sandbox's diff: the solution never ran")
    if r.error_kind == "eval" or (r.evaluation and not r.evaluation.passed and not problems):
        problems.append(f"evaluation: {r.error or 'the tests did not pass'}")
    lines += [f"FAILED: {p}" for p in problems] or ["OK"]
    return not problems, lines
