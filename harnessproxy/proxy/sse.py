"""Incremental Server-Sent Events parser: fed raw chunks as they pass through, it never holds more than one
partial event, so reassembly can run beside a live stream instead of after it."""

from __future__ import annotations

from typing import NamedTuple


class SSEEvent(NamedTuple):
    event: str | None
    data: str
    comment: str | None = None  # a ':' line kept verbatim (e.g. keep-alive notes from some gateways)

    def as_record(self) -> dict[str, str]:
        rec: dict[str, str] = {}
        if self.event is not None:
            rec["event"] = self.event
        if self.comment is not None:
            rec["comment"] = self.comment
        else:
            rec["data"] = self.data
        return rec


class SSEParser:
    def __init__(self) -> None:
        self._buf = b""
        self._pending_cr = False

    def feed(self, chunk: bytes) -> list[SSEEvent]:
        if b"\r" in chunk or self._pending_cr:
            chunk = self._normalize(chunk)
        buf = self._buf + chunk
        if b"\n\n" not in buf:
            self._buf = buf
            return []
        *blocks, self._buf = buf.split(b"\n\n")
        out: list[SSEEvent] = []
        for block in blocks:
            out.extend(_parse_block(block))
        return out

    def flush(self) -> list[SSEEvent]:
        """Parse whatever is left at end of stream (a final event without its blank line)."""
        block, self._buf = self._buf, b""
        return _parse_block(block) if block.strip() else []

    def _normalize(self, chunk: bytes) -> bytes:
        if self._pending_cr:
            chunk = b"\r" + chunk
            self._pending_cr = False
        if chunk.endswith(b"\r"):
            chunk = chunk[:-1]
            self._pending_cr = True
        return chunk.replace(b"\r\n", b"\n").replace(b"\r", b"\n")


def _parse_block(block: bytes) -> list[SSEEvent]:
    # Fast paths for the two shapes every LLM server sends: `data: X` and `event: E\ndata: X`.
    if block.startswith(b"data: ") and b"\n" not in block:
        return [SSEEvent(None, block[6:].decode("utf-8", errors="replace"))]
    if block.startswith(b"event: ") and block.count(b"\n") == 1:
        head, _, rest = block.partition(b"\n")
        if rest.startswith(b"data: "):
            return [
                SSEEvent(
                    head[7:].decode("utf-8", errors="replace"), rest[6:].decode("utf-8", errors="replace")
                )
            ]
    event: str | None = None
    data: list[str] = []
    comments: list[SSEEvent] = []
    for raw in block.decode("utf-8", errors="replace").split("\n"):
        if not raw:
            continue
        if raw.startswith(":"):
            comments.append(SSEEvent(None, "", comment=raw[1:].lstrip(" ")))
            continue
        name, sep, value = raw.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "event":
            event = value
        elif name == "data":
            data.append(value)
        # id: and retry: carry nothing we replay; unknown field names are ignored per the SSE spec
    if event is None and not data:
        return comments
    return [*comments, SSEEvent(event, "\n".join(data))]


def events_of(raw: str) -> list[dict[str, str]]:
    """The event list of a recorded stream, for storage and queries."""
    parser = SSEParser()
    return [e.as_record() for e in [*parser.feed(raw.encode()), *parser.flush()]]


def encode_event(data: str, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    return (head + "".join(f"data: {line}\n" for line in data.split("\n")) + "\n").encode()
