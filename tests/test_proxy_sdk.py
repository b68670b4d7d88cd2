"""The official anthropic and openai SDKs through the proxy, against golden transcripts replayed byte for
byte."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import anthropic
import openai
import pytest

from harnessproxy.api import RunningProxy, start_proxy
from harnessproxy.proxy.scripted import ScriptedUpstream
from harnessproxy.proxy.sse import events_of
from tests.conftest import AGENT_KEY, HOST_KEY, golden_bytes, golden_json, last, records, strip_none

WIRE = Path(__file__).parent / "wire"
MSGS = [{"role": "user", "content": "make a.txt and b.txt"}]
ANTHROPIC_STREAMS = ["anthropic_text", "anthropic_tool_use", "anthropic_thinking_parallel"]
CHAT_STREAMS = ["chat_text", "chat_tool_call", "chat_parallel_tools", "chat_vllm_tokens"]
RESPONSES_STREAMS = ["responses_text", "responses_function_call", "responses_custom_tool"]


def claude(p: RunningProxy) -> anthropic.AsyncAnthropic:
    return anthropic.AsyncAnthropic(base_url=p.url, api_key=AGENT_KEY, max_retries=0)


def oai(p: RunningProxy) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(base_url=p.url + "/v1", api_key=AGENT_KEY, max_retries=0)


@pytest.mark.parametrize("name", ANTHROPIC_STREAMS)
@pytest.mark.parametrize("chunk", [None, 7])
async def test_anthropic_stream(proxy: RunningProxy, name: str, chunk: int | None) -> None:
    model = name + (f"@chunk={chunk}" if chunk else "")
    async with claude(proxy).messages.stream(model=model, max_tokens=100, messages=MSGS) as s:
        final = await s.get_final_message()
    rec = last(proxy)
    assert (rec["protocol"], rec["kind"], rec["stream"], rec["status"]) == ("anthropic", "main", True, 200)
    reassembled = rec["response"]["reassembled"]
    assert reassembled == golden_json(name)  # equals the non-streaming response for the same content
    assert strip_none(final.model_dump(mode="json")) == strip_none(
        reassembled
    )  # and what the SDK built itself
    assert rec["usage"]["output_tokens"] == golden_json(name)["usage"]["output_tokens"]
    assert rec["stop_reason"] == golden_json(name)["stop_reason"]
    assert rec["error"] is None and rec["incomplete"] is False


@pytest.mark.parametrize("name", ANTHROPIC_STREAMS)
async def test_anthropic_non_stream(proxy: RunningProxy, name: str) -> None:
    msg = await claude(proxy).messages.create(model=name, max_tokens=100, messages=MSGS)
    rec = last(proxy)
    assert rec["stream"] is False
    assert rec["response"]["body"] == golden_json(name)
    assert strip_none(msg.model_dump(mode="json")) == strip_none(golden_json(name))


@pytest.mark.parametrize("name", CHAT_STREAMS)
@pytest.mark.parametrize("chunk", [None, 5])
async def test_chat_stream(proxy: RunningProxy, name: str, chunk: int | None) -> None:
    model = name + (f"@chunk={chunk}" if chunk else "")
    async with oai(proxy).chat.completions.stream(
        model=model, messages=MSGS, stream_options={"include_usage": True}
    ) as s:
        final = await s.get_final_completion()
    rec = last(proxy)
    assert (rec["protocol"], rec["stream"]) == ("openai_chat", True)
    reassembled = rec["response"]["reassembled"]
    assert reassembled == golden_json(name)
    sdk = final.model_dump(mode="json")
    msg = sdk["choices"][0]["message"]
    want = reassembled["choices"][0]["message"]
    assert msg["content"] == want["content"]

    def calls(tcs: list) -> list:
        return [(t["id"], t["function"]["name"], t["function"]["arguments"]) for t in tcs or []]

    assert calls(msg["tool_calls"]) == calls(want.get("tool_calls"))
    assert sdk["usage"] == reassembled["usage"] or strip_none(sdk["usage"]) == strip_none(
        reassembled["usage"]
    )


async def test_chat_non_stream_and_vllm_token_ids(proxy: RunningProxy) -> None:
    out = await oai(proxy).chat.completions.create(model="chat_vllm_tokens", messages=MSGS)
    assert out.choices[0].message.content == "Hello"
    rec = last(proxy)
    assert rec["response"]["body"] == golden_json("chat_vllm_tokens")
    assert rec["response"]["body"]["prompt_token_ids"] == [151644, 872, 198, 9707]


async def test_chat_stream_keeps_vllm_token_ids_and_logprobs(proxy: RunningProxy) -> None:
    stream = await oai(proxy).chat.completions.create(model="chat_vllm_tokens", messages=MSGS, stream=True)
    async for _ in stream:
        pass
    choice = last(proxy)["response"]["reassembled"]["choices"][0]
    assert choice["token_ids"] == [9707, 385, 151645]  # the empty-delta chunk's stop token id is kept
    assert [c["logprob"] for c in choice["logprobs"]["content"]] == [-0.25, -0.5, -0.01]


@pytest.mark.parametrize("name", RESPONSES_STREAMS)
@pytest.mark.parametrize("chunk", [None, 11])
async def test_responses_stream(proxy: RunningProxy, name: str, chunk: int | None) -> None:
    model = name + (f"@chunk={chunk}" if chunk else "")
    async with oai(proxy).responses.stream(model=model, input="go") as s:
        final = await s.get_final_response()
    rec = last(proxy)
    assert (rec["protocol"], rec["kind"], rec["stream"]) == ("openai_responses", "main", True)
    reassembled = rec["response"]["reassembled"]
    assert reassembled == golden_json(name)
    assert [strip_none(o) for o in final.model_dump(mode="json")["output"]] == [
        strip_none(o) for o in reassembled["output"]
    ]
    assert rec["stop_reason"] == "completed"


async def test_responses_non_stream(proxy: RunningProxy) -> None:
    out = await oai(proxy).responses.create(model="responses_function_call", input="go")
    assert out.output[0].type == "function_call"
    assert last(proxy)["response"]["body"] == golden_json("responses_function_call")


@pytest.mark.parametrize(
    ("name", "path", "body"),
    [
        ("anthropic_thinking_parallel", "/v1/messages?beta=true", {"stream": True}),
        ("anthropic_unknown_event", "/v1/messages", {"stream": True}),
        (
            "chat_parallel_tools",
            "/v1/chat/completions",
            {"stream": True, "stream_options": {"include_usage": True}},
        ),
        ("responses_custom_tool", "/v1/responses", {"stream": True}),
    ],
)
async def test_client_receives_exactly_the_upstream_bytes(
    proxy: RunningProxy, name: str, path: str, body: dict
) -> None:
    async with aiohttp.ClientSession() as http:
        body = {"model": name + "@chunk=13", "messages": MSGS, **body}
        async with http.post(proxy.url + path, json=body, headers={"x-api-key": AGENT_KEY}) as resp:
            received = await resp.read()
            assert resp.headers["content-type"].startswith("text/event-stream")
    assert received == golden_bytes(name)
    rec = last(proxy)
    assert rec["response"]["raw_sse"].encode() == golden_bytes(name)  # recorded byte for byte
    # every event recorded verbatim, unknown types included
    raw_events = [e for e in golden_bytes(name).decode().split("\n\n") if e.strip()]
    assert len(events_of(rec["response"]["raw_sse"])) == len(raw_events)
    if name == "anthropic_unknown_event":
        assert rec["response"]["unknown_event_types"] == ["model_rationale_2027"]
        kept = [e for e in events_of(rec["response"]["raw_sse"]) if e.get("event") == "model_rationale_2027"]
        assert json.loads(kept[0]["data"]) == {
            "type": "model_rationale_2027",
            "index": 0,
            "note": "future event",
        }


async def test_keys_dropped_and_host_key_added(proxy: RunningProxy, upstream: ScriptedUpstream) -> None:
    await claude(proxy).messages.create(model="anthropic_text", max_tokens=10, messages=MSGS)
    await oai(proxy).chat.completions.create(model="chat_text", messages=MSGS)
    a, o = upstream.requests[-2]["headers"], upstream.requests[-1]["headers"]
    assert a["x-api-key"] == HOST_KEY and "Authorization" not in a
    assert o["Authorization"] == f"Bearer {HOST_KEY}" and "x-api-key" not in o
    assert AGENT_KEY not in json.dumps(upstream.requests)
    for rec in records(proxy):  # the record never holds a key either
        assert HOST_KEY not in json.dumps(rec) and AGENT_KEY not in json.dumps(rec)


async def test_no_key_configured_sends_none(upstream: ScriptedUpstream, tmp_path) -> None:
    p = await start_proxy(upstream.url, rollout_id="r", journal_dir=tmp_path)
    try:
        await claude(p).messages.create(model="anthropic_text", max_tokens=10, messages=MSGS)
    finally:
        await p.stop()
    headers = {k.lower() for k in upstream.requests[-1]["headers"]}
    assert not headers & {"x-api-key", "authorization"}


async def test_request_recorded_verbatim_and_sent_unchanged(
    proxy: RunningProxy, upstream: ScriptedUpstream
) -> None:
    # Claude Code's real first turn: system array, 25 tools, ?beta=true.
    real = json.loads((WIRE / "claude_turn1.json").read_text())
    raw = json.dumps(real["body"], indent=2).encode()  # odd formatting on purpose: must survive untouched
    raw = raw.replace(b'"claude-opus-4-8"', b'"anthropic_tool_use"')
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            proxy.url + "/v1/messages?beta=true",
            data=raw,
            headers={
                "content-type": "application/json",
                "anthropic-version": "2023-06-01",
                "x-api-key": AGENT_KEY,
            },
        ) as resp,
    ):
        await resp.read()
    rec = last(proxy)
    assert rec["request"]["body"] == raw.decode()
    assert rec["path"] == "/v1/messages?beta=true"
    assert upstream.requests[-1]["path"] == "/v1/messages?beta=true"
    assert upstream.requests[-1]["body"] == json.loads(raw)
    assert rec["upstream_request"]["url"].endswith("/v1/messages?beta=true")


async def test_side_calls_probes_models_count_tokens(proxy: RunningProxy) -> None:
    title = json.loads((WIRE / "claude_title_sidecall.json").read_text())
    async with aiohttp.ClientSession() as http:
        async with http.head(proxy.url + "/") as r:
            assert r.status == 200
        async with http.head(proxy.url + "/prefix") as r:
            assert r.status == 200
        body = dict(title["body"], model="anthropic_text")
        async with http.post(proxy.url + "/prefix/v1/messages?beta=true", json=body) as r:
            assert r.status == 200
            await r.read()
        async with http.get(proxy.url + "/v1/models") as r:
            assert "anthropic_text" in json.dumps(await r.json())
    count = await claude(proxy).messages.count_tokens(model="anthropic_text", messages=MSGS)
    assert count.input_tokens > 0
    kinds = [(r["kind"], r["status"]) for r in records(proxy)]
    assert kinds == [("probe", 200), ("probe", 200), ("side", 200), ("models", 200), ("count_tokens", 200)]
    assert [r["seq"] for r in records(proxy)] == [1, 2, 3, 4, 5]
    assert {r["rollout_id"] for r in records(proxy)} == {"rollout-test"}


async def test_codex_compaction_call_kind(proxy: RunningProxy) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(proxy.url + "/v1/responses/compact", json={"model": "responses_text", "input": []}) as r,
    ):
        assert r.status == 200
    assert last(proxy)["kind"] == "compaction"


async def test_serves_on_an_already_made_socket(upstream: ScriptedUpstream, tmp_path: Path) -> None:
    # The sandbox backends make the listening socket themselves (inside the sandbox's network namespace).
    import socket

    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    port = sock.getsockname()[1]
    p = await start_proxy(upstream.url, rollout_id="from-socket", journal_dir=tmp_path, sock=sock)
    try:
        assert p.url == f"http://127.0.0.1:{port}"
        await claude(p).messages.create(model="anthropic_text", max_tokens=5, messages=MSGS)
    finally:
        await p.stop()
    assert [(r["rollout_id"], r["status"]) for r in records(p)] == [("from-socket", 200)]
