from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from harnessproxy.api import RunningProxy, start_proxy
from harnessproxy.proxy.record import read_journal
from harnessproxy.proxy.scripted import ScriptedUpstream
from harnessproxy.resources import GOLDENS

AGENT_KEY = "sk-agent-dummy-0000"
HOST_KEY = "sk-host-secret-1111"


@pytest.fixture
async def upstream() -> AsyncIterator[ScriptedUpstream]:
    up = ScriptedUpstream()
    await up.start()
    yield up
    await up.stop()


@pytest.fixture
async def proxy(upstream: ScriptedUpstream, tmp_path: Path) -> AsyncIterator[RunningProxy]:
    p = await start_proxy(
        upstream.url, rollout_id="rollout-test", journal_dir=tmp_path, upstream_key=HOST_KEY
    )
    yield p
    await p.stop()


def records(p: RunningProxy) -> list[dict[str, Any]]:
    return read_journal(p.journal.path)


def last(p: RunningProxy) -> dict[str, Any]:
    return records(p)[-1]


def golden_json(name: str) -> dict[str, Any]:
    return json.loads((GOLDENS / f"{name}.json").read_text())


def golden_bytes(name: str) -> bytes:
    return (GOLDENS / f"{name}.sse").read_bytes()


def strip_none(value: Any) -> Any:
    """SDK models and wire JSON differ only in how they spell 'absent'."""
    if isinstance(value, dict):
        return {k: strip_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_none(v) for v in value]
    return value


REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples" / "tasks"


@pytest.fixture(scope="session", autouse=True)
def agent_cache() -> Path:
    """Agent CLIs go to a cache in the checkout, so a clean clone (CI) really installs them from npm."""
    import os

    path = Path(os.environ.setdefault("HARNESSPROXY_AGENT_CACHE", str(REPO / ".agent-cache")))
    return path
