"""The oracle upstream behind the real proxy, read by the official SDKs: their stream accumulators are the
independent check that each protocol's wire form is exact."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from harnessproxy.api import RunningProxy, start_proxy
from harnessproxy.proxy.oracle import FINAL_TEXT, OracleUpstream, ShellTool, solution_command
from harnessproxy.proxy.record import read_journal

SOLUTION = "#!/bin/sh\necho hi > out.txt\n"
BASH_ANTHROPIC: Any = {"name": "Bash", "description": "run", "input_schema": {"type": "object"}}
BASH_CHAT: Any = {"type": "function", "function": {"name": "bash", "parameters": {"type": "object"}}}
EXEC_RESPONSES: Any = {"type": "function", "name": "exec_command", "parameters": {"type": "object"}}


async def _proxy(tmp_path: Path, tool: ShellTool) -> RunningProxy:
    return await start_proxy(OracleUpstream(SOLUTION, tool), rollout_id="oracle-test", journal_dir=tmp_path)


@pytest.fixture
async def claude_proxy(tmp_path: Path) -> AsyncIterator[RunningProxy]:
    p = await _proxy(tmp_path, ShellTool("Bash", "command", {"description": "run the solution"}))
    yield p
    await p.stop()


def test_solution_command_runs_the_script_verbatim(tmp_path: Path) -> None:
    import subprocess

    script = (
        "cat > a.txt <<'HARNESSPROXY_ORACLE_EOF'\nnested\nHARNESSPROXY_ORACLE_EOF\necho $((1 + 1)) > b.txt\n"
    )
    subprocess.run(["bash", "-c", solution_command(script)], cwd=tmp_path, check=True)
    assert (tmp_path / "a.txt").read_text() == "nested\n"
    assert (tmp_path / "b.txt").read_text() == "2\n"


async def test_anthropic_stream_tool_call_then_final(claude_proxy: RunningProxy) -> None:
    client = anthropic.AsyncAnthropic(base_url=claude_proxy.url, api_key="sk-dummy", max_retries=0)
    msgs: Any = [{"role": "user", "content": "solve it"}]
    async with client.messages.stream(model="m", max_tokens=100, messages=msgs, tools=[BASH_ANTHROPIC]) as s:
        first = await s.get_final_message()
    assert first.stop_reason == "tool_use"
    block = first.content[0]
    assert block.type == "tool_use" and block.name == "Bash"
    assert block.input == {"description": "run the solution", "command": solution_command(SOLUTION)}
    msgs += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "ok"}]},
    ]
    second = await client.messages.create(model="m", max_tokens=100, messages=msgs, tools=[BASH_ANTHROPIC])
    assert second.stop_reason == "end_turn" and second.content[0].text == FINAL_TEXT  # type: ignore[union-attr]
    count = await client.messages.count_tokens(model="m", messages=msgs)
    assert count.input_tokens > 0
    await client.close()
    calls = read_journal(claude_proxy.journal.path)
    assert [c["kind"] for c in calls] == ["main", "main", "count_tokens"]
    assert all(c["status"] == 200 and c["protocol"] == "anthropic" for c in calls)
    assert "event: message_start" in calls[0]["response"]["raw_sse"]  # Claude Code needs `event:` lines


async def test_anthropic_structured_side_call_gets_schema_shaped_json(claude_proxy: RunningProxy) -> None:
    client = anthropic.AsyncAnthropic(base_url=claude_proxy.url, api_key="sk-dummy", max_retries=0)
    schema = {"type": "object", "properties": {"title": {"type": "string"}}, "required": ["title"]}
    body: Any = {"output_config": {"format": {"type": "json_schema", "schema": schema}}}
    msg = await client.messages.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "title?"}], extra_body=body
    )
    assert set(json.loads(msg.content[0].text)) == {"title"}  # type: ignore[union-attr]
    await client.close()


async def test_missing_shell_tool_gets_a_final_answer(claude_proxy: RunningProxy) -> None:
    client = anthropic.AsyncAnthropic(base_url=claude_proxy.url, api_key="sk-dummy", max_retries=0)
    other = {**BASH_ANTHROPIC, "name": "Read"}
    msg = await client.messages.create(
        model="m", max_tokens=50, messages=[{"role": "user", "content": "x"}], tools=[other]
    )
    assert msg.stop_reason == "end_turn"
    await client.close()


async def test_chat_stream_tool_call_then_final(tmp_path: Path) -> None:
    proxy = await _proxy(tmp_path, ShellTool("bash"))
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-dummy", max_retries=0)
    msgs: Any = [{"role": "user", "content": "solve"}]
    async with client.chat.completions.stream(
        model="m", messages=msgs, tools=[BASH_CHAT], stream_options={"include_usage": True}
    ) as s:
        done = await s.get_final_completion()
    call = done.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert done.choices[0].finish_reason == "tool_calls" and call.function.name == "bash"  # type: ignore[union-attr]
    assert json.loads(call.function.arguments) == {"command": solution_command(SOLUTION)}  # type: ignore[union-attr]
    assert done.usage is not None and done.usage.total_tokens > 0
    msgs += [done.choices[0].message.model_dump(exclude_none=True)]
    msgs += [{"role": "tool", "tool_call_id": call.id, "content": "ok"}]
    final = await client.chat.completions.create(model="m", messages=msgs, tools=[BASH_CHAT])
    assert final.choices[0].message.content == FINAL_TEXT
    await client.close()
    await proxy.stop()
    assert [c["stop_reason"] for c in read_journal(proxy.journal.path)] == ["tool_calls", "stop"]


async def test_responses_stream_function_call_then_final(tmp_path: Path) -> None:
    proxy = await _proxy(tmp_path, ShellTool("exec_command", "cmd"))
    client = openai.AsyncOpenAI(base_url=proxy.url + "/v1", api_key="sk-dummy", max_retries=0)
    async with client.responses.stream(model="m", input="solve", tools=[EXEC_RESPONSES]) as s:
        first = await s.get_final_response()
    item = first.output[0]
    assert item.type == "function_call" and item.name == "exec_command"
    assert json.loads(item.arguments) == {"cmd": solution_command(SOLUTION)}
    follow: Any = [
        {"role": "user", "content": "solve"},
        {"type": "function_call", "call_id": item.call_id, "name": item.name, "arguments": item.arguments},
        {"type": "function_call_output", "call_id": item.call_id, "output": "ok"},
    ]
    async with client.responses.stream(model="m", input=follow, tools=[EXEC_RESPONSES]) as s:
        second = await s.get_final_response()
    assert second.output_text == FINAL_TEXT
    await client.close()
    await proxy.stop()
    calls = read_journal(proxy.journal.path)
    assert all(c["protocol"] == "openai_responses" and c["stop_reason"] == "completed" for c in calls)
