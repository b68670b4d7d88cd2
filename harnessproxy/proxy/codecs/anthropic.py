"""Anthropic Messages: stream reassembly into a `message` object, errors, usage."""

from __future__ import annotations

import copy
import json
from typing import Any

from harnessproxy.proxy.codecs import Json, ReassemblerBase, loads, usage_record
from harnessproxy.proxy.sse import SSEEvent, encode_event

_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    404: "not_found_error",
    413: "request_too_large",
    415: "invalid_request_error",
    429: "rate_limit_error",
    529: "overloaded_error",
}
_KNOWN_EVENTS = {
    "message_start",
    "content_block_start",
    "content_block_delta",
    "content_block_stop",
    "message_delta",
    "message_stop",
    "ping",
    "error",
}
# Blocks whose input arrives as concatenated input_json_delta fragments.
_JSON_INPUT_BLOCKS = {"tool_use", "server_tool_use", "mcp_tool_use"}


class AnthropicCodec:
    name = "anthropic"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"x-api-key": key}

    def error_body(self, status: int, message: str) -> Json:
        kind = _ERROR_TYPES.get(status, "api_error")
        return {"type": "error", "error": {"type": kind, "message": message}}

    def usage(self, response: Json | None) -> Json:
        u = (response or {}).get("usage") or {}
        return usage_record(
            u.get("input_tokens"),
            u.get("output_tokens"),
            u.get("cache_read_input_tokens"),
            u.get("cache_creation_input_tokens"),
        )

    def stop_reason(self, response: Json | None) -> str | None:
        return (response or {}).get("stop_reason")

    def reassembler(self) -> AnthropicReassembler:
        return AnthropicReassembler()


class AnthropicReassembler(ReassemblerBase):
    def __init__(self) -> None:
        super().__init__()
        self.message: Json | None = None
        self.blocks: dict[int, Json] = {}
        self.parts: dict[tuple[int, str], list[str]] = {}  # joined once in result(): += would be quadratic
        self.partial_json: dict[int, list[str]] = {}

    def feed(self, event: SSEEvent) -> None:
        data = self._parse(event)
        if data is None:
            return
        kind = data.get("type") or event.event
        if kind not in _KNOWN_EVENTS:
            self._unknown(str(kind))
            return
        getattr(self, f"_on_{kind}")(data)

    def _on_message_start(self, data: Json) -> None:
        self.message = copy.deepcopy(data.get("message") or {})

    def _on_content_block_start(self, data: Json) -> None:
        index = data["index"]
        block = copy.deepcopy(data.get("content_block") or {})
        self.blocks[index] = block
        if block.get("type") in _JSON_INPUT_BLOCKS:
            self.partial_json[index] = []

    def _on_content_block_delta(self, data: Json) -> None:
        index = data["index"]
        block = self.blocks.setdefault(index, {})
        delta = data.get("delta") or {}
        kind = delta.get("type")
        if kind == "text_delta":
            self._part(index, block, "text").append(delta.get("text", ""))
        elif kind == "input_json_delta":
            self.partial_json.setdefault(index, []).append(delta.get("partial_json", ""))
        elif kind == "thinking_delta":
            self._part(index, block, "thinking").append(delta.get("thinking", ""))
        elif kind == "signature_delta":
            block["signature"] = delta.get("signature", "")
        elif kind == "citations_delta":
            block.setdefault("citations", []).append(delta.get("citation"))
        else:
            self._unknown(f"content_block_delta:{kind}")

    def _part(self, index: int, block: Json, field: str) -> list[str]:
        parts = self.parts.get((index, field))
        if parts is None:
            parts = self.parts[(index, field)] = [block.get(field, "")]
        return parts

    def _on_content_block_stop(self, data: Json) -> None:
        self._finish_json(data["index"])

    def _finish_json(self, index: int) -> None:
        if index not in self.partial_json:
            return
        raw = "".join(self.partial_json.pop(index))
        block = self.blocks[index]
        if not raw.strip():
            block["input"] = {}
            return
        try:
            block["input"] = loads(raw)
        except json.JSONDecodeError:
            # Keep what arrived rather than pretending the tool got `{}` (the classic translator bug).
            block["input"] = raw
            block["_input_json_invalid"] = True

    def _on_message_delta(self, data: Json) -> None:
        if self.message is None:
            self.message = {}
        for key, value in (data.get("delta") or {}).items():
            self.message[key] = value
        usage = data.get("usage") or {}
        target = self.message.setdefault("usage", {})
        for key, value in usage.items():
            if value is not None:
                target[key] = value

    def _on_message_stop(self, data: Json) -> None:
        self.terminated = True

    def _on_ping(self, data: Json) -> None:
        pass

    def _on_error(self, data: Json) -> None:
        self.error = data.get("error") or data

    def result(self) -> Json | None:
        if self.message is None and not self.blocks:
            return None
        for index in list(self.partial_json):
            self._finish_json(index)
        for (index, field), parts in self.parts.items():
            self.blocks[index][field] = "".join(parts)
        message = dict(self.message or {})
        message["content"] = [self.blocks[i] for i in sorted(self.blocks)]
        return message

    def error_tail(self, message: str) -> bytes:
        body: dict[str, Any] = {"type": "error", "error": {"type": "api_error", "message": message}}
        return encode_event(json.dumps(body), event="error")


CODEC = AnthropicCodec()
