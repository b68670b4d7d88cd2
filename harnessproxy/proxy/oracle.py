"""The oracle upstream: a scripted model that solves a task by running its reference solution.

It validates tasks and the whole pipeline with a real harness and no model. Its first answer is a call of the
harness's own shell tool (found by the adapter's declared name in the request's `tools`) that runs the task's
`solution/solve.sh`; once the conversation holds a tool result it answers with a short final message. Side
calls (titles, memory, count_tokens, model lists) get plausible answers. It is an in-process `Upstream`, so
the proxy records its calls exactly like a hosted API's. The reply is built as a plain message first, then
encoded in the protocol's exact streaming (or JSON) form: `event:` lines for Anthropic, `[DONE]` for Chat,
`response.completed` for Responses."""

from __future__ import annotations

import itertools
import json
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from harnessproxy.proxy.codecs import get_codec
from harnessproxy.proxy.routes import route
from harnessproxy.shell import heredoc

FINAL_TEXT = "Done: I ran the task's reference solution."
_MARK = "HARNESSPROXY_ORACLE_EOF"


@dataclass(frozen=True)
class ShellTool:
    """How a harness exposes its shell: tool name, the argument holding the command, fixed extra arguments."""

    name: str
    argument: str = "command"
    extra: Mapping[str, Any] = field(default_factory=dict)
    finish: str | None = None  # a command the harness needs to end (mini-swe-agent's submit echo)


@dataclass
class Reply:
    text: str = ""
    tool: str | None = None
    arguments: dict[str, Any] = field(default_factory=dict)


def solution_command(script: str) -> str:
    """A shell command that runs `script` as a file (so its own stdin reads stay its own) from the cwd."""
    path = "/tmp/.oracle/solve.sh"
    return heredoc(f"mkdir -p /tmp/.oracle && cat > {path}", script, _MARK) + f"bash {path}"


def tool_names(protocol: str, tools: Any) -> list[str]:
    names = []
    for t in tools if isinstance(tools, list) else []:
        if not isinstance(t, dict):
            continue
        fn = t.get("function") if protocol == "openai_chat" else None
        name = (fn or t).get("name") if isinstance(fn or t, dict) else None
        if isinstance(name, str):
            names.append(name)
    return names


def _has_tool_result(protocol: str, body: dict[str, Any]) -> bool:
    if protocol == "openai_responses":
        items = body.get("input")
        return isinstance(items, list) and any(
            isinstance(i, dict) and str(i.get("type", "")).endswith("_call_output") for i in items
        )
    for m in body.get("messages") or []:
        if not isinstance(m, dict):
            continue
        if protocol == "openai_chat" and m.get("role") == "tool":
            return True
        content = m.get("content")
        if isinstance(content, list) and any(
            isinstance(b, dict) and b.get("type") == "tool_result" for b in content
        ):
            return True
    return False


def _sample(schema: Any) -> Any:
    """A small value that satisfies a JSON schema (for structured side calls like Claude Code's titles)."""
    if not isinstance(schema, dict):
        return "Run the task"
    kind = schema.get("type")
    if kind == "object":
        props = schema.get("properties") or {}
        return {k: _sample(v) for k, v in props.items() if k in (schema.get("required") or props)}
    if kind == "array":
        return []
    if kind in ("integer", "number"):
        return 0
    if kind == "boolean":
        return False
    if schema.get("enum"):
        return schema["enum"][0]
    return "Run the task"


def decide(protocol: str, body: dict[str, Any], solution: str, tool: ShellTool) -> tuple[Reply, str]:
    """What the oracle says to one call, and a one-line note of why (for `agents check` diagnostics)."""
    fmt = (body.get("output_config") or {}).get("format") if protocol == "anthropic" else None
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema":
        return Reply(text=json.dumps(_sample(fmt.get("schema")))), "side call: structured answer"
    names = tool_names(protocol, body.get("tools"))
    if _has_tool_result(protocol, body):
        if tool.finish and tool.name in names and tool.finish not in json.dumps(body):
            args = {**tool.extra, tool.argument: tool.finish}
            return Reply(tool=tool.name, arguments=args), f"called {tool.name} with the finish command"
        return Reply(text=FINAL_TEXT), "tool result seen: final answer"
    if tool.name not in names:
        shown = ", ".join(names[:12]) or "none"
        return Reply(text=FINAL_TEXT), f"no tool named {tool.name!r} offered (tools: {shown}): final answer"
    args = {**tool.extra, tool.argument: solution_command(solution)}
    return Reply(tool=tool.name, arguments=args), f"called {tool.name} with the solution"


# -- encoders: one reply, each protocol's exact wire form -------------------------------------------------
def _sse(event: str | None, data: Any) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    return f"{head}data: {payload}\n\n".encode()


def _anthropic(reply: Reply, model: str, stream: bool, usage: dict[str, int]) -> tuple[bytes, list[bytes]]:
    if reply.tool:
        block: dict[str, Any] = {
            "type": "tool_use",
            "id": f"toolu_{uuid.uuid4().hex[:24]}",
            "name": reply.tool,
        }
        stop = "tool_use"
    else:
        block, stop = {"type": "text", "text": reply.text}, "end_turn"
    msg = {
        "id": f"msg_{uuid.uuid4().hex[:24]}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [{**block, "input": reply.arguments} if reply.tool else block],
        "stop_reason": stop,
        "stop_sequence": None,
        "usage": {"input_tokens": usage["input"], "output_tokens": usage["output"]},
    }
    if not stream:
        return json.dumps(msg).encode(), []
    start = {**msg, "content": [], "stop_reason": None, "usage": {**msg["usage"], "output_tokens": 1}}
    if reply.tool:
        first, delta = (
            {**block, "input": {}},
            {"type": "input_json_delta", "partial_json": json.dumps(reply.arguments)},
        )
    else:
        first, delta = {"type": "text", "text": ""}, {"type": "text_delta", "text": reply.text}
    events = [
        _sse("message_start", {"type": "message_start", "message": start}),
        _sse("content_block_start", {"type": "content_block_start", "index": 0, "content_block": first}),
        _sse("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}),
        _sse("content_block_stop", {"type": "content_block_stop", "index": 0}),
        _sse(
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": stop, "stop_sequence": None},
                "usage": {"output_tokens": usage["output"]},
            },
        ),
        _sse("message_stop", {"type": "message_stop"}),
    ]
    return b"", events


def _chat(
    reply: Reply, model: str, stream: bool, usage: dict[str, int], body: dict[str, Any]
) -> tuple[bytes, list[bytes]]:
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    calls = (
        [
            {
                "id": f"call_{uuid.uuid4().hex[:24]}",
                "type": "function",
                "function": {"name": reply.tool, "arguments": json.dumps(reply.arguments)},
            }
        ]
        if reply.tool
        else None
    )
    finish = "tool_calls" if calls else "stop"
    u = {"prompt_tokens": usage["input"], "completion_tokens": usage["output"]}
    u["total_tokens"] = u["prompt_tokens"] + u["completion_tokens"]
    head = {"id": cid, "created": created, "model": model}
    if not stream:
        message: dict[str, Any] = {"role": "assistant", "content": None if calls else reply.text}
        if calls:
            message["tool_calls"] = calls
        choice = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        return json.dumps({**head, "object": "chat.completion", "choices": [choice], "usage": u}).encode(), []

    def chunk(delta: dict[str, Any], finish_reason: str | None, **extra: Any) -> bytes:
        choice = {"index": 0, "delta": delta, "finish_reason": finish_reason, "logprobs": None}
        return _sse(None, {**head, "object": "chat.completion.chunk", "choices": [choice], **extra})

    if calls:
        delta: dict[str, Any] = {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"index": 0, **calls[0]}],
        }
    else:
        delta = {"role": "assistant", "content": reply.text}
    events = [chunk(delta, None), chunk({}, finish)]
    if (body.get("stream_options") or {}).get("include_usage"):
        events.append(_sse(None, {**head, "object": "chat.completion.chunk", "choices": [], "usage": u}))
    events.append(_sse(None, "[DONE]"))
    return b"", events


def _responses(reply: Reply, model: str, stream: bool, usage: dict[str, int]) -> tuple[bytes, list[bytes]]:
    if reply.tool:
        item: dict[str, Any] = {
            "type": "function_call",
            "id": f"fc_{uuid.uuid4().hex[:24]}",
            "call_id": f"call_{uuid.uuid4().hex[:24]}",
            "name": reply.tool,
            "arguments": json.dumps(reply.arguments),
            "status": "completed",
        }
    else:
        item = {
            "type": "message",
            "id": f"msg_{uuid.uuid4().hex[:24]}",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": reply.text, "annotations": []}],
        }
    u = {"input_tokens": usage["input"], "output_tokens": usage["output"]}
    u["total_tokens"] = u["input_tokens"] + u["output_tokens"]
    response = {
        "id": f"resp_{uuid.uuid4().hex[:24]}",
        "object": "response",
        "created_at": int(time.time()),
        "model": model,
        "status": "completed",
        "output": [item],
        "usage": u,
    }
    if not stream:
        return json.dumps(response).encode(), []
    seq = itertools.count()

    def ev(kind: str, **data: Any) -> bytes:
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    pending = {**response, "status": "in_progress", "output": [], "usage": None}
    added = {**item, "status": "in_progress"}
    if reply.tool:
        added["arguments"] = ""
        middle = [
            ev(
                "response.function_call_arguments.delta",
                item_id=item["id"],
                output_index=0,
                delta=item["arguments"],
            ),
            ev(
                "response.function_call_arguments.done",
                item_id=item["id"],
                output_index=0,
                arguments=item["arguments"],
            ),
        ]
    else:
        added["content"] = []
        part = {"item_id": item["id"], "output_index": 0, "content_index": 0}
        middle = [
            ev(
                "response.content_part.added",
                **part,
                part={"type": "output_text", "text": "", "annotations": []},
            ),
            ev("response.output_text.delta", **part, delta=reply.text),
            ev("response.output_text.done", **part, text=reply.text),
            ev("response.content_part.done", **part, part=item["content"][0]),
        ]
    events = [
        ev("response.created", response=pending),
        ev("response.in_progress", response=pending),
        ev("response.output_item.added", output_index=0, item=added),
        *middle,
        ev("response.output_item.done", output_index=0, item=item),
        ev("response.completed", response=response),
    ]
    return b"", events


class _Answer:
    def __init__(self, status: int, content_type: str, body: bytes, events: list[bytes]) -> None:
        self.status = status
        self.headers = {"content-type": content_type}
        self._body = body
        self._events = events

    async def chunks(self) -> AsyncIterator[bytes]:
        for e in self._events or [self._body]:
            yield e

    async def read(self) -> bytes:
        return self._body or b"".join(self._events)

    def close(self) -> None:
        return None


class OracleUpstream:
    """One per rollout: it knows that rollout's task solution and the harness's shell tool."""

    def __init__(self, solution: str, tool: ShellTool, model: str = "oracle") -> None:
        self.solution = solution
        self.tool = tool
        self.model = model
        self.notes: list[str] = []  # one line per answered call: what the oracle did and why

    def url_for(self, endpoint: str, query: str) -> str:
        return "oracle:" + endpoint + (f"?{query}" if query else "")

    async def send(
        self, method: str, endpoint: str, query: str, headers: dict[str, str], body: bytes | None
    ) -> _Answer:
        r = route(method, endpoint, headers)
        codec = get_codec(r.protocol)
        if r.kind == "models":
            data = {"object": "list", "data": [{"id": self.model, "object": "model", "type": "model"}]}
            return _Answer(200, "application/json", json.dumps(data).encode(), [])
        try:
            req = json.loads(body or b"{}")
            if not isinstance(req, dict):
                raise ValueError("the body must be a JSON object")
        except ValueError as exc:
            err = codec.error_body(400, f"oracle: the request body is not JSON: {exc}")
            return _Answer(400, "application/json", json.dumps(err).encode(), [])
        size = max(1, len(body or b"") // 4)
        if r.kind == "count_tokens":
            return _Answer(200, "application/json", json.dumps({"input_tokens": size}).encode(), [])
        reply, note = decide(r.protocol, req, self.solution, self.tool)
        self.notes.append(f"{r.protocol} {r.kind}: {note}")
        model = req.get("model") if isinstance(req.get("model"), str) else self.model
        usage = {"input": size, "output": max(1, len(json.dumps(reply.arguments or reply.text)) // 4)}
        stream = req.get("stream") is True
        if r.protocol == "anthropic":
            raw, events = _anthropic(reply, model, stream, usage)
        elif r.protocol == "openai_chat":
            raw, events = _chat(reply, model, stream, usage, req)
        else:
            raw, events = _responses(reply, model, stream, usage)
        return _Answer(200, "text/event-stream" if stream else "application/json", raw, events)

    async def aclose(self) -> None:
        return None
