"""The requests the scenarios send, in each client dialect the gateway serves, and the
checks of what comes back, so every target of a dialect gets byte-identical requests and
equally strict checks.

Dialects: ``openai`` (chat completions), ``responses`` (OpenAI Responses), ``anthropic``
(Messages), ``ollama`` (``/api/chat``) and ``gemini`` (``generateContent``, or
``streamGenerateContent?alt=sse`` streamed).

``body``: one question asking for ``pieces`` pieces of text (``max_tokens`` and its
kin, which the stub backend takes as the reply's length). With ``tools``, three tools
are offered and the stub backend answers with one call of the first; with
``answered`` too (OpenAI, Anthropic, Ollama), the conversation already holds that call
and its result, and the reply is text again. Responses bodies say ``store: false``, as
Codex sends them: the figures measure translation, not the store's write.

``check``: a reply is read as its dialect's client reads it, framing checked as the
dialect defines it: OpenAI's ``chat.completion.chunk`` events then ``data: [DONE]`` and
nothing after it; Ollama's ``done: true`` on the last line only; a Responses stream's
events named as their ``type``, ``sequence_number`` 0, 1, 2, ... with no gap,
``response.created`` first, ``response.completed`` last and alone, its output equal to
the deltas; Anthropic's ``message_start``, whole content blocks (start, deltas of the
block's kind, stop), ``message_delta`` with the stop reason, ``message_stop`` last,
``ping`` anywhere; Gemini's candidates. Then the text must be the scripted pieces
(``reply_pieces``), each once and in order, with the dialect's normal stop; or, where a
call is expected, exactly one call of the first tool with ``TOOL_CALL_ARGUMENTS``. A
check runs after the timing stops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from fast_backend import DEFAULT_MODEL, TOOL_CALL_ARGUMENTS

DIALECTS = ("openai", "responses", "anthropic", "ollama", "gemini")
TOOL_NAME = "get_weather"
_ASK = "What is the weather in Paris?"
_RESULT = '{"temperature_c": 18, "sky": "clear"}'
_TOOLS: list[tuple[str, str, dict[str, Any]]] = [
    (
        TOOL_NAME,
        "The forecast for a city.",
        {
            "type": "object",
            "properties": {
                "city": {"type": "string"},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                "days": {"type": "integer"},
            },
            "required": ["city"],
        },
    ),
    (
        "get_time",
        "The local time in a city.",
        {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    ),
    (
        "search_web",
        "Search the web.",
        {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]},
    ),
]
_PATHS = {
    "openai": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "ollama": "/api/chat",
}
_STOPS = {
    "openai": ("stop", "tool_calls"),
    "responses": ("completed", "completed"),
    "anthropic": ("end_turn", "tool_use"),
    "ollama": ("stop", "stop"),  # Ollama says stop after a tool call too
    "gemini": ("STOP", "STOP"),
}
"""Each dialect's finish for a text reply and for a tool call."""
_RESPONSES_ENDS = frozenset(
    ("response.completed", "response.incomplete", "response.failed", "error")
)


class CheckError(Exception):
    """A reply that is not what the backend was scripted to say."""


def path(dialect: str, stream: bool = False) -> str:
    if dialect == "gemini":
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/v1beta/models/{DEFAULT_MODEL}:{verb}"
    return _PATHS[dialect]


def _function(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {"name": name, "description": description, "parameters": parameters}


def _history(dialect: str) -> list[dict[str, Any]]:
    """A call of the first tool and its result, in ``dialect``'s messages."""
    city = {"city": "Paris"}
    if dialect == "anthropic":
        use = {"type": "tool_use", "id": "toolu_1", "name": TOOL_NAME, "input": city}
        result = {"type": "tool_result", "tool_use_id": "toolu_1", "content": _RESULT}
        return [{"role": "assistant", "content": [use]}, {"role": "user", "content": [result]}]
    if dialect == "ollama":
        call = {"function": {"name": TOOL_NAME, "arguments": city}}
        return [
            {"role": "assistant", "content": "", "tool_calls": [call]},
            {"role": "tool", "content": _RESULT, "tool_name": TOOL_NAME},
        ]
    function = {"name": TOOL_NAME, "arguments": orjson.dumps(city).decode()}
    openai_call = {"id": "call_1", "type": "function", "function": function}
    return [
        {"role": "assistant", "content": None, "tool_calls": [openai_call]},
        {"role": "tool", "tool_call_id": "call_1", "content": _RESULT},
    ]


def body(
    dialect: str,
    stream: bool,
    pieces: int,
    *,
    tools: bool = False,
    answered: bool = False,
    model: str = DEFAULT_MODEL,
) -> bytes:
    """A request for ``pieces`` pieces of text (see the module docstring)."""
    user = {"role": "user", "content": _ASK}
    out: dict[str, Any]
    if dialect == "gemini":
        out = {
            "contents": [{"role": "user", "parts": [{"text": _ASK}]}],
            "generationConfig": {"maxOutputTokens": pieces},
        }
        if tools:
            out["tools"] = [{"functionDeclarations": [_function(*t) for t in _TOOLS]}]
        return orjson.dumps(out)
    if dialect == "responses":
        out = {"model": model, "input": [user], "stream": stream, "store": False}
        out["max_output_tokens"] = pieces
        if tools:
            out["tools"] = [{"type": "function", **_function(*t)} for t in _TOOLS]
        return orjson.dumps(out)
    messages = [user, *(_history(dialect) if answered else [])]
    out = {"model": model, "messages": messages, "stream": stream}
    if dialect == "ollama":
        out["options"] = {"num_predict": pieces}
    else:
        out["max_tokens"] = pieces
    if dialect == "openai" and stream:
        out["stream_options"] = {"include_usage": True}
    if tools and dialect == "anthropic":
        out["tools"] = [{"name": n, "description": d, "input_schema": p} for n, d, p in _TOOLS]
    elif tools:
        out["tools"] = [{"type": "function", "function": _function(*t)} for t in _TOOLS]
    return orjson.dumps(out)


# -- reading replies -------------------------------------------------------------------------


@dataclass
class Reply:
    """What a client makes of a reply: its text pieces, tool calls and finish."""

    pieces: list[str] = field(default_factory=list)
    calls: list[tuple[str, Any]] = field(default_factory=list)
    finish: str | None = None


def _sse(raw: bytes) -> list[tuple[str, bytes]]:
    """The events of an SSE stream: (its ``event:`` name or "", its data)."""
    events = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        name, data = "", []
        for line in block.split(b"\n"):
            if line.startswith(b"data:"):
                data.append(line[5:].lstrip(b" "))
            elif line.startswith(b"event:"):
                name = line[6:].strip().decode()
        if data:
            events.append((name, b"\n".join(data)))
    return events


def _args(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str) else value


def _openai(raw: bytes, stream: bool) -> Reply:
    if not stream:
        whole = orjson.loads(raw)
        choice = whole["choices"][0]
        if whole.get("object") != "chat.completion":
            raise CheckError(f"not a chat.completion: {raw[:200]!r}")
        message = choice["message"]
        calls = [
            (c["function"]["name"], _args(c["function"]["arguments"]))
            for c in message.get("tool_calls") or []
        ]
        return Reply([message.get("content") or ""], calls, choice.get("finish_reason"))
    events = _sse(raw)
    if not events or events[-1][1] != b"[DONE]":
        raise CheckError("the stream does not end with data: [DONE]")
    reply = Reply()
    streamed: dict[int, tuple[str, list[str]]] = {}
    for _, data in events[:-1]:  # a [DONE] before the end is no JSON: malformed
        chunk = orjson.loads(data)
        if chunk.get("object") != "chat.completion.chunk" or "error" in chunk:
            raise CheckError(f"not a completion chunk: {data[:200]!r}")
        for choice in chunk["choices"]:
            delta = choice.get("delta", {})
            if delta.get("content"):
                reply.pieces.append(delta["content"])
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                name, parts = streamed.setdefault(call["index"], ("", []))
                streamed[call["index"]] = (function.get("name") or name, parts)
                parts.append(function.get("arguments") or "")
            reply.finish = choice.get("finish_reason") or reply.finish
    reply.calls = [(name, _args("".join(parts))) for _, (name, parts) in sorted(streamed.items())]
    return reply


def _ollama_message(reply: Reply, message: dict[str, Any]) -> None:
    if message.get("content"):
        reply.pieces.append(message["content"])
    for call in message.get("tool_calls") or []:
        reply.calls.append((call["function"]["name"], _args(call["function"]["arguments"])))


def _ollama(raw: bytes, stream: bool) -> Reply:
    lines = [orjson.loads(line) for line in raw.split(b"\n") if line.strip()]
    reply = Reply()
    for i, frame in enumerate(lines):
        if "error" in frame:
            raise CheckError(f"in-stream error: {frame['error']!r:.200}")
        if frame.get("done") is not (i == len(lines) - 1):
            raise CheckError("'done: true' is not on the last line, and only there")
        _ollama_message(reply, frame.get("message") or {})
    reply.finish = lines[-1].get("done_reason") if lines else None
    return reply


def _response_object(response: dict[str, Any]) -> Reply:
    """A Responses ``response`` object's text, calls and status."""
    if response.get("object") != "response":
        raise CheckError(f"not a response object: {str(response)[:200]}")
    reply = Reply(finish=response.get("status"))
    for item in response["output"]:
        if item["type"] == "message":
            text = "".join(p["text"] for p in item["content"] if p["type"] == "output_text")
            reply.pieces.append(text)
        elif item["type"] == "function_call":
            reply.calls.append((item["name"], _args(item["arguments"])))
    return reply


def _responses(raw: bytes, stream: bool) -> Reply:
    if not stream:
        return _response_object(orjson.loads(raw))
    events, deltas = _sse(raw), []
    for sequence, (name, data) in enumerate(events):
        event = orjson.loads(data)
        kind = event["type"]
        if kind != name:
            raise CheckError(f"event: {name!r} carries type {kind!r}")
        if event.get("sequence_number") != sequence:
            raise CheckError(f"sequence_number {event.get('sequence_number')}, {sequence} expected")
        if sequence == 0 and kind != "response.created":
            raise CheckError(f"the first event is {kind}, not response.created")
        if kind in _RESPONSES_ENDS and sequence != len(events) - 1:
            raise CheckError(f"an event after {kind}")
        if kind == "response.output_text.delta":
            deltas.append(event["delta"])
    if not events or events[-1][0] != "response.completed":
        raise CheckError(f"the stream ended without response.completed: {raw[-200:]!r}")
    reply = _response_object(orjson.loads(events[-1][1])["response"])
    if "".join(reply.pieces) != "".join(deltas):
        raise CheckError("response.completed's text differs from the deltas")
    reply.pieces = deltas
    return reply


def _anthropic(raw: bytes, stream: bool) -> Reply:
    if not stream:
        whole = orjson.loads(raw)
        if whole.get("type") != "message":
            raise CheckError(f"not a message: {raw[:200]!r}")
        content = whole["content"]
        text = "".join(b["text"] for b in content if b["type"] == "text")
        calls = [(b["name"], b["input"]) for b in content if b["type"] == "tool_use"]
        return Reply([text], calls, whole.get("stop_reason"))
    events = []
    for name, data in _sse(raw):
        payload = orjson.loads(data)
        if not isinstance(payload, dict) or payload.get("type") != name:
            raise CheckError(f"event {name!r} carries data of another type: {data[:200]!r}")
        if name == "error":
            raise CheckError(f"in-stream error: {data[:300]!r}")
        if name != "ping":
            events.append((name, payload))
    names = [name for name, _ in events]
    if names[:1] != ["message_start"] or names[-2:] != ["message_delta", "message_stop"]:
        raise CheckError(f"not a whole message stream: {names[:2]} ... {names[-3:]}")
    if len(events) < 5:
        raise CheckError(f"no content block: {names}")
    return _anthropic_blocks(events[1:-2], Reply(finish=events[-2][1]["delta"].get("stop_reason")))


def _anthropic_blocks(events: list[tuple[str, dict[str, Any]]], reply: Reply) -> Reply:
    """Whole content blocks, one after another: start, deltas of the block's kind, stop."""
    block, partial = "", list[str]()
    for name, payload in events:
        if name == "content_block_start" and not block:
            block = payload["content_block"]["type"]
            if block == "tool_use":
                reply.calls.append((payload["content_block"]["name"], None))
                partial = []
        elif name == "content_block_delta" and block:
            delta = payload["delta"]
            if (block, delta["type"]) == ("text", "text_delta"):
                reply.pieces.append(delta["text"])
            elif (block, delta["type"]) == ("tool_use", "input_json_delta"):
                partial.append(delta["partial_json"])
            else:
                raise CheckError(f"a {delta['type']} in a {block} block")
        elif name == "content_block_stop" and block:
            if block == "tool_use":
                reply.calls[-1] = (reply.calls[-1][0], _args("".join(partial) or "{}"))
            block = ""
        else:
            raise CheckError(f"unexpected {name} in the message: {str(payload)[:200]}")
    if block:
        raise CheckError(f"the {block} block was not closed")
    return reply


def _gemini(raw: bytes, stream: bool) -> Reply:
    responses = [orjson.loads(data) for _, data in _sse(raw)] if stream else [orjson.loads(raw)]
    reply = Reply()
    for response in responses:
        for candidate in response.get("candidates") or []:
            for part in (candidate.get("content") or {}).get("parts") or []:
                if part.get("text"):
                    reply.pieces.append(part["text"])
                if "functionCall" in part:
                    call = part["functionCall"]
                    reply.calls.append((call["name"], call.get("args")))
            reply.finish = candidate.get("finishReason") or reply.finish
    return reply


_READERS: dict[str, Callable[[bytes, bool], Reply]] = {
    "openai": _openai,
    "responses": _responses,
    "anthropic": _anthropic,
    "ollama": _ollama,
    "gemini": _gemini,
}


def check(
    dialect: str, stream: bool, raw: bytes, expected: tuple[str, ...], call: bool = False
) -> int:
    """The number of content chunks received (0 for a whole reply or a call); raises
    ``CheckError`` unless ``raw`` says what the backend was scripted to: ``expected``,
    or with ``call`` one call of the first tool."""
    try:
        reply = _READERS[dialect](raw, stream)
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise CheckError(f"malformed reply ({type(exc).__name__}: {exc}): {raw[:200]!r}") from exc
    stop = _STOPS[dialect][call]
    if reply.finish != stop:
        raise CheckError(f"finish {reply.finish!r}, {stop!r} expected")
    text = "".join(reply.pieces)
    if call:
        if reply.calls != [(TOOL_NAME, TOOL_CALL_ARGUMENTS)] or text:
            raise CheckError(f"expected one {TOOL_NAME} call, got {reply.calls!r} ({text[:80]!r})")
        return 0
    if reply.calls:
        raise CheckError(f"a call where text was expected: {reply.calls!r}")
    if stream and len(reply.pieces) != len(expected):
        raise CheckError(f"{len(reply.pieces)} content chunks received, {len(expected)} expected")
    if (tuple(reply.pieces) if stream else text) != (expected if stream else "".join(expected)):
        raise CheckError("the reply's content differs from the script")
    return len(reply.pieces) if stream else 0
