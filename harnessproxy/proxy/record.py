"""The per-call record and the per-rollout journal it is appended to.

The journal is the ground truth: one JSON object per line, fsync'd before the agent sees its response end.
DuckDB is filled from journals afterwards, so a killed process loses nothing already answered."""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import orjson

SECRET_HEADERS = {"authorization", "x-api-key", "api-key", "x-goog-api-key", "proxy-authorization", "cookie"}


def redact(headers: dict[str, str]) -> dict[str, str]:
    return {k: ("[redacted]" if k.lower() in SECRET_HEADERS else v) for k, v in headers.items()}


def body_text(raw: bytes | None) -> tuple[str | None, str]:
    """A body as text for the record, exactly: UTF-8 when it is, base64 otherwise."""
    if raw is None:
        return None, "none"
    try:
        return raw.decode("utf-8"), "utf-8"
    except UnicodeDecodeError:
        return base64.b64encode(raw).decode(), "base64"


@dataclass
class CallRecord:
    rollout_id: str
    seq: int
    method: str
    path: str
    protocol: str
    kind: str
    call_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    endpoint: str | None = None
    model: str | None = None
    stream: bool = False
    request: dict[str, Any] = field(default_factory=dict)
    upstream_request: dict[str, Any] | None = None
    status: int | None = None
    response: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, Any] = field(default_factory=dict)
    stop_reason: str | None = None
    started_at: float = field(default_factory=time.time)
    first_byte_at: float | None = None
    ended_at: float | None = None
    error: dict[str, Any] | None = None
    incomplete: bool = False

    def fail(self, kind: str, message: str, *, incomplete: bool = False) -> None:
        self.error = {"kind": kind, "message": message}
        self.incomplete = self.incomplete or incomplete

    def to_json(self) -> bytes:
        try:
            return orjson.dumps(self)  # dataclasses natively, no deep copy
        except TypeError:  # an integer beyond 64 bits somewhere in a body
            return json.dumps(asdict(self), ensure_ascii=False).encode()


class Journal:
    """Append-only JSONL file for one rollout. Thread-safe: appends may come from worker threads."""

    def __init__(self, path: str | Path, *, fsync: bool = True) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._fsync = fsync
        self._lock = threading.Lock()

    def append(self, record: CallRecord) -> None:
        line = record.to_json() + b"\n"
        with self._lock:
            os.write(self._fd, line)
            if self._fsync:
                os.fsync(self._fd)

    def close(self) -> None:
        with self._lock:
            if self._fd >= 0:
                os.close(self._fd)
                self._fd = -1


def read_journal(path: str | Path) -> list[dict[str, Any]]:
    """Records of a journal; a torn last line (a crash mid-write) is skipped, never fatal."""
    records = []
    with open(path, encoding="utf-8") as fh:
        for line in fh:
            if not line.strip():
                continue
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return records
