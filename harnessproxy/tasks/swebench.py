"""SWE-bench instances (JSONL or parquet rows) against local clones of their repos (no network here).

Each row needs instance_id, repo, base_commit, problem_statement, patch, test_patch, FAIL_TO_PASS and
PASS_TO_PASS (lists, or JSON strings of lists as in the published datasets). The repo `owner/name` is
found in the `--repos` folder as `owner__name` (SWE-bench's naming) or `name`. The workspace is the clone
checked out at base_commit, at /testbed. Grading is SWE-bench's: the test patch is applied, the tests it
touches run (`test_cmd` from the row, default `python3 -m pytest -rA`), and the instance is resolved when
every FAIL_TO_PASS test passes and every PASS_TO_PASS test still passes. The gold `patch` is the oracle's
solution."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

from harnessproxy.shell import heredoc
from harnessproxy.tasks import Task, TaskError

WORKDIR = "/testbed"
REQUIRED = ("instance_id", "repo", "base_commit", "problem_statement", "patch", "test_patch")
_EOF = "HARNESSPROXY_PATCH_EOF"


def _rows(path: Path) -> list[dict[str, Any]]:
    if path.suffix == ".parquet":
        import duckdb

        con = duckdb.connect()
        try:
            cur = con.execute("SELECT * FROM read_parquet(?)", [str(path)])
            cols = [d[0] for d in cur.description]
            return [dict(zip(cols, row, strict=True)) for row in cur.fetchall()]
        finally:
            con.close()
    rows = []
    for lineno, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError as exc:
            row = {"__error__": f"{path}:{lineno}: not JSON: {exc}"}
        rows.append(row if isinstance(row, dict) else {"__error__": f"{path}:{lineno}: not a JSON object"})
    return rows


def _tests(value: Any, where: str, field: str) -> list[str]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError:
            raise TaskError(f"{where}: field {field}: not a JSON list of test ids") from None
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TaskError(f"{where}: field {field}: must be a list of test ids")
    return value


def _apply_script(patch: str) -> str:
    return "#!/bin/bash\nset -e\n" + heredoc("git apply --whitespace=nowarn -", patch, _EOF)


def touched_files(patch: str) -> list[str]:
    return sorted(set(re.findall(r"^diff --git a/(\S+) b/", patch, re.MULTILINE)))


def load(path: Path, *, repos: Path | None, stage: Path) -> tuple[list[Task], list[TaskError]]:
    tasks, errors = [], []
    for row in _rows(path):
        try:
            tasks.append(load_row(row, path, repos=repos, stage=stage))
        except TaskError as exc:
            errors.append(exc)
    return tasks, errors


def load_row(row: dict[str, Any], path: Path, *, repos: Path | None, stage: Path) -> Task:
    if "__error__" in row:
        raise TaskError(row["__error__"])
    iid = row.get("instance_id")
    where = f"task {iid or '(no instance_id)'} ({path})"
    for field in REQUIRED:
        if not isinstance(row.get(field), str) or not row[field].strip():
            raise TaskError(f"{where}: field {field}: missing or empty")
    f2p = _tests(row.get("FAIL_TO_PASS", []), where, "FAIL_TO_PASS")
    p2p = _tests(row.get("PASS_TO_PASS", []), where, "PASS_TO_PASS")
    if not f2p:
        raise TaskError(f"{where}: field FAIL_TO_PASS: empty, so nothing could show the issue resolved")
    if repos is None:
        raise TaskError(
            f"{where}: field repo: SWE-bench tasks need --repos DIR with a local clone of {row['repo']}"
        )
    owner_name = row["repo"]
    clone = next(
        (
            c
            for c in (repos / owner_name.replace("/", "__"), repos / owner_name.split("/")[-1])
            if (c / ".git").exists()
        ),
        None,
    )
    if clone is None:
        raise TaskError(f"{where}: field repo: no clone of {owner_name} in {repos} (as owner__name or name)")
    workspace = stage / f"{iid}"
    shutil.rmtree(workspace, ignore_errors=True)
    workspace.parent.mkdir(parents=True, exist_ok=True)
    for argv in (
        ["git", "clone", "--quiet", "--no-checkout", str(clone), str(workspace)],
        ["git", "-C", str(workspace), "checkout", "--quiet", "--detach", row["base_commit"]],
    ):
        done = subprocess.run(argv, capture_output=True, text=True)
        if done.returncode != 0:
            raise TaskError(f"{where}: field base_commit: {' '.join(argv[:3])} failed: {done.stderr.strip()}")
    subprocess.run(["git", "-C", str(workspace), "remote", "remove", "origin"], capture_output=True)
    tests = stage / f"{iid}-tests"
    shutil.rmtree(tests, ignore_errors=True)
    tests.mkdir(parents=True)
    (tests / "test.patch").write_text(row["test_patch"])
    files = " ".join(shlex.quote(f) for f in touched_files(row["test_patch"]))
    test_cmd = row.get("test_cmd") or "python3 -m pytest -rA"
    (tests / "test.sh").write_text(
        f"#!/bin/bash\ncd {WORKDIR}\n"
        "git apply --whitespace=nowarn /tests/test.patch || exit 3\n"
        f"{test_cmd} {files} > /logs/verifier/test_output.log 2>&1\n"
        'echo "tests exited $?"\n'
    )
    return Task(
        id=iid,
        instruction=row["problem_statement"],
        workspace=workspace,
        workdir=WORKDIR,
        tests=tests,
        solution=_apply_script(row["patch"]),
        agent_timeout_s=float(row.get("agent_timeout_sec") or 1800.0),
        verifier_timeout_s=float(row.get("verifier_timeout_sec") or 900.0),
        grader="swebench",
        metadata={
            "repo": owner_name,
            "base_commit": row["base_commit"],
            "FAIL_TO_PASS": f2p,
            "PASS_TO_PASS": p2p,
        },
        source=f"{path}#{iid}",
    )
