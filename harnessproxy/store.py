"""DuckDB, filled from journals. Loading is idempotent (keyed by call_id), so re-loading after a crash or a
resume never duplicates a call."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import duckdb

from harnessproxy.proxy.record import read_journal
from harnessproxy.proxy.sse import events_of
from harnessproxy.resources import recorder_sql

_COLUMNS = (
    "call_id, rollout_id, seq, protocol, kind, method, path, endpoint, model, stream, status, stop_reason, "
    "input_tokens, output_tokens, cache_read_tokens, cache_creation_tokens, started_at, first_byte_ms, "
    "duration_ms, error_kind, error_message, incomplete, request_headers, request_body, upstream_request, "
    "response_body, response_events, response_meta, record"
)


def connect(db: str | Path) -> duckdb.DuckDBPyConnection:
    con = duckdb.connect(str(db))
    con.execute(recorder_sql("schema.sql"))
    return con


def _dump(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _ms(start: float | None, end: float | None) -> float | None:
    return None if start is None or end is None else round((end - start) * 1000.0, 3)


def call_row(r: dict[str, Any]) -> tuple[Any, ...]:
    request = r.get("request") or {}
    response = dict(r.get("response") or {})
    body_text = request.get("body") if request.get("body_encoding") == "utf-8" else None
    request_body = None
    if body_text is not None:
        with contextlib.suppress(json.JSONDecodeError):
            json.loads(body_text)
            request_body = body_text  # verbatim: the JSON type keeps the text as sent
    extra = {}
    if request_body is None and request.get("body") is not None:
        extra["request_body_raw"] = request.get("body")
        extra["request_body_encoding"] = request.get("body_encoding")
    response_body = (
        response.pop("reassembled", None) if "reassembled" in response else response.pop("body", None)
    )
    # The journal keeps the stream byte for byte; DuckDB keeps its events (data verbatim), not a second copy.
    raw_sse = response.pop("raw_sse", None)
    if isinstance(raw_sse, str) and response.get("raw_sse_encoding") is None:
        events = events_of(raw_sse)
    else:
        events = None
    usage = r.get("usage") or {}
    error = r.get("error") or {}
    return (
        r["call_id"],
        r["rollout_id"],
        r["seq"],
        r["protocol"],
        r["kind"],
        r["method"],
        r["path"],
        r.get("endpoint"),
        r.get("model"),
        bool(r.get("stream")),
        r.get("status"),
        r.get("stop_reason"),
        usage.get("input_tokens"),
        usage.get("output_tokens"),
        usage.get("cache_read_tokens"),
        usage.get("cache_creation_tokens"),
        r["started_at"],
        _ms(r["started_at"], r.get("first_byte_at")),
        _ms(r["started_at"], r.get("ended_at")),
        error.get("kind"),
        error.get("message"),
        bool(r.get("incomplete")),
        _dump(request.get("headers")),
        request_body,
        _dump(r.get("upstream_request")),
        _dump(response_body),
        _dump(events),
        _dump(response),
        _dump(extra or None),
    )


def load_records(con: duckdb.DuckDBPyConnection, records: Iterable[dict[str, Any]]) -> int:
    rows = [call_row(r) for r in records]
    if not rows:
        return 0
    before = con.execute("SELECT count(*) FROM llm_calls").fetchone()[0]  # type: ignore[index]
    marks = ", ".join(["?"] * 16 + ["to_timestamp(?)"] + ["?"] * 12)
    con.executemany(f"INSERT OR IGNORE INTO llm_calls ({_COLUMNS}) VALUES ({marks})", rows)
    after = con.execute("SELECT count(*) FROM llm_calls").fetchone()[0]  # type: ignore[index]
    return int(after - before)


def load_journals(db: str | Path, journals: Iterable[str | Path]) -> int:
    """Load journal files into `db`; returns how many calls were new."""
    con = connect(db)
    try:
        return sum(load_records(con, read_journal(p)) for p in journals)
    finally:
        con.close()


def _ts(value: Any) -> Any:
    return None if value is None else float(value)


def load_run(db: str | Path, run_dir: str | Path) -> int:
    """Load a run's journal (runs, tasks, rollouts, evaluations, artifacts, events) and the call journals of
    its finished rollouts into `db`. Idempotent: a re-load replaces the same rows. Returns rollouts loaded."""
    from harnessproxy.controller.run import read_run

    run_dir = Path(run_dir)
    records = read_run(run_dir / "run.jsonl")
    con = connect(db)
    try:
        con.execute("BEGIN")
        finished = {r["run_id"]: r["ts"] for r in records if r.get("type") == "finished"}
        for lineno, rec in enumerate(records):
            kind = rec.get("type")
            if kind == "run":
                _load_run_row(con, rec, finished.get(rec["run_id"]))
            elif kind == "event":
                con.execute(
                    "INSERT OR REPLACE INTO events VALUES (?, ?, ?, to_timestamp(?), ?, ?, ?)",
                    (
                        f"{_run_id(records)}:{lineno}",
                        _run_id(records),
                        rec.get("rollout_id"),
                        _ts(rec.get("ts")),
                        rec.get("state"),
                        rec.get("attempt"),
                        rec.get("detail"),
                    ),
                )
        rollouts = [r for r in records if r.get("type") == "rollout"]
        for r in rollouts:
            _load_rollout(con, r, run_dir)
        for r in rollouts:
            if r.get("journal") and Path(r["journal"]).is_file():
                load_records(con, read_journal(r["journal"]))
        con.execute("COMMIT")
        return len(rollouts)
    finally:
        con.close()


def _run_id(records: list[dict[str, Any]]) -> str:
    return next((r["run_id"] for r in records if r.get("type") == "run"), "")


def _load_run_row(con: duckdb.DuckDBPyConnection, rec: dict[str, Any], finished: Any) -> None:
    config = {k: v for k, v in rec.items() if k not in ("type", "tasks")}
    con.execute(
        "INSERT OR REPLACE INTO runs VALUES (?, to_timestamp(?), to_timestamp(?), ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            rec["run_id"],
            _ts(rec.get("started_at")),
            _ts(finished),
            rec.get("agent"),
            rec.get("agent_version"),
            rec.get("model"),
            rec.get("upstream"),
            rec.get("sandbox"),
            rec.get("n"),
            rec.get("concurrency"),
            _dump(config),
        ),
    )
    for t in rec.get("tasks") or []:
        con.execute(
            "INSERT OR REPLACE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?)",
            (
                rec["run_id"],
                t["task_id"],
                t.get("source"),
                t.get("instruction"),
                t.get("grader"),
                t.get("workdir"),
                _dump(t.get("metadata")),
            ),
        )


def _load_rollout(con: duckdb.DuckDBPyConnection, r: dict[str, Any], run_dir: Path) -> None:
    t, d = r.get("timings") or {}, r.get("diff") or {}
    con.execute(
        "INSERT OR REPLACE INTO rollouts VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, to_timestamp(?), "
        "to_timestamp(?), ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (
            r["rollout_id"],
            r["run_id"],
            r["task_id"],
            r["index"],
            r["attempt"],
            r.get("agent"),
            r.get("model"),
            r["outcome"],
            r.get("error_kind"),
            r.get("error"),
            r.get("agent_exit_code"),
            _ts(r.get("started_at")),
            _ts(r.get("finished_at")),
            t.get("queued"),
            t.get("sandbox_start"),
            t.get("agent"),
            t.get("collect"),
            t.get("eval"),
            t.get("total"),
            d.get("patch"),
            d.get("added"),
            d.get("modified"),
            d.get("deleted"),
            d.get("binary"),
        ),
    )
    ev = r.get("evaluation")
    if ev:
        con.execute(
            "INSERT OR REPLACE INTO evaluations VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (
                r["rollout_id"],
                ev["passed"],
                ev.get("reward"),
                _dump(ev.get("metrics")),
                ev.get("exit_code"),
                ev.get("stdout_tail"),
                ev.get("stderr_tail"),
                ev.get("duration_s"),
                ev.get("error"),
            ),
        )
    where = run_dir / "artifacts" / r["rollout_id"]
    for name in r.get("artifacts") or []:
        path = where / name
        if path.is_file():
            data = path.read_bytes()
            con.execute(
                "INSERT OR REPLACE INTO artifacts VALUES (?, ?, ?, ?)",
                (r["rollout_id"], name, len(data), data),
            )
