"""Scoring in a NEW sandbox built from the task: only the rollout's diff is applied, then the task's tests are
copied in and run with a fresh /logs/verifier. Nothing the agent left anywhere else can reach the verifier,
and the host reads the reward files without following links (the agent's code runs inside the tests)."""

from __future__ import annotations

import json
import math
import os
import re
import shutil
import stat
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harnessproxy.sandbox import Diff, Sandbox, SandboxError, SandboxSpec
from harnessproxy.tasks import Task

TAIL = 4000
RUN_TESTS = (
    "if command -v bash >/dev/null 2>&1; then exec bash /tests/test.sh; else exec sh /tests/test.sh; fi"
)


class EvalError(Exception):
    """The evaluator itself failed (verifier timeout or crash, an unreadable reward): error_kind=eval."""


@dataclass
class Evaluation:
    passed: bool
    reward: float
    metrics: dict[str, Any] = field(default_factory=dict)
    exit_code: int | None = None
    stdout_tail: str = ""
    stderr_tail: str = ""
    duration_s: float = 0.0
    error: str | None = None  # set when the evaluator failed (then passed is False)


def read_regular(path: Path, limit: int = 1 << 20) -> bytes | None:
    """A file the sandbox wrote, read only if it is a plain file (no symlink to a host file), capped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise EvalError(f"{path.name} is not a plain file ({exc.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise EvalError(f"{path.name} is not a plain file")
        return os.read(fd, limit)
    finally:
        os.close(fd)


def reward_from(logs: Path, exit_code: int) -> tuple[float, dict[str, Any]]:
    """reward.txt, else reward.json, else the test script's exit code (0 → 1.0)."""
    txt = read_regular(logs / "reward.txt")
    if txt is not None:
        try:
            value = float(txt.decode().strip())
        except (UnicodeDecodeError, ValueError):
            raise EvalError(f"reward.txt holds {txt[:40]!r}, not a number") from None
        if not math.isfinite(value):
            raise EvalError(f"reward.txt holds {value}, not a finite number")
        return value, {}
    raw = read_regular(logs / "reward.json")
    if raw is not None:
        try:
            data = json.loads(raw)
        except ValueError:
            raise EvalError("reward.json is not JSON") from None
        if isinstance(data, (int, float)) and not isinstance(data, bool):
            return float(data), {}
        if isinstance(data, dict):
            numbers = {
                k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)
            }
            if "reward" in numbers:
                return float(numbers["reward"]), data
            if len(numbers) == 1:
                return float(next(iter(numbers.values()))), data
        raise EvalError("reward.json has no 'reward' number")
    return (1.0 if exit_code == 0 else 0.0), {}


def apply_diff(sb: Sandbox, diff: Diff) -> None:
    """Inside the sandbox, as root, so any path the agent chose lands inside this sandbox and nowhere else."""
    wd = sb.spec.workdir
    if diff.deleted:
        gone = sb.exec(["rm", "-rf", "--", *(f"{wd}/{p}" for p in diff.deleted)], timeout=60)
        if gone.exit_code != 0:
            raise EvalError(f"applying the diff failed (deletions): {gone.stderr.strip()[-300:]}")
    if diff.archive:
        done = sb.exec(["tar", "-xzf", "-", "-C", wd], stdin=diff.archive, timeout=120)
        if done.exit_code != 0:
            raise EvalError(f"applying the diff failed: {done.stderr.strip()[-300:]}")


_PYTEST = re.compile(r"^(PASSED|FAILED|ERROR|XPASS|XFAIL|SKIPPED)\s+(\S+)", re.MULTILINE)
_UNITTEST = re.compile(
    r"^(\w+ \([\w.]+\))(?:.*?)\s\.\.\.\s(ok|FAIL|ERROR|skipped|expected failure)", re.MULTILINE
)


def test_statuses(log: str) -> dict[str, str]:
    """Test id -> PASSED/FAILED from pytest -rA or unittest -v output (SWE-bench's two log formats)."""
    out = {m[2]: "PASSED" if m[1] in ("PASSED", "XFAIL") else "FAILED" for m in _PYTEST.finditer(log)}
    for m in _UNITTEST.finditer(log):
        out[m[1]] = "PASSED" if m[2] in ("ok", "expected failure") else "FAILED"
    return out


def grade_swebench(logs: Path, task: Task) -> tuple[float, dict[str, Any]]:
    """Resolved iff every FAIL_TO_PASS passes and every PASS_TO_PASS still passes."""
    raw = read_regular(logs / "test_output.log", limit=16 << 20)
    statuses = test_statuses((raw or b"").decode(errors="replace"))
    f2p, p2p = task.metadata.get("FAIL_TO_PASS", []), task.metadata.get("PASS_TO_PASS", [])
    f2p_ok = sum(statuses.get(t) == "PASSED" for t in f2p)
    p2p_ok = sum(statuses.get(t) == "PASSED" for t in p2p)
    resolved = f2p_ok == len(f2p) and p2p_ok == len(p2p)
    metrics = {"FAIL_TO_PASS": f"{f2p_ok}/{len(f2p)}", "PASS_TO_PASS": f"{p2p_ok}/{len(p2p)}"}
    return (1.0 if resolved else 0.0), {**metrics, "resolved": resolved}


def evaluate(task: Task, diff: Diff, make: Callable[[SandboxSpec], Sandbox]) -> Evaluation:
    """Raises SandboxError when the evaluation sandbox cannot start (infra); other failures are returned."""
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="hp-eval-") as tmp:
        tests, logs = Path(tmp) / "tests", Path(tmp) / "logs"
        tests.mkdir()
        (logs / "verifier").mkdir(parents=True)
        os.chmod(logs / "verifier", 0o777)
        spec = SandboxSpec(
            task.workspace,
            task.workdir,
            rw_mounts={str(tests): "/tests", str(logs): "/logs"},
            limits=task.limits,
        )
        sb = make(spec)
        sb.start()
        tails: dict[str, str] = {}
        try:
            apply_diff(sb, diff)
            shutil.copytree(task.tests, tests, dirs_exist_ok=True)  # after the diff, from the task itself
            res = sb.exec(["sh", "-c", RUN_TESTS], env=task.verifier_env, timeout=task.verifier_timeout_s)
            tails = {"stdout_tail": res.stdout[-TAIL:], "stderr_tail": res.stderr[-TAIL:]}
            if res.timed_out:
                raise EvalError(f"the verifier timed out after {task.verifier_timeout_s:g} s")
            if res.exit_code < 0:
                raise EvalError(f"the verifier was killed by signal {-res.exit_code}")
            grade = grade_swebench if task.grader == "swebench" else None
            reward, metrics = (
                grade(logs / "verifier", task) if grade else reward_from(logs / "verifier", res.exit_code)
            )
            return Evaluation(
                passed=reward >= 1.0,
                reward=reward,
                metrics=metrics,
                exit_code=res.exit_code,
                duration_s=time.monotonic() - started,
                **tails,
            )
        except EvalError as exc:
            return Evaluation(False, 0.0, error=str(exc), duration_s=time.monotonic() - started, **tails)
        except SandboxError as exc:
            return Evaluation(
                False, 0.0, error=f"evaluation sandbox failed: {exc}", duration_s=time.monotonic() - started
            )
        finally:
            sb.stop()
