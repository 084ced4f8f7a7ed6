"""The client dialects ``bench/compare.py`` speaks: one request body and one reply check
per route, so every target of a dialect gets byte-identical requests and equally strict
checks.

- ``openai`` (``POST /v1/chat/completions``) and ``ollama`` (``POST /api/chat``): the
  bodies and checks of ``bench/overhead.py``, reused as they are.
- ``anthropic`` (``POST /v1/messages``, docs.claude.com/en/api/messages and
  /messages-streaming): written here. A whole reply must be a ``message`` whose text
  blocks join to the scripted reply with ``stop_reason: end_turn``; a stream must be
  ``message_start``, one text block (``content_block_start``, one
  ``content_block_delta`` per scripted piece, ``content_block_stop``), a
  ``message_delta`` with ``stop_reason: end_turn``, then ``message_stop`` and nothing
  after it. ``ping`` events may come anywhere.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from fast_backend import DEFAULT_MODEL
from replies import CheckError, check_reply, request_body

__all__ = ["ROUTES", "Route", "anthropic_body", "check_anthropic"]

_PROMPT = [{"role": "user", "content": "Say something short."}]


def anthropic_body(stream: bool, pieces: int) -> bytes:
    body: dict[str, Any] = {
        "model": DEFAULT_MODEL,
        "max_tokens": pieces,
        "messages": _PROMPT,
        "stream": stream,
    }
    return orjson.dumps(body)


def _anthropic_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name = b""
        data = []
        for line in block.split(b"\n"):
            if line.startswith(b"event:"):
                name = line[6:].strip()
            elif line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
        if not data:
            continue
        payload = orjson.loads(b"\n".join(data))
        if not isinstance(payload, dict) or payload.get("type") != name.decode():
            raise CheckError(f"event {name!r} carries data of another type: {block[:200]!r}")
        events.append((name.decode(), payload))
    return events


def _anthropic_stream(raw: bytes) -> list[str]:
    events = [(n, p) for n, p in _anthropic_events(raw) if n != "ping"]
    names = [name for name, _ in events]
    if "error" in names:
        raise CheckError(f"in-stream error: {raw[-300:]!r}")
    if names[:2] != ["message_start", "content_block_start"] or names[-1:] != ["message_stop"]:
        raise CheckError(f"not a whole message stream: {names[:2]} ... {names[-3:]}")
    if names.count("message_stop") != 1 or names[-3:-1] != ["content_block_stop", "message_delta"]:
        raise CheckError(
            f"the stream does not end content_block_stop, message_delta, stop: {names}"
        )
    stop = events[-2][1].get("delta", {}).get("stop_reason")
    if stop != "end_turn":
        raise CheckError(f"stop_reason {stop!r}, expected end_turn")
    pieces = []
    for name, payload in events[2:-3]:
        delta = payload.get("delta", {})
        if name != "content_block_delta" or delta.get("type") != "text_delta":
            raise CheckError(f"unexpected {name} inside the text block: {payload!r:.200}")
        pieces.append(str(delta["text"]))
    return pieces


def check_anthropic(stream: bool, raw: bytes, expected: tuple[str, ...]) -> int:
    """The number of text deltas received; raises ``CheckError`` if anything is off."""
    try:
        if not stream:
            body = orjson.loads(raw)
            if body.get("type") != "message" or body.get("stop_reason") != "end_turn":
                raise CheckError(f"not a finished message: {raw[:200]!r}")
            text = "".join(b["text"] for b in body["content"] if b.get("type") == "text")
            if text != "".join(expected):
                raise CheckError("the reply's content differs from the script")
            return 0
        pieces = _anthropic_stream(raw)
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise CheckError(f"malformed reply ({type(exc).__name__}: {exc})") from exc
    if tuple(pieces) != expected:
        raise CheckError(
            f"{len(pieces)} text deltas received, {len(expected)} expected, or other content"
        )
    return len(pieces)


@dataclass(frozen=True)
class Route:
    """A client dialect: where it posts, what it sends, how its replies are checked."""

    dialect: str
    path: str
    body: Callable[[bool, int], bytes]
    """``body(stream, pieces)``."""
    check: Callable[[bool, bytes, tuple[str, ...]], int]
    """``check(stream, raw, expected)``: content chunks received, or ``CheckError``."""


def _overhead_route(dialect: str, path: str) -> Route:
    return Route(
        dialect,
        path,
        lambda stream, pieces: request_body(dialect, stream, pieces),
        lambda stream, raw, expected: check_reply(dialect, stream, raw, expected),
    )


ROUTES = {
    "openai": _overhead_route("openai", "/v1/chat/completions"),
    "ollama": _overhead_route("ollama", "/api/chat"),
    "anthropic": Route("anthropic", "/v1/messages", anthropic_body, check_anthropic),
}
