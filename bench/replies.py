"""The requests ``bench/overhead.py`` (and ``bench/compare.py``) send, and the checks
of what comes back: every piece the backend was scripted to say received once and in
order, with the dialect's end markers (OpenAI SSE and ``[DONE]``, Ollama's ``done``
line, a Responses stream's ``response.completed`` as its last event), or a whole reply
with the same content. A check runs after the timing stops.

Dialects: ``openai`` (chat completions), ``ollama`` and ``responses`` (OpenAI Responses).
"""

from __future__ import annotations

from typing import Any

import orjson

from fast_backend import DEFAULT_MODEL

_PROMPT = [{"role": "user", "content": "Say something short."}]
_CHAT_PATHS = {
    "openai": "/v1/chat/completions",
    "ollama": "/api/chat",
    "responses": "/v1/responses",
}
DIALECTS = tuple(_CHAT_PATHS)
_RESPONSES_ENDS = frozenset(
    ("response.completed", "response.incomplete", "response.failed", "error")
)


def request_body(dialect: str, stream: bool, pieces: int) -> bytes:
    if dialect == "responses":
        # The same prompt as an input item list; max_output_tokens sets the length.
        # store: false, as Codex sends it: the figures measure translation, not the
        # agent store's write of each response (docs/RESPONSES.md, Stateful responses).
        responses = {"model": DEFAULT_MODEL, "input": _PROMPT, "stream": stream, "store": False}
        return orjson.dumps({**responses, "max_output_tokens": pieces})
    body: dict[str, Any] = {"model": DEFAULT_MODEL, "messages": _PROMPT, "stream": stream}
    if dialect == "openai":
        body["max_tokens"] = pieces
        if stream:
            body["stream_options"] = {"include_usage": True}
    else:
        body["options"] = {"num_predict": pieces}
    return orjson.dumps(body)


def chat_path(dialect: str) -> str:
    return _CHAT_PATHS[dialect]


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


def _responses_sse(raw: bytes) -> list[str]:
    """The text deltas of a Responses stream, checking its frame: every event named
    (``event:``) as its ``type``, ``sequence_number`` 0, 1, 2, ... with no gap,
    ``response.created`` first and ``response.completed`` last, and the completed
    response's text equal to the deltas joined."""
    pieces: list[str] = []
    completed: dict[str, Any] | None = None
    sequence = 0
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name = b""
        data_lines = []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data_lines.append(line[5:].lstrip(b" "))
            elif line.startswith(b"event:"):
                name = line[6:].strip()
        if not data_lines:
            continue
        if completed is not None:
            raise CheckError("an event after response.completed")
        event = orjson.loads(b"\n".join(data_lines))
        kind = event["type"]
        if kind.encode() != name:
            raise CheckError(f"event: {name!r} carries type {kind!r}")
        if event.get("sequence_number") != sequence:
            raise CheckError(f"sequence_number {event.get('sequence_number')}, {sequence} expected")
        if sequence == 0 and kind != "response.created":
            raise CheckError(f"the first event is {kind}, not response.created")
        sequence += 1
        if kind == "response.output_text.delta":
            pieces.append(event["delta"])
        elif kind in _RESPONSES_ENDS:
            if kind != "response.completed":
                raise CheckError(f"the stream ended with {kind}: {block[:200]!r}")
            completed = event["response"]
    if completed is None:
        raise CheckError("the stream ended without response.completed")
    if _response_text(completed) != "".join(pieces):
        raise CheckError("response.completed's text differs from the deltas")
    return pieces


def _response_text(response: dict[str, Any]) -> str:
    """The text of a completed Responses ``response`` object."""
    if response.get("object") != "response" or response.get("status") != "completed":
        raise CheckError(f"not a completed response: status {response.get('status')!r}")
    return "".join(
        part["text"]
        for item in response["output"]
        if item["type"] == "message"
        for part in item["content"]
        if part["type"] == "output_text"
    )


def _whole_reply(dialect: str, raw: bytes) -> str:
    body = orjson.loads(raw)
    if dialect == "responses":
        return _response_text(body)
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
        stream_pieces = {"openai": _openai_sse, "responses": _responses_sse}
        pieces = stream_pieces.get(dialect, _ollama_ndjson)(raw)
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise CheckError(f"malformed reply ({type(exc).__name__}: {exc})") from exc
    if len(pieces) != len(expected):
        raise CheckError(f"{len(pieces)} content chunks received, {len(expected)} expected")
    if tuple(pieces) != expected:
        raise CheckError("the chunks' content differs from the script")
    return len(pieces)
