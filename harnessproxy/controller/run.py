"""Fan-out: every task x N rollouts, at most C at once, infra faults retried with backoff, and a run journal.

Journal first, DuckDB after. `RUN_DIR/run.jsonl` gets one fsync'd line per state change and per finished
rollout; each rollout's proxy writes its own call journal under `calls/`. DuckDB is filled from these files at
the end (and again on resume), so a SIGKILL'd controller loses nothing: `resume` runs exactly the rollouts
with no result line, after moving their half-written call journals aside (kept, never loaded, never counted).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import threading
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessproxy.agents.install import find_install
from harnessproxy.agents.spec import Adapter
from harnessproxy.controller.rollout import Context, Rollout, run_rollout
from harnessproxy.errors import ConfigError
from harnessproxy.sandbox import Sandbox, SandboxError, SandboxSpec, backends
from harnessproxy.tasks import Task

DEFAULT_RUNS_DIR = Path("harnessproxy-runs")
STATES = ("queued", "running", "evaluating", "done")


@dataclass
class RunResult:
    run_id: str
    run_dir: Path
    rollouts: list[Rollout]  # every finished rollout of the run, resumed ones included
    skipped: list[str] = field(default_factory=list)  # tasks not run, with the reason


class RunJournal:
    """Append-only, one JSON object per line, fsync'd: the controller's ground truth."""

    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._lock = threading.Lock()
        self._f = path.open("a", encoding="utf-8")

    def write(self, record: dict[str, Any]) -> None:
        line = json.dumps(record, ensure_ascii=False, default=str) + "\n"
        with self._lock:
            self._f.write(line)
            self._f.flush()
            os.fsync(self._f.fileno())

    def close(self) -> None:
        self._f.close()


def read_run(path: Path) -> list[dict[str, Any]]:
    """Every complete line; a torn last line (killed mid-write) is skipped."""
    out = []
    if path.is_file():
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except ValueError:
                continue
    return out


def new_run_id() -> str:
    return f"run-{time.strftime('%Y%m%d-%H%M%S')}-{os.urandom(3).hex()}"


def _safe(s: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", s)


class _Images:
    """Docker images per task: --image, else the task's docker_image, else built from environment/ once."""

    def __init__(self, image: str | None) -> None:
        self.image = image
        self._built: dict[str, str] = {}
        self._lock = threading.Lock()

    def for_task(self, task: Task) -> str:
        if self.image or task.image:
            return self.image or task.image or ""
        if task.environment is None:
            raise SandboxError(f"task {task.id} has no environment/Dockerfile: pass --image for docker")
        with self._lock:
            if task.id not in self._built:
                from harnessproxy.sandbox import docker, images

                self._built[task.id] = images.build_image(docker.client(), task.environment)
            return self._built[task.id]


class Progress:
    """Counts by state, for a live display."""

    def __init__(self, total: int, done: int = 0, passed: int = 0) -> None:
        self.total = total
        self.states: Counter[str] = Counter({"queued": total - done, "done": done})
        self.passed = passed
        self.errors = 0
        self._where: dict[str, str] = {}

    def move(self, rollout_id: str, state: str, r: Rollout | None = None) -> None:
        old = self._where.get(rollout_id, "queued")
        self.states[old] -= 1
        self.states[state] += 1
        self._where[rollout_id] = state
        if state == "done" and r is not None:
            self.passed += r.passed
            self.errors += r.outcome == "error"


def _tasks_record(tasks: list[Task]) -> list[dict[str, Any]]:
    return [
        {
            "task_id": t.id,
            "source": t.source,
            "instruction": t.instruction,
            "grader": t.grader,
            "workdir": t.workdir,
            "metadata": t.metadata,
        }
        for t in tasks
    ]


async def _run(
    ctx: Context,
    todo: list[tuple[Task, Rollout]],
    concurrency: int,
    retries: int,
    journal: RunJournal,
    progress: Progress,
    on_progress: Callable[[Progress], None],
) -> list[Rollout]:
    loop = asyncio.get_running_loop()
    loop.set_default_executor(ThreadPoolExecutor(max_workers=max(8, 3 * concurrency)))
    gate = asyncio.Semaphore(concurrency)

    def event(r: Rollout, state: str, detail: str | None = None) -> None:
        rec = {"type": "event", "rollout_id": r.rollout_id, "ts": time.time(), "state": state}
        journal.write({**rec, "attempt": r.attempt, "detail": detail})

    def on_state(r: Rollout, state: str) -> None:
        event(r, state)
        progress.move(r.rollout_id, state, r)
        on_progress(progress)

    ctx.on_state = on_state
    queued_at = time.monotonic()

    async def one(task: Task, r: Rollout) -> Rollout:
        async with gate:
            r.timings["queued"] = round(time.monotonic() - queued_at, 4)
            while True:
                _set_aside(ctx.calls_dir / f"{r.rollout_id}.jsonl", r.attempt)
                try:
                    r = await run_rollout(ctx, task, r)
                except Exception as exc:  # a bug must cost one rollout, not the batch
                    r.outcome, r.error_kind, r.error = "error", "infra", f"{type(exc).__name__}: {exc}"
                if r.error_kind != "infra" or r.attempt > retries:
                    break
                event(r, "retry", r.error)
                await asyncio.sleep(min(30.0, 0.5 * 2 ** (r.attempt - 1)))
                r = Rollout(
                    r.rollout_id,
                    r.run_id,
                    r.task_id,
                    r.index,
                    r.attempt + 1,
                    r.agent,
                    r.model,
                    timings={"queued": r.timings.get("queued", 0.0)},
                )
        journal.write({"type": "rollout", **r.to_json()})
        on_state(r, "done")
        return r

    return list(await asyncio.gather(*(one(t, r) for t, r in todo)))


def _set_aside(path: Path, attempt: int) -> None:
    """A call journal from an interrupted or failed attempt: kept beside, never loaded as this rollout's."""
    if path.exists():
        path.rename(path.with_name(f"{path.stem}.abandoned-{attempt}-{int(time.time() * 1000)}.jsonl"))


def run_rollouts(
    tasks: list[Task],
    adapter: Adapter,
    upstream: str,
    *,
    n: int = 1,
    concurrency: int = 4,
    sandbox: str = "local",
    model: str | None = None,
    run_id: str | None = None,
    resume: bool = False,
    runs_dir: Path = DEFAULT_RUNS_DIR,
    image: str | None = None,
    upstream_key: str | None = None,
    agent_command: str | None = None,
    agent_version: str | None = None,
    retries: int = 2,
    on_progress: Callable[[Progress], None] = lambda p: None,
) -> RunResult:
    if n < 1 or concurrency < 1:
        raise ConfigError("-n and -c must be at least 1")
    if sandbox not in backends.BACKENDS:
        raise ConfigError(f"unknown sandbox backend {sandbox!r} (available: {', '.join(backends.BACKENDS)})")
    if adapter.name == "command" and not agent_command:
        raise ConfigError("the command adapter needs --agent-command 'CMD'")
    install = find_install(adapter, agent_version) if adapter.needs_install() else None
    run_id = run_id or new_run_id()
    run_dir = (runs_dir / _safe(run_id)).resolve()
    journal_path = run_dir / "run.jsonl"
    previous = read_run(journal_path)
    if previous and not resume:
        raise ConfigError(f"run {run_id} already exists in {run_dir}: pass --resume to finish it")
    if resume and not previous:
        raise ConfigError(f"no run {run_id} to resume in {run_dir}")
    done = {
        rec["rollout_id"]: Rollout.from_json(rec)
        for rec in previous
        if rec.get("type") == "rollout" and "rollout_id" in rec
    }
    skipped = []
    if upstream == "oracle":
        skipped = [
            f"task {t.id}: field solution/solve.sh: missing, and the oracle needs it"
            for t in tasks
            if t.solution is None
        ]
        tasks = [t for t in tasks if t.solution is not None]
    model = model or adapter.model
    todo: list[tuple[Task, Rollout]] = []
    for t in tasks:
        for i in range(n):
            rid = f"{_safe(run_id)}.{_safe(t.id)}.{i}"
            if rid not in done:
                todo.append((t, Rollout(rid, run_id, t.id, i, agent=adapter.name, model=model)))
    journal = RunJournal(journal_path)
    journal.write(
        {
            "type": "run",
            "run_id": run_id,
            "started_at": time.time(),
            "resumed": bool(previous),
            "agent": adapter.name,
            "agent_version": agent_version or adapter.install.version,
            "model": model,
            "upstream": upstream,
            "sandbox": sandbox,
            "n": n,
            "concurrency": concurrency,
            "tasks": _tasks_record(tasks),
        }
    )
    images = _Images(image)

    def make(spec: SandboxSpec, task: Task) -> Sandbox:
        return backends.create(spec, sandbox, images.for_task(task) if sandbox == "docker" else None)

    ctx = Context(
        run_id=run_id,
        adapter=adapter,
        install=install,
        model=model,
        upstream=upstream,
        upstream_key=upstream_key,
        make_sandbox=make,
        calls_dir=run_dir / "calls",
        artifacts_dir=run_dir / "artifacts",
        agent_command=agent_command,
    )
    progress = Progress(len(todo) + len(done), len(done), sum(r.passed for r in done.values()))
    on_progress(progress)
    try:
        fresh = asyncio.run(_run(ctx, todo, concurrency, retries, journal, progress, on_progress))
        journal.write({"type": "finished", "run_id": run_id, "ts": time.time()})
    finally:
        journal.close()
    return RunResult(run_id, run_dir, list(done.values()) + fresh, skipped)
