"""OpenAI Chat Completions: chunk reassembly into a `chat.completion` (tool_calls merged by index, vLLM token
ids and logprobs kept), errors, usage."""

from __future__ import annotations

import json
from typing import Any

from harnessproxy.proxy.codecs import Json, usage_record
from harnessproxy.proxy.sse import SSEEvent, encode_event

_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "invalid_request_error"}
# Streamed text fields that arrive as fragments and are concatenated.
_TEXT_FIELDS = ("content", "reasoning_content", "reasoning", "refusal")
_CHOICE_HANDLED = ("index", "delta", "finish_reason", "logprobs", "token_ids")
_TOP_LEVEL = (
    "id",
    "created",
    "model",
    "system_fingerprint",
    "service_tier",
    "prompt_token_ids",
    "kv_transfer_params",
)


def openai_error_body(status: int, message: str) -> Json:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class ChatCodec:
    name = "openai_chat"

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def error_body(self, status: int, message: str) -> Json:
        return openai_error_body(status, message)

    def usage(self, response: Json | None) -> Json:
        u = (response or {}).get("usage") or {}
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        return usage_record(u.get("prompt_tokens"), u.get("completion_tokens"), cached, None)

    def stop_reason(self, response: Json | None) -> str | None:
        choices = (response or {}).get("choices") or []
        return choices[0].get("finish_reason") if choices else None

    def reassembler(self) -> ChatReassembler:
        return ChatReassembler()


class ChatReassembler:
    def __init__(self) -> None:
        self.top: Json = {}
        self.choices: dict[int, Json] = {}
        self.tool_calls: dict[int, dict[int, Json]] = {}
        self.usage: Json | None = None
        self.unknown_event_types: list[str] = []
        self.error: Json | None = None
        self.terminated = False
        self.seen_chunk = False

    def feed(self, event: SSEEvent) -> None:
        if event.comment is not None:
            return
        if event.data.strip() == "[DONE]":
            self.terminated = True
            return
        try:
            chunk = json.loads(event.data)
        except json.JSONDecodeError:
            self._unknown("<invalid json>")
            return
        if not isinstance(chunk, dict):
            self._unknown("<non-object>")
            return
        if chunk.get("error"):
            self.error = chunk["error"]
            return
        if chunk.get("object") not in (None, "chat.completion.chunk"):
            self._unknown(str(chunk.get("object")))
        self.seen_chunk = True
        for key in _TOP_LEVEL:
            if chunk.get(key) is not None:
                self.top[key] = chunk[key]
        if chunk.get("usage") is not None:
            self.usage = chunk["usage"]
        for ch in chunk.get("choices") or []:
            self._choice(ch)

    def _unknown(self, kind: str) -> None:
        if kind not in self.unknown_event_types:
            self.unknown_event_types.append(kind)

    def _choice(self, ch: Json) -> None:
        index = ch.get("index", 0)
        slot = self.choices.setdefault(
            index,
            {
                "index": index,
                "message": {"role": "assistant", "content": None},
                "finish_reason": None,
                "logprobs": None,
            },
        )
        message = slot["message"]
        delta = ch.get("delta") or {}
        if delta.get("role"):
            message["role"] = delta["role"]
        for field in _TEXT_FIELDS:
            if delta.get(field) is not None:
                message[field] = (message.get(field) or "") + delta[field]
        for tc in delta.get("tool_calls") or []:
            self._tool_call(index, tc)
        if delta.get("function_call"):
            fc = message.setdefault("function_call", {"name": "", "arguments": ""})
            fc["name"] += delta["function_call"].get("name") or ""
            fc["arguments"] += delta["function_call"].get("arguments") or ""
        if ch.get("finish_reason") is not None:
            slot["finish_reason"] = ch["finish_reason"]
        if ch.get("logprobs"):
            logprobs = slot["logprobs"] or {}
            for key, values in ch["logprobs"].items():
                if isinstance(values, list):
                    logprobs.setdefault(key, []).extend(values)
            slot["logprobs"] = logprobs
        if (
            ch.get("token_ids") is not None
        ):  # vLLM return_token_ids: per-chunk delta ids, empty deltas included
            slot.setdefault("token_ids", []).extend(ch["token_ids"])
        for (
            key,
            value,
        ) in ch.items():  # server extras (vLLM stop_reason, ...): a later null never erases a value
            if key not in _CHOICE_HANDLED and (value is not None or key not in slot):
                slot[key] = value

    def _tool_call(self, choice: int, tc: Json) -> None:
        calls = self.tool_calls.setdefault(choice, {})
        index = tc.get("index", len(calls))
        call = calls.setdefault(
            index, {"id": None, "type": "function", "function": {"name": "", "arguments": ""}}
        )
        if tc.get("id"):
            call["id"] = tc["id"]
        if tc.get("type"):
            call["type"] = tc["type"]
        fn = tc.get("function") or {}
        call["function"]["name"] += fn.get("name") or ""
        call["function"]["arguments"] += fn.get("arguments") or ""

    def result(self) -> Json | None:
        if not self.seen_chunk:
            return None
        out: dict[str, Any] = {"id": self.top.get("id"), "object": "chat.completion"}
        out.update({k: v for k, v in self.top.items() if k != "id"})
        choices = []
        for index in sorted(self.choices):
            slot = self.choices[index]
            calls = self.tool_calls.get(index)
            if calls:
                slot["message"]["tool_calls"] = [calls[i] for i in sorted(calls)]
            choices.append(slot)
        out["choices"] = choices
        out["usage"] = self.usage
        return out

    def error_tail(self, message: str) -> bytes:
        # OpenAI SDKs raise on a chunk carrying `error`; no [DONE] follows, so nobody takes it for an end.
        return encode_event(json.dumps(openai_error_body(502, message)))


CODEC = ChatCodec()
