"""Gemini request bodies for the dialect tests: turns, parts and calls as dicts."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

from llmbridge.core.request_limits import RequestLimits
from llmbridge.dialects.gemini.request import decode_chat_request

FIXTURES = Path(__file__).parents[2] / "fixtures" / "gemini"
CAPTURED = FIXTURES / "request_gemini_cli_0_61_0_stream.json"
"""Gemini CLI 0.61.0's request as captured (shared/reference/captured/)."""
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-").decode()


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def body(*contents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"contents": list(contents) or [user({"text": "Hello"})], **fields}


def decode(payload: dict[str, Any], *, stream: bool = False) -> Any:
    return decode_chat_request(payload, model="gemini-2.5-flash", stream=stream)


def call(name: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args or {}, **extra}}


def result(name: str, response: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": response, **extra}}


TOOLS = [{"functionDeclarations": [{"name": n} for n in ("ls", "cat", "rm")]}]

SMALL = RequestLimits(max_messages=3, max_tools=2, max_parts_per_message=2)
