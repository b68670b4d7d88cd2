"""OpenAI Responses: event reassembly into a `response` object, errors, usage.

`response.completed` (or .incomplete/.failed) carries the authoritative object; the items built from
`output_item.*` and deltas fill in a stream that was cut before it, or a server that leaves `output` empty."""

from __future__ import annotations

import copy
import json
from typing import Any

from harnessproxy.proxy.codecs import Json, ReassemblerBase, usage_record
from harnessproxy.proxy.codecs.openai_chat import OpenAICodecBase
from harnessproxy.proxy.sse import SSEEvent, encode_event

_TERMINAL = {"response.completed", "response.incomplete", "response.failed"}
_SNAPSHOT = {"response.created", "response.in_progress", "response.queued"}


class ResponsesCodec(OpenAICodecBase):
    name = "openai_responses"

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


class ResponsesReassembler(ReassemblerBase):
    def __init__(self) -> None:
        super().__init__()
        self.snapshot: Json | None = None
        self.final: Json | None = None
        self.items: dict[int, Json] = {}
        # fragments per (output_index, field, part index), joined once in result(): += would be quadratic
        self.parts: dict[tuple[int, str, int, str], list[str]] = {}
        self.last_sequence = -1

    def feed(self, event: SSEEvent) -> None:
        data = self._parse(event)
        if data is None:
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

    def _item_event(self, kind: str, data: Json) -> None:
        index = data.get("output_index", 0)
        if kind == "response.output_item.added" or kind == "response.output_item.done":
            self.items[index] = copy.deepcopy(data.get("item") or {})
            if kind.endswith(".done"):  # authoritative: drop fragments gathered for this item
                for key in [k for k in self.parts if k[0] == index]:
                    del self.parts[key]
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
            self._fragment(index, "content", data.get("content_index", 0), field, data.get("delta", ""))
        elif kind == "response.reasoning_summary_part.added":
            item.setdefault("summary", []).append(copy.deepcopy(data.get("part") or {}))
        elif kind == "response.reasoning_summary_text.delta":
            self._fragment(index, "summary", data.get("summary_index", 0), "text", data.get("delta", ""))
        elif kind == "response.function_call_arguments.delta":
            self._fragment(index, "", 0, "arguments", data.get("delta", ""))
        elif kind == "response.custom_tool_call_input.delta":
            self._fragment(index, "", 0, "input", data.get("delta", ""))
        elif kind in ("response.function_call_arguments.done", "response.custom_tool_call_input.done"):
            field = "arguments" if "arguments" in kind else "input"
            self.parts[(index, "", 0, field)] = [data.get(field, "")]
        elif kind.endswith(".done") or kind.endswith(".added") or kind.endswith(".delta"):
            pass  # the matching output_item.done carries the authoritative item
        else:
            self._unknown(kind)

    def _fragment(self, index: int, container: str, sub: int, field: str, text: str) -> None:
        key = (index, container, sub, field)
        parts = self.parts.get(key)
        if parts is None:
            item = self.items[index]
            start = _part(item, container, sub).get(field, "") if container else item.get(field, "")
            parts = self.parts[key] = [start]
        parts.append(text)

    def _items(self) -> list[Json]:
        for (index, container, sub, field), parts in self.parts.items():
            item = self.items[index]
            target = _part(item, container, sub) if container else item
            target[field] = "".join(parts)
        self.parts.clear()
        return [self.items[i] for i in sorted(self.items)]

    def result(self) -> Json | None:
        built = self._items()
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
        response["output"] = self._items()
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
