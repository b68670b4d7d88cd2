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
