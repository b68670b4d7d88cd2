"""Wire codecs: one pure module per protocol (no I/O), behind the small `Codec` Protocol.

Each codec knows its protocol's error shape, how a client is told a stream broke, how to read usage and
stop reason, and how to reassemble a stream into the exact shape of the non-streaming response."""

from __future__ import annotations

import json
from typing import Any, Protocol

import orjson

from harnessproxy.proxy.sse import SSEEvent

Json = dict[str, Any]


class Reassembler(Protocol):
    unknown_event_types: list[str]
    error: Json | None  # an error event that arrived inside the stream
    terminated: bool  # the protocol's own end-of-stream marker was seen

    def feed(self, event: SSEEvent) -> None: ...

    def result(self) -> Json | None: ...

    def error_tail(self, message: str) -> bytes:
        """Bytes that end a broken stream the way this protocol signals an error to its clients."""
        ...


class Codec(Protocol):
    name: str

    def auth_headers(self, key: str) -> dict[str, str]: ...

    def error_body(self, status: int, message: str) -> Json: ...

    def usage(self, response: Json | None) -> Json: ...

    def stop_reason(self, response: Json | None) -> str | None: ...

    def reassembler(self) -> Reassembler: ...


def loads(data: str | bytes) -> Any:
    """Fast JSON on the hot path; the stdlib only for what orjson refuses (integers beyond 64 bits).
    Raises json.JSONDecodeError (a ValueError) for invalid JSON either way."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return json.loads(data)


class ReassemblerBase:
    """What every reassembler shares: the state the server reads, and tolerant event parsing."""

    def __init__(self) -> None:
        self.unknown_event_types: list[str] = []
        self.error: Json | None = None
        self.terminated = False

    def _unknown(self, kind: str) -> None:
        if kind not in self.unknown_event_types:
            self.unknown_event_types.append(kind)

    def _parse(self, event: SSEEvent) -> Json | None:
        """The event's JSON object, or None (comment, empty, not JSON, not an object: noted, never raised)."""
        if event.comment is not None or not event.data:
            return None
        try:
            data = loads(event.data)
        except json.JSONDecodeError:
            self._unknown(event.event or "<invalid json>")
            return None
        if not isinstance(data, dict):
            self._unknown("<non-object>")
            return None
        return data


def usage_record(
    input_tokens: Any = None, output_tokens: Any = None, cache_read: Any = None, cache_creation: Any = None
) -> Json:
    """The protocol-neutral usage shape stored in llm_calls."""
    return {
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cache_read_tokens": cache_read,
        "cache_creation_tokens": cache_creation,
    }


def get_codec(name: str) -> Codec:
    from harnessproxy.proxy.codecs import anthropic, openai_chat, openai_responses

    return {
        "anthropic": anthropic.CODEC,
        "openai_chat": openai_chat.CODEC,
        "openai_responses": openai_responses.CODEC,
    }[name]
