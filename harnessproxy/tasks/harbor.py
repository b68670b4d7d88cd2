"""Harbor / Terminal-Bench task folders, loaded unchanged:

    task.toml            [agent] timeout_sec, [verifier] timeout_sec + env, [environment] cpus, memory_mb
                         (or memory = "2G"), storage_mb, docker_image
    instruction.md       the prompt
    environment/         a Docker build context (Dockerfile) for the docker backend
    tests/test.sh        writes /logs/verifier/reward.txt or reward.json (else its exit code counts)
    solution/solve.sh    the reference solution (the oracle runs it)

The local backend runs no Dockerfile. Its workspace is what the Dockerfile puts in its final WORKDIR: every
COPY/ADD whose destination lies inside WORKDIR is assembled into a staged folder (RUN lines and copies
elsewhere are not replayed; tasks that need them need the docker backend). No Dockerfile: an empty /app."""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
import shlex
import shutil
import tomllib
from pathlib import Path
from typing import Any

from harnessproxy.sandbox import Limits
from harnessproxy.tasks import Task, TaskError

DEFAULT_WORKDIR = "/app"


def is_task(path: Path) -> bool:
    return (path / "task.toml").is_file() or (path / "instruction.md").is_file()


def load(path: Path, *, stage: Path) -> tuple[list[Task], list[TaskError]]:
    dirs = [path] if is_task(path) else sorted(p for p in path.iterdir() if p.is_dir() and is_task(p))
    if not dirs:
        return [], [TaskError(f"{path}: no task here (a task folder has task.toml and instruction.md)")]
    tasks, errors = [], []
    for d in dirs:
        try:
            tasks.append(load_one(d, stage=stage))
        except TaskError as exc:
            errors.append(exc)
    return tasks, errors


def _number(table: dict[str, Any], key: str, where: str, default: float | None) -> float | None:
    value = table.get(key, default)
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0):
        raise TaskError(f"{where}: field {key}: must be a positive number, got {value!r}")
    return value


def _memory_mb(env: dict[str, Any], where: str) -> int | None:
    if "memory_mb" in env:
        return int(_number(env, "memory_mb", where, None) or 0) or None
    raw = env.get("memory")
    if raw is None:
        return None
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([KMGT]?)i?B?\s*", str(raw), re.IGNORECASE)
    if not m:
        raise TaskError(f"{where}: field environment.memory: expected a size like '2G', got {raw!r}")
    scale = {"": 1 / (1 << 20), "K": 1 / 1024, "M": 1, "G": 1024, "T": 1 << 20}[m[2].upper()]
    return max(1, int(float(m[1]) * scale))


def load_one(d: Path, *, stage: Path) -> Task:
    task_id = d.name
    where = f"task {task_id} ({d / 'task.toml'})"
    try:
        config = tomllib.loads((d / "task.toml").read_text()) if (d / "task.toml").is_file() else {}
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{where}: not valid TOML: {exc}") from None
    for section in ("agent", "verifier", "environment", "metadata"):
        if not isinstance(config.get(section, {}), dict):
            raise TaskError(f"{where}: field {section}: must be a table")
    agent, verifier, env = config.get("agent", {}), config.get("verifier", {}), config.get("environment", {})
    instruction_file = d / "instruction.md"
    if not instruction_file.is_file() or not instruction_file.read_text().strip():
        raise TaskError(f"task {task_id}: field instruction.md: missing or empty")
    if not (d / "tests" / "test.sh").is_file():
        raise TaskError(f"task {task_id}: field tests/test.sh: missing (the verifier entry point)")
    venv = verifier.get("env", {})
    if not isinstance(venv, dict) or not all(isinstance(v, str) for v in venv.values()):
        raise TaskError(f"{where}: field verifier.env: must be a table of strings")
    solve = d / "solution" / "solve.sh"
    environment = d / "environment"
    workdir, workspace = _workspace(d, environment, stage, task_id)
    storage = _number(env, "storage_mb", where, None)
    cpus = _number(env, "cpus", where, None)
    return Task(
        id=task_id,
        instruction=instruction_file.read_text(),
        workspace=workspace,
        workdir=workdir,
        tests=d / "tests",
        solution=solve.read_text() if solve.is_file() else None,
        agent_timeout_s=float(_number(agent, "timeout_sec", where, 600.0) or 600.0),
        verifier_timeout_s=float(_number(verifier, "timeout_sec", where, 300.0) or 300.0),
        verifier_env=dict(venv),
        limits=Limits(
            cpus=float(cpus) if cpus else None,
            memory_mb=_memory_mb(env, where),
            disk_mb=int(storage) if storage else None,
        ),
        environment=environment if (environment / "Dockerfile").is_file() else None,
        image=env.get("docker_image") if isinstance(env.get("docker_image"), str) else None,
        metadata=dict(config.get("metadata", {})),
        source=str(d),
    )


def _instructions(dockerfile: str) -> list[tuple[str, str]]:
    text = re.sub(r"\\\r?\n", " ", dockerfile)
    out = []
    for line in text.splitlines():
        line = line.strip()
        if line and not line.startswith("#"):
            op, _, rest = line.partition(" ")
            out.append((op.upper(), rest.strip()))
    return out


def _copy_args(rest: str) -> list[str]:
    if rest.startswith("["):
        try:
            args = json.loads(rest)
        except ValueError:
            args = []
    else:
        args = shlex.split(rest)
    return [a for a in args if not a.startswith("--")]


def _workspace(d: Path, environment: Path, stage: Path, task_id: str) -> tuple[str, Path]:
    """(workdir, host workspace folder) for the local backend, from the Dockerfile's WORKDIR and COPYs."""
    dockerfile = environment / "Dockerfile"
    if not dockerfile.is_file():
        empty = stage / f"{task_id}-empty"
        empty.mkdir(parents=True, exist_ok=True)
        return DEFAULT_WORKDIR, empty
    workdir = "/"
    copies: list[tuple[list[str], str, bool]] = []
    for op, rest in _instructions(dockerfile.read_text()):
        if op == "WORKDIR":
            workdir = posixpath.normpath(posixpath.join(workdir, rest.strip('"')))
        elif op in ("COPY", "ADD"):
            args = _copy_args(rest)
            if len(args) >= 2:
                dest = posixpath.normpath(posixpath.join(workdir, args[-1]))
                copies.append((args[:-1], dest, args[-1].endswith("/") or args[-1] == "."))
    workdir = workdir if workdir != "/" else DEFAULT_WORKDIR
    digest = hashlib.sha256(str(d.resolve()).encode()).hexdigest()[:10]
    target = stage / f"{task_id}-{digest}"
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    for sources, dest, into_dir in copies:
        if dest != workdir and not dest.startswith(workdir.rstrip("/") + "/"):
            continue
        rel = posixpath.relpath(dest, workdir)
        for src in sources:
            host = (environment / src).resolve()
            if not host.is_relative_to(environment.resolve()) or not host.exists():
                raise TaskError(
                    f"task {task_id}: field environment/Dockerfile: COPY source {src!r} not found"
                )
            into = target / rel
            if host.is_dir():
                shutil.copytree(host, into, symlinks=True, dirs_exist_ok=True)
            else:
                into = into / host.name if (into_dir or into.is_dir() or len(sources) > 1) else into
                into.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(host, into)
    return workdir, target
