"""The demo on embedded defaults: the official SDKs talk to the proxy, which records every call on its way
to the bundled scripted upstream; then the calls are loaded into DuckDB and shown."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from harnessproxy.api import ConfigError, start_proxy
from harnessproxy.proxy.scripted import ScriptedUpstream
from harnessproxy.store import load_journals

DUMMY_AGENT_KEY = "sk-demo-agent-dummy-key"
HOST_KEY = "sk-demo-host-secret"


async def _drive(url: str) -> None:
    try:
        import anthropic
        import openai
    except ImportError as exc:
        raise ConfigError(
            "the demo drives the proxy with the official SDKs: pip install 'harnessproxy[dev]'"
        ) from exc
    claude = anthropic.AsyncAnthropic(base_url=url, api_key=DUMMY_AGENT_KEY, max_retries=0)
    oai = openai.AsyncOpenAI(base_url=url + "/v1", api_key=DUMMY_AGENT_KEY, max_retries=0)
    msgs: Any = [{"role": "user", "content": "make a.txt and b.txt"}]
    async with claude.messages.stream(
        model="anthropic_thinking_parallel", max_tokens=512, messages=msgs
    ) as s:
        await s.get_final_message()
    await claude.messages.create(model="anthropic_text", max_tokens=512, messages=msgs)
    await claude.messages.count_tokens(model="anthropic_text", messages=msgs)
    stream = await oai.chat.completions.create(
        model="chat_parallel_tools", messages=msgs, stream=True, stream_options={"include_usage": True}
    )
    async for _ in stream:
        pass
    async with oai.responses.stream(model="responses_custom_tool", input="add hello.txt") as rs:
        await rs.get_final_response()
    await claude.close()
    await oai.close()


async def run_demo_async(db: Path, journal_dir: Path) -> tuple[Path, int, bool]:
    upstream = ScriptedUpstream()
    await upstream.start()
    proxy = await start_proxy(upstream.url, journal_dir=journal_dir, upstream_key=HOST_KEY, rollout_id=None)
    try:
        await _drive(proxy.url)
    finally:
        await proxy.stop()
        await upstream.stop()
    keys = {r["headers"].get("x-api-key") or r["headers"].get("Authorization") for r in upstream.requests}
    key_swapped = all(k and HOST_KEY in k for k in keys)
    return proxy.journal.path, load_journals(db, [proxy.journal.path]), key_swapped


def run_demo(db: Path, journal_dir: Path) -> tuple[Path, int, bool]:
    return asyncio.run(run_demo_async(db, journal_dir))
