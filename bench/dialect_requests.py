"""The requests ``bench/dialect_paths.py`` sends in each client dialect the gateway
serves, with and without tools, and the checks of what comes back: each reply parsed
as its dialect's client would (a whole JSON body, or its SSE / NDJSON stream merged)
into the text and the tool calls it carries, then compared with what the fast backend
was scripted to say (``reply_pieces(n)`` as text, or one call of the first tool with
``TOOL_CALL_ARGUMENTS``).

Dialects: ``openai`` (chat completions), ``responses``, ``anthropic``, ``ollama`` and
``gemini`` (``generateContent``, or ``streamGenerateContent?alt=sse`` when streamed).
"""

from __future__ import annotations

from typing import Any

import orjson

from fast_backend import DEFAULT_MODEL, TOOL_CALL_ARGUMENTS, reply_pieces

__all__ = ["DIALECTS", "TOOL_NAME", "CheckError", "check", "path", "request_body"]

DIALECTS = ("openai", "responses", "anthropic", "ollama", "gemini")
TOOL_NAME = "get_weather"
_PROMPT = "What is the weather in Paris?"
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


class CheckError(Exception):
    """A reply that is not what the backend was scripted to say."""


def path(dialect: str, stream: bool) -> str:
    if dialect == "gemini":
        verb = "streamGenerateContent?alt=sse" if stream else "generateContent"
        return f"/v1beta/models/{DEFAULT_MODEL}:{verb}"
    return {
        "openai": "/v1/chat/completions",
        "responses": "/v1/responses",
        "anthropic": "/v1/messages",
        "ollama": "/api/chat",
    }[dialect]


def request_body(dialect: str, stream: bool, tools: bool, pieces: int) -> bytes:
    """A one-turn request for ``pieces`` pieces of text, with three tools if ``tools``."""
    user = [{"role": "user", "content": _PROMPT}]
    body: dict[str, Any]
    if dialect == "openai":
        body = {"model": DEFAULT_MODEL, "messages": user, "stream": stream, "max_tokens": pieces}
        if stream:
            body["stream_options"] = {"include_usage": True}
        if tools:
            body["tools"] = [_function(t) for t in _TOOLS]
    elif dialect == "responses":
        body = {"model": DEFAULT_MODEL, "input": user, "stream": stream, "store": False}
        body["max_output_tokens"] = pieces
        if tools:
            body["tools"] = [
                {"type": "function", "name": n, "description": d, "parameters": p}
                for n, d, p in _TOOLS
            ]
    elif dialect == "anthropic":
        body = {"model": DEFAULT_MODEL, "messages": user, "stream": stream, "max_tokens": pieces}
        if tools:
            body["tools"] = [{"name": n, "description": d, "input_schema": p} for n, d, p in _TOOLS]
    elif dialect == "ollama":
        body = {"model": DEFAULT_MODEL, "messages": user, "stream": stream}
        body["options"] = {"num_predict": pieces}
        if tools:
            body["tools"] = [_function(t) for t in _TOOLS]
    else:
        body = {
            "contents": [{"role": "user", "parts": [{"text": _PROMPT}]}],
            "generationConfig": {"maxOutputTokens": pieces},
        }
        if tools:
            declarations = [{"name": n, "description": d, "parameters": p} for n, d, p in _TOOLS]
            body["tools"] = [{"functionDeclarations": declarations}]
    return orjson.dumps(body)


def _function(tool: tuple[str, str, dict[str, Any]]) -> dict[str, Any]:
    name, description, parameters = tool
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


Call = tuple[str, Any]


def check(dialect: str, stream: bool, tools: bool, pieces: int, raw: bytes) -> None:
    """Raise ``CheckError`` unless ``raw`` says exactly what the backend was scripted to."""
    try:
        text, calls = _PARSERS[(dialect, stream)](raw)
    except (orjson.JSONDecodeError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise CheckError(f"unparsable reply ({type(exc).__name__}: {exc}): {raw[:200]!r}") from exc
    if tools:
        if calls != [(TOOL_NAME, TOOL_CALL_ARGUMENTS)]:
            raise CheckError(f"expected one {TOOL_NAME} call, got {calls!r} (text {text[:80]!r})")
    elif calls or text != "".join(reply_pieces(pieces)):
        raise CheckError(f"unexpected text {text[:80]!r}... or calls {calls!r}")


def _sse(raw: bytes) -> list[Any]:
    """The JSON ``data:`` payloads of an SSE stream, in order (``[DONE]`` kept as None)."""
    events: list[Any] = []
    for block in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(
            line[5:].lstrip() for line in block.split(b"\n") if line.startswith(b"data:")
        )
        if data:
            events.append(None if data == b"[DONE]" else orjson.loads(data))
    return events


def _args(value: Any) -> Any:
    return orjson.loads(value) if isinstance(value, str) else value


def _openai_json(raw: bytes) -> tuple[str, list[Call]]:
    message = orjson.loads(raw)["choices"][0]["message"]
    calls = [
        (c["function"]["name"], _args(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    return message.get("content") or "", calls


def _openai_sse(raw: bytes) -> tuple[str, list[Call]]:
    events = _sse(raw)
    if not events or events[-1] is not None:
        raise CheckError("stream does not end with [DONE]")
    text: list[str] = []
    names: dict[int, str] = {}
    arguments: dict[int, list[str]] = {}
    for event in events[:-1]:
        for choice in event["choices"]:
            delta = choice["delta"]
            text.append(delta.get("content") or "")
            for call in delta.get("tool_calls") or []:
                function = call.get("function") or {}
                if function.get("name"):
                    names[call["index"]] = function["name"]
                arguments.setdefault(call["index"], []).append(function.get("arguments") or "")
    calls = [(names[i], _args("".join(arguments[i]))) for i in sorted(names)]
    return "".join(text), calls


def _responses_object(response: dict[str, Any]) -> tuple[str, list[Call]]:
    text: list[str] = []
    calls: list[Call] = []
    for item in response["output"]:
        if item["type"] == "message":
            text.extend(p.get("text", "") for p in item["content"])
        elif item["type"] == "function_call":
            calls.append((item["name"], _args(item["arguments"])))
    return "".join(text), calls


def _responses_sse(raw: bytes) -> tuple[str, list[Call]]:
    events = _sse(raw)
    if not events or events[-1]["type"] != "response.completed":
        raise CheckError("stream does not end with response.completed")
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    text, calls = _responses_object(events[-1]["response"])
    if deltas != text:
        raise CheckError("the text deltas differ from the completed response")
    return text, calls


def _anthropic_json(raw: bytes) -> tuple[str, list[Call]]:
    content = orjson.loads(raw)["content"]
    text = "".join(b["text"] for b in content if b["type"] == "text")
    return text, [(b["name"], b["input"]) for b in content if b["type"] == "tool_use"]


def _anthropic_sse(raw: bytes) -> tuple[str, list[Call]]:
    events = _sse(raw)
    if not events or events[-1]["type"] != "message_stop":
        raise CheckError("stream does not end with message_stop")
    text: list[str] = []
    names: dict[int, str] = {}
    partial: dict[int, list[str]] = {}
    for event in events:
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use":
            names[event["index"]] = event["content_block"]["name"]
        elif event["type"] == "content_block_delta":
            delta = event["delta"]
            if delta["type"] == "text_delta":
                text.append(delta["text"])
            elif delta["type"] == "input_json_delta":
                partial.setdefault(event["index"], []).append(delta["partial_json"])
    calls = [(names[i], _args("".join(partial.get(i, [])) or "{}")) for i in sorted(names)]
    return "".join(text), calls


def _ollama_message(message: dict[str, Any]) -> tuple[str, list[Call]]:
    calls = [
        (c["function"]["name"], _args(c["function"]["arguments"]))
        for c in message.get("tool_calls") or []
    ]
    return message.get("content") or "", calls


def _ollama_json(raw: bytes) -> tuple[str, list[Call]]:
    return _ollama_message(orjson.loads(raw)["message"])


def _ollama_ndjson(raw: bytes) -> tuple[str, list[Call]]:
    lines = [orjson.loads(line) for line in raw.splitlines() if line.strip()]
    if not lines or not lines[-1].get("done"):
        raise CheckError("stream does not end with a done line")
    text: list[str] = []
    calls: list[Call] = []
    for line in lines:
        piece, found = _ollama_message(line.get("message") or {})
        text.append(piece)
        calls.extend(found)
    return "".join(text), calls


def _gemini_response(response: dict[str, Any]) -> tuple[str, list[Call]]:
    text: list[str] = []
    calls: list[Call] = []
    for candidate in response.get("candidates") or []:
        for part in (candidate.get("content") or {}).get("parts") or []:
            if "text" in part:
                text.append(part["text"])
            if "functionCall" in part:
                calls.append((part["functionCall"]["name"], part["functionCall"].get("args")))
    return "".join(text), calls


def _gemini_json(raw: bytes) -> tuple[str, list[Call]]:
    return _gemini_response(orjson.loads(raw))


def _gemini_sse(raw: bytes) -> tuple[str, list[Call]]:
    text: list[str] = []
    calls: list[Call] = []
    events = _sse(raw)
    if not events:
        raise CheckError("empty stream")
    for event in events:
        piece, found = _gemini_response(event)
        text.append(piece)
        calls.extend(found)
    return "".join(text), calls


_PARSERS = {
    ("openai", False): _openai_json,
    ("openai", True): _openai_sse,
    ("responses", False): lambda raw: _responses_object(orjson.loads(raw)),
    ("responses", True): _responses_sse,
    ("anthropic", False): _anthropic_json,
    ("anthropic", True): _anthropic_sse,
    ("ollama", False): _ollama_json,
    ("ollama", True): _ollama_ndjson,
    ("gemini", False): _gemini_json,
    ("gemini", True): _gemini_sse,
}
