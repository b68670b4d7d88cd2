"""Which protocol and call kind an inbound request is, from its method, path and body. Pure."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

# A path prefix before /v1 is kept by some clients (Claude Code keeps the base URL's path); /v1 itself is
# optional because Codex's base_url may or may not end in /v1.
_ENDPOINT = re.compile(
    r"^(?P<prefix>.*?)(?:/v1)?/(?P<endpoint>messages/count_tokens|messages|chat/completions|responses/compact|"
    r"responses|models)/?$"
)
_PROTOCOL = {
    "messages": "anthropic",
    "messages/count_tokens": "anthropic",
    "chat/completions": "openai_chat",
    "responses": "openai_responses",
    "responses/compact": "openai_responses",
}


@dataclass(frozen=True, slots=True)
class Route:
    protocol: str  # anthropic | openai_chat | openai_responses
    endpoint: str | None  # canonical path forwarded upstream, e.g. /v1/messages; None = not forwarded
    kind: str  # main | side | count_tokens | compaction | models | probe | unknown


def route(method: str, path: str, headers: dict[str, str]) -> Route:
    """Route by method and path alone; `refine_kind` adds what only the body can tell."""
    fallback = "anthropic" if _looks_anthropic(headers) else "openai_chat"
    if method == "HEAD":
        return Route(fallback, None, "probe")
    match = _ENDPOINT.match(path)
    if match is None:
        return Route(fallback, None, "unknown")
    endpoint = match["endpoint"]
    if endpoint == "models":
        return (
            Route(fallback, "/v1/models", "models") if method == "GET" else Route(fallback, None, "unknown")
        )
    if method != "POST":
        return Route(_PROTOCOL[endpoint], None, "unknown")
    kind = {"messages/count_tokens": "count_tokens", "responses/compact": "compaction"}.get(endpoint, "main")
    return Route(_PROTOCOL[endpoint], f"/v1/{endpoint}", kind)


def refine_kind(r: Route, body: Any) -> str:
    """Side calls and compaction triggers are visible only in the body."""
    if r.kind != "main" or not isinstance(body, dict):
        return r.kind
    if r.protocol == "anthropic":
        # Claude Code's title/summary calls: structured output, no tools.
        if not body.get("tools") and (body.get("output_config") or {}).get("format"):
            return "side"
    elif r.protocol == "openai_responses":
        for item in body.get("input") or []:
            if isinstance(item, dict) and "compaction" in str(item.get("type", "")):
                return "compaction"
    return "main"


def _looks_anthropic(headers: dict[str, str]) -> bool:
    lower = {k.lower() for k in headers}
    return "anthropic-version" in lower or "x-api-key" in lower
