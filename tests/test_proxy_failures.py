"""Every way a call can go wrong: the agent gets a protocol-shaped answer, the record says what happened,
and the proxy keeps serving."""

from __future__ import annotations

import asyncio
import gzip
import json
import socket

import aiohttp
import anthropic
import openai
import pytest

from harnessproxy.api import RunningProxy, start_proxy
from harnessproxy.proxy.scripted import ScriptedUpstream
from harnessproxy.proxy.sse import events_of
from harnessproxy.proxy.upstream import HttpUpstream
from tests.conftest import AGENT_KEY, golden_bytes, last, records

MSGS = [{"role": "user", "content": "hi"}]
ANTHROPIC_HEADERS = {"anthropic-version": "2023-06-01", "x-api-key": AGENT_KEY}


def closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


async def post(url: str, body: bytes | dict, headers: dict | None = None) -> tuple[int, bytes]:
    async with aiohttp.ClientSession() as http:
        kwargs = {"json": body} if isinstance(body, dict) else {"data": body}
        async with http.post(url, headers=headers or {}, **kwargs) as r:
            return r.status, await r.read()


async def still_serves(p: RunningProxy) -> None:
    status, body = await post(p.url + "/v1/chat/completions", {"model": "chat_text", "messages": MSGS})
    assert status == 200 and b"FINAL_ANSWER_OK" in body


@pytest.mark.parametrize("status", [400, 429, 500, 529])
async def test_upstream_status_passes_through_unchanged(proxy: RunningProxy, status: int) -> None:
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key=AGENT_KEY, max_retries=0)
    with pytest.raises(anthropic.APIStatusError) as info:
        await client.messages.create(model=f"x@status={status}", max_tokens=5, messages=MSGS)
    assert info.value.status_code == status
    assert info.value.body["error"]["message"] == f"scripted failure {status}"
    rec = last(proxy)
    assert rec["status"] == status and rec["error"]["kind"] == "upstream_status"
    assert rec["response"]["body"]["error"]["message"] == f"scripted failure {status}"
    await still_serves(proxy)


async def test_upstream_refused_gives_502_in_each_protocol_shape(tmp_path) -> None:
    p = await start_proxy(f"http://127.0.0.1:{closed_port()}", rollout_id="r", journal_dir=tmp_path)
    try:
        status, body = await post(p.url + "/v1/messages", {"model": "m", "messages": MSGS}, ANTHROPIC_HEADERS)
        assert status == 502
        err = json.loads(body)
        assert err["type"] == "error" and err["error"]["type"] == "api_error"
        assert "unreachable" in err["error"]["message"]
        status, body = await post(p.url + "/v1/chat/completions", {"model": "m", "messages": MSGS})
        assert status == 502 and "unreachable" in json.loads(body)["error"]["message"]
        assert [r["error"]["kind"] for r in records(p)] == ["upstream_unreachable"] * 2
        assert [r["status"] for r in records(p)] == [502, 502]
    finally:
        await p.stop()


async def test_upstream_reset_before_response_gives_502(proxy: RunningProxy) -> None:
    status, body = await post(
        proxy.url + "/v1/responses", {"model": "x@drop=1", "input": "go", "stream": True}
    )
    assert status == 502
    assert json.loads(body)["error"]["type"] == "server_error"
    assert last(proxy)["error"]["kind"] == "upstream_unreachable"
    await still_serves(proxy)


async def test_upstream_timeout_gives_504(upstream: ScriptedUpstream, tmp_path) -> None:
    up = HttpUpstream(upstream.url, read_timeout=0.3)
    p = await start_proxy(up, rollout_id="r", journal_dir=tmp_path)
    try:
        status, body = await post(p.url + "/v1/chat/completions", {"model": "x@hang=3", "messages": MSGS})
        assert status == 504
        assert json.loads(body)["error"]["type"] == "server_error"
        assert last(p)["error"]["kind"] == "upstream_timeout"
    finally:
        await p.stop()


async def test_anthropic_mid_stream_reset(proxy: RunningProxy) -> None:
    client = anthropic.AsyncAnthropic(base_url=proxy.url, api_key=AGENT_KEY, max_retries=0)
    seen: list[str] = []
    with pytest.raises(anthropic.APIError) as info:
        async with client.messages.stream(
            model="anthropic_tool_use@reset_after=4", max_tokens=5, messages=MSGS
        ) as s:
            async for event in s:
                seen.append(event.type)
    assert "mid-stream" in str(info.value)
    assert "message_start" in seen  # bytes flowed before the break
    rec = last(proxy)
    assert rec["incomplete"] is True and rec["error"]["kind"] == "upstream_reset"
    assert len(events_of(rec["response"]["raw_sse"])) == 4  # exactly what arrived
    assert rec["response"]["reassembled"]["content"][0]["text"] == "I'll run"
    await still_serves(proxy)


async def test_chat_mid_stream_reset_cut_inside_an_event(proxy: RunningProxy) -> None:
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key=AGENT_KEY, max_retries=0)
    with pytest.raises(openai.APIError) as info:
        stream = await client.chat.completions.create(
            model="chat_tool_call@chunk=300,reset_after=2", messages=MSGS, stream=True
        )
        async for _ in stream:
            pass
    assert "mid-stream" in str(info.value)
    rec = last(proxy)
    assert rec["incomplete"] is True and rec["error"]["kind"] == "upstream_reset"
    assert rec["response"]["terminated"] is False
    await still_serves(proxy)


async def test_responses_mid_stream_reset_ends_with_response_failed(proxy: RunningProxy) -> None:
    async with (
        aiohttp.ClientSession() as http,
        http.post(
            proxy.url + "/v1/responses",
            json={"model": "responses_custom_tool@reset_after=5", "input": "go", "stream": True},
        ) as r,
    ):
        text = (await r.read()).decode()
    last_event = [e for e in text.split("\n\n") if e.strip()][-1]
    assert last_event.startswith("event: response.failed")
    failed = json.loads(last_event.split("data: ", 1)[1])
    assert failed["sequence_number"] == 5 and failed["response"]["status"] == "failed"
    rec = last(proxy)
    assert rec["incomplete"] and rec["error"]["kind"] == "upstream_reset"
    assert rec["response"]["reassembled"]["output"][0]["type"] == "reasoning"


async def test_client_disconnect_mid_stream_cancels_upstream(
    proxy: RunningProxy, upstream: ScriptedUpstream
) -> None:
    async with aiohttp.ClientSession() as http:
        resp = await http.post(
            proxy.url + "/v1/messages",
            headers=ANTHROPIC_HEADERS,
            json={
                "model": "anthropic_tool_use@delay=0.05,repeat=200",
                "messages": MSGS,
                "stream": True,
                "max_tokens": 5,
            },
        )
        await resp.content.readany()  # got the first bytes, then hang up
        resp.close()
    for _ in range(100):
        await asyncio.sleep(0.05)
        if records(proxy) and upstream.abandoned_streams:
            break
    rec = last(proxy)
    assert rec["incomplete"] is True and rec["error"]["kind"] == "client_disconnected"
    assert 1 <= len(events_of(rec["response"]["raw_sse"])) < 200
    assert upstream.abandoned_streams == 1  # the upstream request was cancelled, not drained
    await still_serves(proxy)


async def test_invalid_json_gives_400(proxy: RunningProxy) -> None:
    status, body = await post(proxy.url + "/v1/messages", b'{"model": "m", "messages": [', ANTHROPIC_HEADERS)
    assert status == 400
    err = json.loads(body)
    assert err["error"]["type"] == "invalid_request_error" and "not valid JSON" in err["error"]["message"]
    rec = last(proxy)
    assert rec["error"]["kind"] == "invalid_json" and rec["request"]["body"] == '{"model": "m", "messages": ['
    await still_serves(proxy)


async def test_body_over_limit_gives_413(upstream: ScriptedUpstream, tmp_path) -> None:
    p = await start_proxy(upstream.url, rollout_id="r", journal_dir=tmp_path, max_body=1000)
    try:
        status, body = await post(
            p.url + "/v1/chat/completions", {"model": "m", "messages": MSGS, "pad": "x" * 5000}
        )
        assert status == 413 and "exceeds" in json.loads(body)["error"]["message"]
        assert last(p)["error"]["kind"] == "body_too_large"
        await still_serves(p)
    finally:
        await p.stop()


async def test_unknown_path_gives_404_in_protocol_shape(proxy: RunningProxy) -> None:
    status, body = await post(proxy.url + "/v1/embeddings", {"input": "x"})
    assert status == 404 and "error" in json.loads(body) and "type" not in json.loads(body)
    status, body = await post(proxy.url + "/v2/whatever", {"input": "x"}, ANTHROPIC_HEADERS)
    assert status == 404 and json.loads(body)["type"] == "error"
    assert [r["kind"] for r in records(proxy)] == ["unknown", "unknown"]


async def test_gzip_request_body_is_decoded_recorded_and_forwarded(
    proxy: RunningProxy, upstream: ScriptedUpstream
) -> None:
    raw = json.dumps({"model": "chat_text", "messages": MSGS}).encode()
    status, _ = await post(
        proxy.url + "/v1/chat/completions",
        gzip.compress(raw),
        {"content-encoding": "gzip", "content-type": "application/json"},
    )
    assert status == 200
    assert last(proxy)["request"]["body"] == raw.decode()
    assert upstream.requests[-1]["body"]["model"] == "chat_text"


async def test_garbage_gzip_is_a_clear_400(proxy: RunningProxy) -> None:
    status, body = await post(
        proxy.url + "/v1/chat/completions",
        b"not gzip at all",
        {"content-encoding": "gzip", "content-type": "application/json"},
    )
    assert status == 400
    assert json.loads(body)["error"]["message"].startswith("could not read the request body")


async def test_an_event_the_codec_chokes_on_never_breaks_the_stream(proxy: RunningProxy) -> None:
    async with aiohttp.ClientSession() as http:
        body = {"model": "anthropic_malformed", "messages": MSGS, "stream": True, "max_tokens": 5}
        async with http.post(proxy.url + "/v1/messages", json=body, headers=ANTHROPIC_HEADERS) as r:
            received = await r.read()
    assert received == golden_bytes("anthropic_malformed")  # the agent got every byte
    rec = last(proxy)
    assert rec["error"] is None and rec["incomplete"] is False
    assert rec["response"]["reassembly_errors"] == ["KeyError: 'index'"]
    assert rec["response"]["reassembled"]["content"] == [{"type": "text", "text": "still here"}]
    assert rec["stop_reason"] == "end_turn"


async def test_gzip_upstream_body_is_decoded_for_the_record_and_the_agent(proxy: RunningProxy) -> None:
    async with aiohttp.ClientSession(auto_decompress=False) as http:
        body = {"model": "chat_text@gzip=1", "messages": MSGS}
        async with http.post(proxy.url + "/v1/chat/completions", json=body) as r:
            assert "content-encoding" not in r.headers  # re-framed: no stale encoding or length
            data = await r.read()
    assert json.loads(data)["choices"][0]["message"]["content"] == "Done: the command ran. FINAL_ANSWER_OK"
    assert last(proxy)["response"]["body"]["usage"]["completion_tokens"] == 6


async def test_hop_by_hop_headers_dropped_protocol_headers_kept(
    proxy: RunningProxy, upstream: ScriptedUpstream
) -> None:
    headers = {
        **ANTHROPIC_HEADERS,
        "anthropic-beta": "interleaved-thinking-2025-05-14",
        "x-claude-code-session-id": "s-1",
        "connection": "keep-alive, x-hop",
        "x-hop": "must not travel",
        "keep-alive": "timeout=5",
        "te": "trailers",
        "proxy-authorization": "Basic c2VjcmV0",
    }
    status, _ = await post(proxy.url + "/v1/messages", {"model": "anthropic_text", "messages": MSGS}, headers)
    assert status == 200
    sent = {k.lower(): v for k, v in upstream.requests[-1]["headers"].items()}
    assert sent["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert sent["anthropic-version"] == "2023-06-01"
    assert sent["x-claude-code-session-id"] == "s-1"
    for gone in ("x-hop", "keep-alive", "te", "proxy-authorization"):
        assert gone not in sent
    recorded = {k.lower(): v for k, v in last(proxy)["request"]["headers"].items()}
    assert recorded["x-hop"] == "must not travel"  # the record shows what came in...
    assert recorded["proxy-authorization"] == "[redacted]"  # ...minus secrets


async def test_scripted_upstream_answers_bad_input_with_a_sentence(upstream: ScriptedUpstream) -> None:
    url = upstream.url + "/v1/chat/completions"
    for body, words in (
        (b"{not json", "scripted upstream:"),
        ({"model": "chat_text@status=abc", "messages": MSGS}, "invalid literal"),
        ({"model": "anthropic_malformed", "messages": MSGS}, "stream-only"),
    ):
        status, data = await post(url, body, {"content-type": "application/json"})
        assert status == 400 and words in json.loads(data)["error"]["message"]
