"""Pure codec tests: every golden stream, split at every byte boundary, reassembles to its hand-written
non-streaming twin."""

from __future__ import annotations

import json

import pytest

from harnessproxy.proxy.codecs import get_codec
from harnessproxy.proxy.routes import refine_kind, route
from harnessproxy.proxy.sse import SSEParser
from harnessproxy.resources import GOLDENS
from tests.conftest import golden_bytes, golden_json

# every golden stream that has a non-streaming twin (anthropic_malformed has none on purpose)
STREAMS = sorted(p.stem for p in GOLDENS.glob("*.sse") if p.with_suffix(".json").exists())
PROTOCOL = {"anthropic": "anthropic", "chat": "openai_chat", "responses": "openai_responses"}


def protocol_of(name: str) -> str:
    return PROTOCOL[name.split("_")[0]]


def reassemble(name: str, pieces: list[bytes]):
    parser, reasm = SSEParser(), get_codec(protocol_of(name)).reassembler()
    for piece in pieces:
        for event in parser.feed(piece):
            reasm.feed(event)
    for event in parser.flush():
        reasm.feed(event)
    return reasm


@pytest.mark.parametrize("name", STREAMS)
def test_golden_stream_reassembles_to_its_twin(name: str) -> None:
    raw = golden_bytes(name)
    reasm = reassemble(name, [raw])
    assert reasm.result() == golden_json(name)
    assert reasm.terminated
    assert reasm.error is None


@pytest.mark.parametrize(
    "name", ["anthropic_thinking_parallel", "chat_parallel_tools", "responses_custom_tool"]
)
def test_split_anywhere(name: str) -> None:
    raw = golden_bytes(name)
    expected = golden_json(name)
    for cut in range(1, len(raw)):
        assert reassemble(name, [raw[:cut], raw[cut:]]).result() == expected, f"split at byte {cut}"
    assert reassemble(name, [raw[i : i + 1] for i in range(len(raw))]).result() == expected


def test_crlf_line_endings_split_between_cr_and_lf() -> None:
    raw = golden_bytes("chat_tool_call").replace(b"\n", b"\r\n")
    for cut in range(1, len(raw)):
        assert reassemble("chat_tool_call", [raw[:cut], raw[cut:]]).result() == golden_json("chat_tool_call")


def test_unknown_event_kept_out_of_message_but_named() -> None:
    reasm = reassemble("anthropic_unknown_event", [golden_bytes("anthropic_unknown_event")])
    assert reasm.unknown_event_types == ["model_rationale_2027"]


def test_tool_input_without_deltas_is_empty_object_and_broken_json_is_kept() -> None:
    reasm = get_codec("anthropic").reassembler()
    parser = SSEParser()
    events = [
        {"type": "message_start", "message": {"id": "m", "content": [], "usage": {"input_tokens": 1}}},
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "tool_use", "id": "t", "name": "B", "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": '{"a": '},
        },
    ]
    for e in events:
        for ev in parser.feed(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode()):
            reasm.feed(ev)
    block = reasm.result()["content"][0]
    assert block["input"] == '{"a": '  # a cut stream keeps the fragment, never a fake {}
    assert block["_input_json_invalid"] is True


def test_usage_and_stop_reason_per_protocol() -> None:
    a, c, r = (get_codec(n) for n in ("anthropic", "openai_chat", "openai_responses"))
    assert a.usage(golden_json("anthropic_thinking_parallel")) == {
        "input_tokens": 2048,
        "output_tokens": 87,
        "cache_read_tokens": 1024,
        "cache_creation_tokens": 512,
    }
    assert a.stop_reason(golden_json("anthropic_thinking_parallel")) == "tool_use"
    assert c.usage(golden_json("chat_parallel_tools"))["cache_read_tokens"] == 32
    assert c.stop_reason(golden_json("chat_parallel_tools")) == "tool_calls"
    assert r.usage(golden_json("responses_custom_tool"))["cache_read_tokens"] == 512
    assert r.stop_reason({"status": "incomplete", "incomplete_details": {"reason": "max_output_tokens"}}) == (
        "max_output_tokens"
    )


def test_error_tails_are_parseable_protocol_errors() -> None:
    for name in ("anthropic", "openai_chat", "openai_responses"):
        reasm = get_codec(name).reassembler()
        events = SSEParser().feed(reasm.error_tail("boom"))
        assert len(events) == 1
        body = json.loads(events[0].data)
        assert "boom" in json.dumps(body)
        if name == "openai_chat":
            assert body["error"]["message"] == "boom"
        else:
            assert events[0].event == body["type"]


@pytest.mark.parametrize(
    ("method", "path", "headers", "expected"),
    [
        ("HEAD", "/", {}, ("openai_chat", None, "probe")),
        ("POST", "/v1/messages", {}, ("anthropic", "/v1/messages", "main")),
        ("POST", "/some/prefix/v1/messages", {}, ("anthropic", "/v1/messages", "main")),
        ("POST", "/v1/messages/count_tokens", {}, ("anthropic", "/v1/messages/count_tokens", "count_tokens")),
        ("POST", "/v1/chat/completions", {}, ("openai_chat", "/v1/chat/completions", "main")),
        ("POST", "/chat/completions", {}, ("openai_chat", "/v1/chat/completions", "main")),
        ("POST", "/v1/responses", {}, ("openai_responses", "/v1/responses", "main")),
        ("POST", "/v1/responses/compact", {}, ("openai_responses", "/v1/responses/compact", "compaction")),
        ("GET", "/v1/models", {"anthropic-version": "2023-06-01"}, ("anthropic", "/v1/models", "models")),
        ("GET", "/v1/responses", {}, ("openai_responses", None, "unknown")),  # Codex's websocket upgrade
        ("POST", "/v1/embeddings", {"x-api-key": "k"}, ("anthropic", None, "unknown")),
    ],
)
def test_routes(method: str, path: str, headers: dict[str, str], expected: tuple) -> None:
    r = route(method, path, headers)
    assert (r.protocol, r.endpoint, r.kind) == expected


def test_kinds_from_real_bodies() -> None:
    wire = GOLDENS.parent.parent / "tests" / "wire"
    title = json.loads((wire / "claude_title_sidecall.json").read_text())["body"]
    turn = json.loads((wire / "claude_turn1.json").read_text())["body"]
    r = route("POST", "/v1/messages", {})
    assert refine_kind(r, title) == "side"
    assert refine_kind(r, turn) == "main"
    resp = route("POST", "/v1/responses", {})
    assert refine_kind(resp, {"input": [{"type": "compaction_trigger"}]}) == "compaction"
    assert refine_kind(resp, {"input": [{"type": "message"}]}) == "main"


@pytest.mark.parametrize(
    ("data", "ready", "held"),
    [
        (b"data: 1\n\ndata: 2", b"data: 1\n\n", b"data: 2"),
        (b"data: 1\r\n\r\ndata: 2\r\n", b"data: 1\r\n\r\n", b"data: 2\r\n"),
        (b"abc", b"", b"abc"),
        (b"abc\r\n", b"", b"abc\r\n"),
        (b"event: a\ndata: 1\n\n", b"event: a\ndata: 1\n\n", b""),
    ],
)
def test_forwarding_splits_after_the_last_complete_event(data: bytes, ready: bytes, held: bytes) -> None:
    from harnessproxy.proxy.server import split_at_event_end

    assert split_at_event_end(data) == (ready, held)


@pytest.mark.parametrize(
    ("base", "endpoint", "query", "url"),
    [
        (
            "https://api.anthropic.com",
            "/v1/messages",
            "beta=true",
            "https://api.anthropic.com/v1/messages?beta=true",
        ),
        ("http://127.0.0.1:8000/v1", "/v1/chat/completions", "", "http://127.0.0.1:8000/v1/chat/completions"),
        ("http://gw/openai/v1/", "/v1/responses", "", "http://gw/openai/v1/responses"),
        ("http://gw/prefix", "/v1/models", "", "http://gw/prefix/v1/models"),
    ],
)
def test_upstream_url_joins_without_doubling_v1(base: str, endpoint: str, query: str, url: str) -> None:
    from harnessproxy.proxy.upstream import HttpUpstream

    assert HttpUpstream(base).url_for(endpoint, query) == url
