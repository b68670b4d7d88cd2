"""OpenAI Chat Completions: chunk reassembly into a `chat.completion` (tool_calls merged by index, vLLM token
ids and logprobs kept), errors, usage."""

from __future__ import annotations

import copy
import json
from typing import Any

from harnessproxy.proxy.codecs import Json, ReassemblerBase, loads, usage_record
from harnessproxy.proxy.sse import SSEEvent, encode_event

_ERROR_TYPES = {400: "invalid_request_error", 404: "not_found_error", 413: "invalid_request_error"}
# Streamed text fields that arrive as fragments and are concatenated.
_TEXT_FIELDS = frozenset({"content", "reasoning_content", "reasoning", "refusal"})


def openai_error_body(status: int, message: str) -> Json:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


class OpenAICodecBase:
    """Both OpenAI protocols authenticate and report errors the same way."""

    def auth_headers(self, key: str) -> dict[str, str]:
        return {"authorization": f"Bearer {key}"}

    def error_body(self, status: int, message: str) -> Json:
        return openai_error_body(status, message)


class ChatCodec(OpenAICodecBase):
    name = "openai_chat"

    def usage(self, response: Json | None) -> Json:
        u = (response or {}).get("usage") or {}
        cached = (u.get("prompt_tokens_details") or {}).get("cached_tokens")
        return usage_record(u.get("prompt_tokens"), u.get("completion_tokens"), cached, None)

    def stop_reason(self, response: Json | None) -> str | None:
        choices = (response or {}).get("choices") or []
        return choices[0].get("finish_reason") if choices else None

    def reassembler(self) -> ChatReassembler:
        return ChatReassembler()


class ChatReassembler(ReassemblerBase):
    """Fragments are collected in lists and joined once in result(): string += in a loop is quadratic."""

    def __init__(self) -> None:
        super().__init__()
        self.top: Json = {}
        self.choices: dict[int, Json] = {}
        self.text: dict[tuple[int, str], list[str]] = {}
        self.tool_calls: dict[int, dict[int, Json]] = {}
        self.usage: Json | None = None
        self.seen_chunk = False

    def feed(self, event: SSEEvent) -> None:
        data = event.data
        if event.comment is not None:
            return
        if data[:1] != "{" and data.strip() == "[DONE]":
            self.terminated = True
            return
        try:
            chunk = loads(data)
        except json.JSONDecodeError:
            self._unknown("<invalid json>")
            return
        if not isinstance(chunk, dict):
            self._unknown("<non-object>")
            return
        if chunk.get("error"):
            self.error = chunk["error"]
            return
        self.seen_chunk = True
        choices = chunk.pop("choices", None)
        usage = chunk.pop("usage", None)
        if usage is not None:
            self.usage = usage
        self.top.update(chunk)  # id, created, model, system_fingerprint, vLLM prompt_token_ids, ...
        for ch in choices or ():
            self._choice(ch)

    def _choice(self, ch: Json) -> None:
        index = ch.get("index", 0)
        slot = self.choices.get(index)
        if slot is None:
            slot = self.choices[index] = {
                "index": index,
                "message": {"role": "assistant", "content": None},
                "finish_reason": None,
                "logprobs": None,
            }
        for key, value in ch.items():
            if key == "delta":
                self._delta(index, slot["message"], value or {})
            elif key == "logprobs":
                if value:
                    logprobs = slot["logprobs"] = slot["logprobs"] or {}
                    for name, values in value.items():
                        if isinstance(values, list):
                            logprobs.setdefault(name, []).extend(values)
            elif key == "token_ids":  # vLLM return_token_ids: per-chunk delta ids, empty deltas included
                if value is not None:
                    slot.setdefault("token_ids", []).extend(value)
            elif key != "index" and (value is not None or key not in slot):
                slot[key] = (
                    value  # finish_reason and server extras (vLLM stop_reason); a later null never erases
                )

    def _delta(self, index: int, message: Json, delta: Json) -> None:
        for key, value in delta.items():
            if value is None:
                continue
            if key in _TEXT_FIELDS:
                parts = self.text.get((index, key))
                if parts is None:
                    parts = self.text[(index, key)] = []
                    message.setdefault(key, None)
                parts.append(value)
            elif key == "tool_calls":
                for tc in value:
                    self._tool_call(index, tc)
            elif key == "function_call":
                fc = message.setdefault("function_call", {"name": [], "arguments": []})
                fc["name"].append(value.get("name") or "")
                fc["arguments"].append(value.get("arguments") or "")
            elif key == "role":
                message["role"] = value
            else:
                message[key] = value

    def _tool_call(self, choice: int, tc: Json) -> None:
        calls = self.tool_calls.setdefault(choice, {})
        index = tc.get("index", len(calls))
        call = calls.get(index)
        if call is None:
            call = calls[index] = {"id": None, "type": "function", "function": {"name": [], "arguments": []}}
        if tc.get("id"):
            call["id"] = tc["id"]
        if tc.get("type"):
            call["type"] = tc["type"]
        fn = tc.get("function") or {}
        if fn.get("name"):
            call["function"]["name"].append(fn["name"])
        if fn.get("arguments"):
            call["function"]["arguments"].append(fn["arguments"])

    def result(self) -> Json | None:
        if not self.seen_chunk:
            return None
        if self.top.get("object", "chat.completion.chunk") != "chat.completion.chunk":
            self._unknown(str(self.top["object"]))
        out: dict[str, Any] = {"id": self.top.get("id"), "object": "chat.completion"}
        out.update({k: v for k, v in self.top.items() if k not in ("id", "object") and v is not None})
        choices = []
        for index in sorted(self.choices):
            slot = copy.deepcopy(self.choices[index])
            message = slot["message"]
            for (choice, field), parts in self.text.items():
                if choice == index:
                    message[field] = "".join(parts)
            if "function_call" in message:
                fc = message["function_call"]
                message["function_call"] = {
                    "name": "".join(fc["name"]),
                    "arguments": "".join(fc["arguments"]),
                }
            calls = self.tool_calls.get(index)
            if calls:
                message["tool_calls"] = [_joined_call(calls[i]) for i in sorted(calls)]
            choices.append(slot)
        out["choices"] = choices
        out["usage"] = self.usage
        return out

    def error_tail(self, message: str) -> bytes:
        # OpenAI SDKs raise on a chunk carrying `error`; no [DONE] follows, so nobody takes it for an end.
        return encode_event(json.dumps(openai_error_body(502, message)))


def _joined_call(call: Json) -> Json:
    fn = call["function"]
    return {**call, "function": {"name": "".join(fn["name"]), "arguments": "".join(fn["arguments"])}}


CODEC = ChatCodec()
