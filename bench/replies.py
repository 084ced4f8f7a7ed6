"""The requests ``bench/overhead.py`` (and ``bench/compare.py``) send, and the checks
of what comes back: every piece the backend was scripted to say received once and in
order, with the dialect's end markers (OpenAI SSE and ``[DONE]``, Ollama's ``done``
line), or a whole reply with the same content. A check runs after the timing stops.
"""

from __future__ import annotations

from typing import Any

import orjson

from fast_backend import DEFAULT_MODEL

_PROMPT = [{"role": "user", "content": "Say something short."}]


def request_body(dialect: str, stream: bool, pieces: int) -> bytes:
    body: dict[str, Any] = {"model": DEFAULT_MODEL, "messages": _PROMPT, "stream": stream}
    if dialect == "openai":
        body["max_tokens"] = pieces
        if stream:
            body["stream_options"] = {"include_usage": True}
    else:
        body["options"] = {"num_predict": pieces}
    return orjson.dumps(body)


def chat_path(dialect: str) -> str:
    return "/v1/chat/completions" if dialect == "openai" else "/api/chat"


class CheckError(Exception):
    """A response that is not what the backend was scripted to say."""


def _openai_sse(raw: bytes) -> list[str]:
    pieces: list[str] = []
    finish = None
    done = False
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(
            line[5:].lstrip(b" ") for line in block.split(b"\n") if line.startswith(b"data:")
        )
        if not data:
            continue
        if done:
            raise CheckError("an event after data: [DONE]")
        if data == b"[DONE]":
            done = True
            continue
        chunk = orjson.loads(data)
        if chunk.get("object") != "chat.completion.chunk" or "error" in chunk:
            raise CheckError(f"not a completion chunk: {data[:200]!r}")
        for choice in chunk["choices"]:
            content = choice.get("delta", {}).get("content")
            if content:
                pieces.append(content)
            finish = choice.get("finish_reason") or finish
    if not done or finish != "stop":
        raise CheckError(f"stream ended without finish_reason stop and [DONE] ({finish}, {done})")
    return pieces


def _ollama_ndjson(raw: bytes) -> list[str]:
    pieces: list[str] = []
    lines = [line for line in raw.split(b"\n") if line.strip()]
    for i, line in enumerate(lines):
        frame = orjson.loads(line)
        if "error" in frame:
            raise CheckError(f"in-stream error: {frame['error']!r:.200}")
        content = frame.get("message", {}).get("content")
        if content:
            pieces.append(content)
        if frame.get("done") is not (i == len(lines) - 1):
            raise CheckError("'done: true' is not on the last line, and only there")
    if not lines or lines[-1].find(b'"done_reason":"stop"') < 0:
        raise CheckError("the last line has no done_reason stop")
    return pieces


def _whole_reply(dialect: str, raw: bytes) -> str:
    body = orjson.loads(raw)
    if dialect == "openai":
        choice = body["choices"][0]
        if body.get("object") != "chat.completion" or choice.get("finish_reason") != "stop":
            raise CheckError(f"not a finished chat.completion: {raw[:200]!r}")
        return str(choice["message"]["content"])
    if body.get("done") is not True:
        raise CheckError(f"not a finished Ollama reply: {raw[:200]!r}")
    return str(body["message"]["content"])


def check_reply(dialect: str, stream: bool, raw: bytes, expected: tuple[str, ...]) -> int:
    """The number of content chunks received; raises ``CheckError`` if anything is off."""
    try:
        if not stream:
            if _whole_reply(dialect, raw) != "".join(expected):
                raise CheckError("the reply's content differs from the script")
            return 0
        pieces = _openai_sse(raw) if dialect == "openai" else _ollama_ndjson(raw)
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise CheckError(f"malformed reply ({type(exc).__name__}: {exc})") from exc
    if len(pieces) != len(expected):
        raise CheckError(f"{len(pieces)} content chunks received, {len(expected)} expected")
    if tuple(pieces) != expected:
        raise CheckError("the chunks' content differs from the script")
    return len(pieces)
