"""OpenAI Responses: event reassembly into a `response` object, errors, usage.

`response.completed` (or .incomplete/.failed) carries the authoritative object; the items built from
`output_item.*` and deltas fill in a stream that was cut before it, or a server that leaves `output` empty."""

from __future__ import annotations

import copy
import json
from typing import Any

from harnessproxy.proxy.codecs import Json, usage_record
from harnessproxy.proxy.codecs.openai_chat import openai_error_body
from harnessproxy.proxy.sse import SSEEvent, encode_event

_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
_SNAPSHOT = {"response.created", "response.in_progress", "response.queued"}


class ResponsesCodec:
    name = "openai_responses"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def error_body(self, status: int, message: str) -> Json:
        return openai_error_body(status, message)

    def usage(self, response: Json | None) -> Json:
        u = (response or {}).get("usage") or {}
        cached = (u.get("input_tokens_details") or {}).get("cached_tokens")
        return usage_record(u.get("input_tokens"), u.get("output_tokens"), cached, None)

    def stop_reason(self, response: Json | None) -> str | None:
        if not response:
            return None
        if response.get("status") == "incomplete":
            return (response.get("incomplete_details") or {}).get("reason") or "incomplete"
        return response.get("status")

    def reassembler(self) -> ResponsesReassembler:
        return ResponsesReassembler()


class ResponsesReassembler:
    def __init__(self) -> None:
        self.snapshot: Json | None = None
        self.final: Json | None = None
        self.items: dict[int, Json] = {}
        self.last_sequence = -1
        self.unknown_event_types: list[str] = []
        self.error: Json | None = None
        self.terminated = False

    def feed(self, event: SSEEvent) -> None:
        if event.comment is not None or not event.data:
            return
        try:
            data = json.loads(event.data)
        except json.JSONDecodeError:
            self._unknown(event.event or "<invalid json>")
            return
        if not isinstance(data, dict):
            self._unknown("<non-object>")
            return
        kind = data.get("type") or event.event or ""
        if isinstance(data.get("sequence_number"), int):
            self.last_sequence = data["sequence_number"]
        if kind in _TERMINAL:
            self.final = copy.deepcopy(data.get("response") or {})
            self.terminated = True
            if kind == "response.failed":
                self.error = self.final.get("error") or {"message": "response.failed"}
        elif kind in _SNAPSHOT:
            self.snapshot = copy.deepcopy(data.get("response") or {})
        elif kind == "error":
            self.error = {k: v for k, v in data.items() if k not in ("type", "sequence_number")}
        elif kind.startswith("response."):
            self._item_event(kind, data)
        else:
            self._unknown(kind)

    def _unknown(self, kind: str) -> None:
        if kind not in self.unknown_event_types:
            self.unknown_event_types.append(kind)

    def _item_event(self, kind: str, data: Json) -> None:
        index = data.get("output_index", 0)
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            self.items[index] = copy.deepcopy(data.get("item") or {})
            return
        item = self.items.setdefault(index, {})
        if kind == "response.content_part.added":
            item.setdefault("content", []).append(copy.deepcopy(data.get("part") or {}))
        elif kind in (
            "response.output_text.delta",
            "response.reasoning_text.delta",
            "response.refusal.delta",
        ):
            field = "refusal" if kind == "response.refusal.delta" else "text"
            part = _part(item, "content", data.get("content_index", 0))
            part[field] = part.get(field, "") + data.get("delta", "")
        elif kind == "response.reasoning_summary_part.added":
            item.setdefault("summary", []).append(copy.deepcopy(data.get("part") or {}))
        elif kind == "response.reasoning_summary_text.delta":
            part = _part(item, "summary", data.get("summary_index", 0))
            part["text"] = part.get("text", "") + data.get("delta", "")
        elif kind == "response.function_call_arguments.delta":
            item["arguments"] = item.get("arguments", "") + data.get("delta", "")
        elif kind == "response.function_call_arguments.done":
            item["arguments"] = data.get("arguments", item.get("arguments", ""))
        elif kind == "response.custom_tool_call_input.delta":
            item["input"] = item.get("input", "") + data.get("delta", "")
        elif kind == "response.custom_tool_call_input.done":
            item["input"] = data.get("input", item.get("input", ""))
        elif kind.endswith(".done") or kind.endswith(".added") or kind.endswith(".delta"):
            pass  # the matching output_item.done carries the authoritative item
        else:
            self._unknown(kind)

    def result(self) -> Json | None:
        built = [self.items[i] for i in sorted(self.items)]
        if self.final is not None:
            if not self.final.get("output") and built:
                self.final["output"] = built
            return self.final
        if self.snapshot is None and not built:
            return None
        out = dict(self.snapshot or {})
        out["output"] = built
        return out

    def error_tail(self, message: str) -> bytes:
        response: dict[str, Any] = dict(self.snapshot or {"object": "response"})
        response["output"] = [self.items[i] for i in sorted(self.items)]
        response["status"] = "failed"
        response["error"] = {"code": "server_error", "message": message}
        body = {"type": "response.failed", "sequence_number": self.last_sequence + 1, "response": response}
        return encode_event(json.dumps(body), event="response.failed")


def _part(item: Json, field: str, index: int) -> Json:
    parts = item.setdefault(field, [])
    while len(parts) <= index:
        parts.append({})
    return parts[index]


CODEC = ResponsesCodec()
