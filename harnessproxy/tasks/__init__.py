"""What a rollout works on and how it is scored. Loaders turn Harbor folders and SWE-bench rows into the
same `Task`; a malformed task becomes a `TaskError` naming the task and the field; the others still load."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from harnessproxy.sandbox import Limits


class TaskError(Exception):
    """A task that cannot be loaded or run as written: the message names the task and the field."""


@dataclass
class Task:
    id: str
    instruction: str
    workspace: Path  # host folder the sandbox sees copy-on-write at `workdir` (never modified)
    workdir: str
    tests: Path  # host folder copied to /tests in the evaluation sandbox, after the diff is applied
    solution: str | None = None  # shell script that solves it (the oracle runs it)
    agent_timeout_s: float = 600.0
    verifier_timeout_s: float = 300.0
    verifier_env: dict[str, str] = field(default_factory=dict)
    limits: Limits = field(default_factory=Limits)
    environment: Path | None = None  # a Docker build context (Dockerfile), for the docker backend
    image: str | None = None  # a prebuilt image named by the task
    grader: Literal["reward", "swebench"] = "reward"
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = ""


def load_tasks(
    paths: list[Path], *, stage: Path, repos: Path | None = None
) -> tuple[list[Task], list[TaskError]]:
    """Every task under `paths`: a Harbor task folder, a folder of them, or a SWE-bench .jsonl/.parquet file.
    `stage` holds workspaces the loaders assemble (Dockerfile COPYs, repo checkouts)."""
    from harnessproxy.tasks import harbor, swebench

    tasks: list[Task] = []
    errors: list[TaskError] = []
    for path in paths:
        if path.is_file() and path.suffix in (".jsonl", ".json", ".parquet"):
            got, bad = swebench.load(path, repos=repos, stage=stage)
        elif path.is_dir():
            got, bad = harbor.load(path, stage=stage)
        else:
            got, bad = [], [TaskError(f"{path}: not a task folder, a folder of tasks, or a SWE-bench file")]
        tasks += got
        errors += bad
    unique: dict[str, Task] = {}
    for t in tasks:
        if t.id in unique:
            errors.append(TaskError(f"{t.source}: task id {t.id!r} appears twice; the second is skipped"))
        else:
            unique[t.id] = t
    return list(unique.values()), errors
