"""One rollout's lifecycle: sandbox start → agent run through this rollout's own proxy listener → artifacts,
processes killed, diff taken → sandbox stopped → evaluation in a fresh sandbox → result.

Failures are classified, never raised: `infra` (a sandbox or the proxy could not start: retried by the
scheduler), `agent` (it crashed or timed out: never retried) and `eval` (the verifier crashed or timed out).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from harnessproxy.agents.runner import AgentRun, agent_mounts, run_agent, sandbox_user
from harnessproxy.agents.spec import Adapter
from harnessproxy.api import start_proxy
from harnessproxy.controller.evaluate import Evaluation, evaluate
from harnessproxy.errors import ConfigError
from harnessproxy.proxy.oracle import OracleUpstream
from harnessproxy.proxy.upstream import HttpUpstream, Upstream
from harnessproxy.sandbox import Diff, Sandbox, SandboxError, SandboxSpec
from harnessproxy.tasks import Task

TAIL = 2000


@dataclass
class Rollout:
    rollout_id: str
    run_id: str
    task_id: str
    index: int  # 0..n-1 within its task
    attempt: int = 1
    agent: str = ""
    model: str = ""
    outcome: str = "error"  # passed | failed | timeout | error
    error_kind: str | None = None  # infra | agent | eval
    error: str | None = None
    agent_exit_code: int | None = None
    started_at: float = 0.0
    finished_at: float = 0.0
    # seconds: queued, sandbox_start, agent, collect, sandbox_stop, eval, total
    timings: dict[str, float] = field(default_factory=dict)
    diff: dict[str, Any] = field(default_factory=dict)  # patch, added, modified, deleted, binary
    evaluation: Evaluation | None = None
    artifacts: list[str] = field(default_factory=list)
    journal: str = ""  # the proxy's journal of this rollout's calls

    @property
    def passed(self) -> bool:
        return self.outcome == "passed"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Rollout:
        ev = data.get("evaluation")
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**{**known, "evaluation": Evaluation(**ev) if ev else None})


@dataclass
class Context:
    """What every rollout of a run shares."""

    run_id: str
    adapter: Adapter
    install: Path | None
    model: str
    upstream: str  # "oracle" or a base URL
    upstream_key: str | None
    make_sandbox: Callable[[SandboxSpec, Task], Sandbox]
    calls_dir: Path
    artifacts_dir: Path
    agent_command: str | None = None
    on_state: Callable[[Rollout, str], None] = lambda r, s: None


def _upstream(ctx: Context, task: Task) -> Upstream:
    if ctx.upstream == "oracle":
        if task.solution is None:
            raise ConfigError(f"task {task.id}: field solution/solve.sh: missing, and the oracle needs it")
        return OracleUpstream(task.solution, ctx.adapter.tool, model=ctx.model)
    return HttpUpstream(ctx.upstream)


def _save_artifacts(where: Path, run: AgentRun | None, diff: Diff) -> list[str]:
    where.mkdir(parents=True, exist_ok=True)
    files = dict(run.artifacts) if run else {}
    if diff.archive:
        files["diff.tar.gz"] = diff.archive
    names = []
    for name, data in files.items():
        safe = name.strip("/").replace("/", "__") or "unnamed"
        (where / safe).write_bytes(data)
        names.append(safe)
    return names


async def _phase(r: Rollout, name: str, work: Awaitable[Any]) -> Any:
    t = time.monotonic()
    try:
        return await work
    finally:
        r.timings[name] = round(r.timings.get(name, 0.0) + time.monotonic() - t, 4)


async def run_rollout(ctx: Context, task: Task, r: Rollout) -> Rollout:
    r.started_at = time.time()
    t0 = time.monotonic()
    spec = SandboxSpec(
        task.workspace,
        task.workdir,
        user=sandbox_user(ctx.adapter),
        ro_mounts=agent_mounts(ctx.adapter, ctx.install),
        limits=task.limits,
    )
    run: AgentRun | None = None
    diff: Diff | None = None
    sb: Sandbox | None = None
    try:
        ctx.on_state(r, "running")
        sb = ctx.make_sandbox(spec, task)
        await _phase(r, "sandbox_start", asyncio.to_thread(sb.start))
        proxy = await start_proxy(
            _upstream(ctx, task),
            rollout_id=r.rollout_id,
            journal_dir=ctx.calls_dir,
            sock=sb.listen(),
            upstream_key=ctx.upstream_key,
        )
        r.journal = str(proxy.journal.path)
        try:
            run = await _phase(
                r,
                "agent",
                asyncio.to_thread(
                    run_agent,
                    sb,
                    ctx.adapter,
                    proxy_url=f"http://127.0.0.1:{proxy.server.port}",
                    model=ctx.model,
                    instruction=task.instruction,
                    timeout=task.agent_timeout_s,
                    command=ctx.agent_command,
                ),
            )
        finally:
            await proxy.stop()
        t = time.monotonic()
        await asyncio.to_thread(sb.halt)  # nothing may still run while the diff is read
        diff = await asyncio.to_thread(sb.diff)
        r.artifacts = await asyncio.to_thread(_save_artifacts, ctx.artifacts_dir / r.rollout_id, run, diff)
        r.diff = {k: getattr(diff, k) for k in ("patch", "added", "modified", "deleted", "binary")}
        r.timings["collect"] = round(time.monotonic() - t, 4)
    except (SandboxError, OSError) as exc:
        r.outcome, r.error_kind, r.error = "error", "infra", str(exc)
    finally:
        if sb is not None:
            await _phase(r, "sandbox_stop", asyncio.to_thread(sb.stop))
    if diff is not None and run is not None:
        ctx.on_state(r, "evaluating")
        try:
            r.evaluation = await _phase(
                r, "eval", asyncio.to_thread(evaluate, task, diff, lambda s: ctx.make_sandbox(s, task))
            )
        except (SandboxError, OSError) as exc:
            r.outcome, r.error_kind, r.error = "error", "infra", f"evaluation sandbox: {exc}"
        else:
            _classify(r, run, r.evaluation)
    r.finished_at = time.time()
    r.timings["total"] = round(time.monotonic() - t0, 4)
    return r


def _classify(r: Rollout, run: AgentRun, ev: Evaluation) -> None:
    res = run.result
    r.agent_exit_code = res.exit_code
    r.outcome = "passed" if ev.passed else "failed"
    r.error_kind = r.error = None
    if ev.error:
        r.outcome, r.error_kind, r.error = "error", "eval", ev.error
    elif res.timed_out:
        r.outcome, r.error_kind = "timeout", "agent"
        r.error = f"the agent ran out of time ({res.duration_s:.0f} s)"
    elif res.exit_code != 0:
        r.error_kind = "agent"
        r.error = f"the agent exited {res.exit_code}: {res.stderr.strip()[-TAIL:]}"
