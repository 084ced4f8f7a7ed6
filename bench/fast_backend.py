"""The stub backend every scenario measures the gateway against: a minimal, fast scripted
LLM server (``python bench/fast_backend.py --port N --chunks K``).

It owns nothing but speed and wire-correctness: a raw ASGI app under uvicorn (uvloop,
httptools) whose every response body is encoded once and replayed from a cache. It
speaks just enough of five APIs for the gateway's HTTP backends and the direct calls:

- OpenAI: ``POST /v1/chat/completions`` (JSON, or SSE chunks, a finish chunk, a usage
  chunk when asked, ``[DONE]``) and ``GET /v1/models``. A request offering ``tools``
  without a tool result in its history gets one call of the first tool instead;
- Ollama: ``POST /api/chat`` (NDJSON or one object), ``GET /api/tags``, ``/api/version``,
  ``POST /api/show`` and ``GET /api/ps``;
- OpenAI Responses: ``POST /v1/responses`` (a ``response`` object, or the event stream
  llmbridge's own encoder emits, each event its own write);
- Anthropic Messages: ``POST /v1/messages`` (a ``message``, or the event stream:
  ``message_start`` with the input usage, one text block's ``content_block_start``,
  ``text_delta`` events and ``content_block_stop``, ``message_delta`` with the stop
  reason and output usage, ``message_stop``; each event its own write, as Anthropic
  sends them). Its model list and health probe are ``GET /v1/models`` above;
- Gemini: ``POST /v1beta/models/{model}:generateContent`` (one ``GenerateContentResponse``)
  and ``:streamGenerateContent?alt=sse`` (one ``data:`` chunk a piece, CRLF-framed as
  Google sends them, the last with ``finishReason`` and ``usageMetadata``), the model
  list ``GET /v1beta/models`` (the backend's health probe) and ``GET
  /v1beta/models/{model}``.

Anthropic and Gemini replies are text, tools offered or not (no scenario offers them tools).
A reply has ``--chunks`` pieces unless the request asks for another count (``max_tokens``,
``options.num_predict``, ``max_output_tokens``, ``generationConfig.maxOutputTokens``);
piece ``i`` is ``reply_pieces(n)[i]``, which the load generator checks against.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import signal
import socket
import time
from collections.abc import Awaitable, Callable, MutableMapping
from functools import cache
from typing import Any

import orjson

__all__ = [
    "DEFAULT_MODEL",
    "PROMPT_TOKENS",
    "TOOL_CALL_ARGUMENTS",
    "TOOL_CALL_ID",
    "FastBackend",
    "main",
    "reply_pieces",
    "tool_call_fragments",
]

DEFAULT_MODEL = "bench-model"
PROMPT_TOKENS = 12
_MAX_CHUNKS = 100_000

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


TOOL_CALL_ID = "call_bench"
TOOL_CALL_ARGUMENTS = {"city": "Paris", "unit": "celsius", "days": 3}


@cache
def tool_call_fragments() -> tuple[str, ...]:
    """The tool call's JSON arguments cut into the few-character fragments a model's
    tokens make, so a streamed call has many argument deltas to merge."""
    text = orjson.dumps(TOOL_CALL_ARGUMENTS).decode()
    return tuple(text[i : i + 4] for i in range(0, len(text), 4))


@cache
def reply_pieces(n: int) -> tuple[str, ...]:
    """The ``n`` content pieces of a reply: distinct, so a lost or repeated one shows."""
    return tuple(f"tok{i} " for i in range(n))


def _body(data: bytes, more: bool) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": more}


def _start(content_type: bytes, length: int | None = None) -> Message:
    headers = [(b"content-type", content_type)]
    if length is None:
        headers.append((b"cache-control", b"no-cache"))
    else:
        headers.append((b"content-length", str(length).encode()))
    return {"type": "http.response.start", "status": 200, "headers": headers}


class _Reply:
    """One pre-encoded response: the start message and the body messages, in order."""

    __slots__ = ("bodies", "start")

    def __init__(
        self, content_type: bytes, parts: list[bytes], stream: bool, eof_apart: bool = True
    ) -> None:
        if stream:
            self.start = _start(content_type)
            if eof_apart:
                # As Starlette's StreamingResponse (vLLM, most Python servers) and Go's
                # net/http (Ollama) do: the chunked-encoding terminator is a write of its
                # own, after the last event, so it may reach the gateway separately.
                bodies = [_body(p, True) for p in parts]
                bodies.append(_body(b"", False))
            else:
                bodies = [_body(p, i < len(parts) - 1) for i, p in enumerate(parts)]
            self.bodies = tuple(bodies)
        else:
            data = b"".join(parts)
            self.start = _start(content_type, len(data))
            self.bodies = (_body(data, False),)

    async def send(self, send: Send, interval: float = 0.0) -> None:
        await send(self.start)
        for message in self.bodies:
            if interval and message.get("more_body"):
                await asyncio.sleep(interval)  # a paced stream (bench/soak.py)
            await send(message)


_JSON = b"application/json"
_SSE = b"text/event-stream"
_ANTHROPIC = "/v1/messages"
_CHAT_PATHS = frozenset(("/v1/chat/completions", "/api/chat", "/v1/responses", _ANTHROPIC))
_GEMINI_MODELS = "/v1beta/models"
_GEMINI = ":generateContent"
_GEMINI_STREAM = ":streamGenerateContent"
"""A Gemini chat's cache key: its method, whatever the model in its path."""


class FastBackend:
    """The ASGI app. Replies are built on first use per (kind, size) and then reused."""

    def __init__(
        self,
        default_chunks: int,
        model: str = DEFAULT_MODEL,
        eof_apart: bool = True,
        interval: float = 0.0,
    ) -> None:
        self.default_chunks = default_chunks
        self.interval = interval
        """Seconds between two streamed chunks (0: as fast as possible)."""
        self.eof_apart = eof_apart
        self.model = model
        self.created = int(time.time())
        self.created_at = time.strftime("%Y-%m-%dT%H:%M:%S.000000000Z", time.gmtime())
        self._cache: dict[tuple[str, int, bool, bool, str | None], _Reply] = {}
        model_entry = {"id": model, "object": "model", "created": self.created, "owned_by": "bench"}
        details = {
            "parent_model": "",
            "format": "gguf",
            "family": "bench",
            "families": ["bench"],
            "parameter_size": "1M",
            "quantization_level": "F16",
        }
        tag = {
            "name": model,
            "model": model,
            "modified_at": self.created_at,
            "size": 1,
            "digest": "0" * 64,
            "details": details,
        }
        gemini_model = {
            "name": f"models/{model}",
            "version": "001",
            "displayName": model,
            "inputTokenLimit": 8192,
            "outputTokenLimit": 8192,
            "supportedGenerationMethods": ["generateContent", "countTokens"],
        }
        show = {
            "modelfile": "",
            "parameters": "",
            "template": "{{ .Prompt }}",
            "details": details,
            "model_info": {"general.architecture": "bench", "bench.context_length": 8192},
            "capabilities": ["completion"],
        }
        self._static: dict[tuple[str, str], _Reply] = {
            ("GET", "/v1/models"): self._json({"object": "list", "data": [model_entry]}),
            ("GET", "/api/tags"): self._json({"models": [tag]}),
            ("GET", "/api/version"): self._json({"version": "0.12.0"}),
            ("GET", "/api/ps"): self._json({"models": []}),
            ("POST", "/api/show"): self._json(show),
            ("GET", "/"): _Reply(b"text/plain", [b"Ollama is running"], stream=False),
            ("GET", _GEMINI_MODELS): self._json({"models": [gemini_model]}),
            ("GET", f"{_GEMINI_MODELS}/{model}"): self._json(gemini_model),
        }
        self._not_found = _Reply(_JSON, [b'{"error":"not found"}'], stream=False)
        self._not_found.start["status"] = 404
        self._bad_request = _Reply(_JSON, [b'{"error":"body is not a JSON object"}'], stream=False)
        self._bad_request.start["status"] = 400

    @staticmethod
    def _json(obj: object) -> _Reply:
        return _Reply(_JSON, [orjson.dumps(obj)], stream=False)

    async def __call__(self, scope: Message, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        key = (scope["method"], scope["path"])
        chat = key[1] if key[1] in _CHAT_PATHS else _gemini_method(key[1])
        if key[0] == "POST" and chat is not None:
            body = await _read_body(receive)
            await self._chat(chat, body).send(send, self.interval)
            return
        await self._static.get(key, self._not_found).send(send)

    def _chat(self, path: str, body: bytes) -> _Reply:
        try:
            request = orjson.loads(body)
        except orjson.JSONDecodeError:
            return self._bad_request
        if not isinstance(request, dict):
            return self._bad_request
        tool = None
        stream = bool(request.get("stream", path == "/api/chat"))  # Ollama streams by default
        usage = bool((request.get("stream_options") or {}).get("include_usage"))
        if path == "/api/chat":
            limit = (request.get("options") or {}).get("num_predict")
        elif path == "/v1/responses":
            limit = request.get("max_output_tokens")
        elif path in (_GEMINI, _GEMINI_STREAM):
            stream = path == _GEMINI_STREAM  # the method says, not the body
            limit = (request.get("generationConfig") or {}).get("maxOutputTokens")
        elif path == _ANTHROPIC:
            limit = request.get("max_tokens")
        else:
            limit = request.get("max_completion_tokens") or request.get("max_tokens")
            # A model calls a tool when asked, and answers in text once the result is
            # in: a conversation whose last message is a tool result gets text.
            if not _ends_with_tool_result(request.get("messages")):
                tool = _first_tool_name(request.get("tools"))
        key = (path, _size(limit, self.default_chunks), stream, usage, tool)
        reply = self._cache.get(key)
        if reply is None:
            reply = self._cache[key] = self._build(*key)
        return reply

    def _build(self, path: str, n: int, stream: bool, usage: bool, tool: str | None) -> _Reply:
        pieces = reply_pieces(n)
        if path == "/api/chat" and stream:
            lines = [self._ollama_line(piece) for piece in pieces]
            lines.append(orjson.dumps(self._ollama_final(n, ""), option=orjson.OPT_APPEND_NEWLINE))
            return _Reply(b"application/x-ndjson", lines, stream=True, eof_apart=self.eof_apart)
        if path == "/api/chat":
            return _Reply(_JSON, [orjson.dumps(self._ollama_final(n, "".join(pieces)))], False)
        if path == "/v1/responses" and stream:
            events = self._responses_stream(pieces)
            return _Reply(_SSE, events, stream=True, eof_apart=self.eof_apart)
        if path == "/v1/responses":
            response = self._responses_object(pieces, "completed")
            return _Reply(_JSON, [orjson.dumps(response)], stream=False)
        if path == _ANTHROPIC:
            return self._anthropic(pieces, stream)
        if path in (_GEMINI, _GEMINI_STREAM):
            return self._gemini(pieces, stream)
        return self._openai(pieces, stream, usage, tool)

    def _openai(
        self, pieces: tuple[str, ...], stream: bool, usage: bool, tool: str | None
    ) -> _Reply:
        """A chat completion saying ``pieces``, or calling ``tool`` with the fragments
        of ``TOOL_CALL_ARGUMENTS``: one JSON body, or SSE chunks, a finish chunk, a
        usage chunk when asked, ``[DONE]``."""
        head = {"id": "chatcmpl-bench", "created": self.created, "model": self.model}
        fragments = tool_call_fragments() if tool else pieces
        count = {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": len(fragments)}
        count["total_tokens"] = len(fragments) + PROMPT_TOKENS
        call = {"id": TOOL_CALL_ID, "type": "function"}
        finish = "tool_calls" if tool else "stop"
        if not stream:
            message: dict[str, Any] = {"role": "assistant", "content": "".join(pieces)}
            if tool:
                whole = {**call, "function": {"name": tool, "arguments": "".join(fragments)}}
                message = {"role": "assistant", "content": None, "tool_calls": [whole]}
            choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": finish}
            completion = {**head, "object": "chat.completion", "choices": [choice], "usage": count}
            return _Reply(_JSON, [orjson.dumps(completion)], stream=False)

        def event(choices: list[dict[str, Any]], **extra: Any) -> bytes:
            chunk = {**head, "object": "chat.completion.chunk", "choices": choices, **extra}
            return b"data: " + orjson.dumps(chunk) + b"\n\n"

        if tool:
            first = {**call, "index": 0, "function": {"name": tool, "arguments": ""}}
            deltas = [{"role": "assistant", "content": None, "tool_calls": [first]}]
            deltas += [
                {"tool_calls": [{"index": 0, "function": {"arguments": f}}]} for f in fragments
            ]
        else:
            deltas = [{"role": "assistant", "content": pieces[0]}] if pieces else []
            deltas += [{"content": piece} for piece in pieces[1:]]
        out = [event([{"index": 0, "delta": d, "finish_reason": None}]) for d in deltas]
        out.append(event([{"index": 0, "delta": {}, "finish_reason": finish}]))
        if usage:
            out.append(event([], usage=count))
        out.append(b"data: [DONE]\n\n")
        return _Reply(_SSE, out, stream=True, eof_apart=self.eof_apart)

    def _responses_object(self, pieces: tuple[str, ...] | None, status: str) -> dict[str, Any]:
        """A Responses ``response`` object: finished with ``pieces`` as its one message,
        or (``pieces`` None) as it stands before any output."""
        output = [] if pieces is None else [self._responses_message(pieces, "completed")]
        usage = None
        if pieces is not None:
            usage = {
                "input_tokens": PROMPT_TOKENS,
                "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0},
                "output_tokens": len(pieces),
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": PROMPT_TOKENS + len(pieces),
            }
        return {
            "id": _RESPONSE_ID,
            "object": "response",
            "created_at": self.created,
            "status": status,
            "background": False,
            "error": None,
            "incomplete_details": None,
            "instructions": None,
            "max_output_tokens": None,
            "metadata": {},
            "model": self.model,
            "output": output,
            "parallel_tool_calls": True,
            "previous_response_id": None,
            "reasoning": {"effort": None, "summary": None},
            "store": False,
            "temperature": None,
            "text": {"format": {"type": "text"}},
            "tool_choice": "auto",
            "tools": [],
            "top_p": None,
            "truncation": "disabled",
            "usage": usage,
            "user": None,
        }

    @staticmethod
    def _responses_message(pieces: tuple[str, ...], status: str) -> dict[str, Any]:
        content = [_output_text("".join(pieces))] if status == "completed" else []
        return {
            "id": _MESSAGE_ID,
            "type": "message",
            "status": status,
            "role": "assistant",
            "content": content,
        }

    def _responses_stream(self, pieces: tuple[str, ...]) -> list[bytes]:
        """The events of a streamed Responses reply, one write each (as OpenAI sends
        them), in the grammar of llmbridge's encoder for one text part."""
        events: list[bytes] = []

        def event(kind: str, **payload: Any) -> None:
            data = {"type": kind, "sequence_number": len(events), **payload}
            events.append(b"event: " + kind.encode() + b"\ndata: " + orjson.dumps(data) + b"\n\n")

        ids = {"item_id": _MESSAGE_ID, "output_index": 0, "content_index": 0}
        started = self._responses_object(None, "in_progress")
        event("response.created", response=started)
        event("response.in_progress", response=started)
        item = self._responses_message(pieces, "in_progress")
        event("response.output_item.added", output_index=0, item=item)
        event("response.content_part.added", **ids, part=_output_text(""))
        for piece in pieces:
            event("response.output_text.delta", **ids, delta=piece, logprobs=[])
        text = "".join(pieces)
        event("response.output_text.done", **ids, text=text, logprobs=[])
        event("response.content_part.done", **ids, part=_output_text(text))
        item = self._responses_message(pieces, "completed")
        event("response.output_item.done", output_index=0, item=item)
        event("response.completed", response=self._responses_object(pieces, "completed"))
        return events

    def _anthropic(self, pieces: tuple[str, ...], stream: bool) -> _Reply:
        """A Messages reply saying ``pieces``: one ``message``, or its event stream."""
        usage = {
            "input_tokens": PROMPT_TOKENS,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": len(pieces),
        }
        message: dict[str, Any] = {
            "id": _MESSAGE_ID,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": [{"type": "text", "text": "".join(pieces)}],
            "stop_reason": "end_turn",
            "stop_sequence": None,
            "usage": usage,
        }
        if not stream:
            return _Reply(_JSON, [orjson.dumps(message)], stream=False)

        def event(kind: str, **payload: Any) -> bytes:
            data = orjson.dumps({"type": kind, **payload})
            return b"event: " + kind.encode() + b"\ndata: " + data + b"\n\n"

        started = {**message, "content": [], "stop_reason": None, "usage": {**usage}}
        started["usage"]["output_tokens"] = 1  # as Anthropic's message_start says
        block = {"type": "text", "text": ""}
        events = [event("message_start", message=started)]
        events.append(event("content_block_start", index=0, content_block=block))
        events += [
            event("content_block_delta", index=0, delta={"type": "text_delta", "text": piece})
            for piece in pieces
        ]
        events.append(event("content_block_stop", index=0))
        stop = {"stop_reason": "end_turn", "stop_sequence": None}
        events.append(event("message_delta", delta=stop, usage={"output_tokens": len(pieces)}))
        events.append(event("message_stop"))
        return _Reply(_SSE, events, stream=True, eof_apart=self.eof_apart)

    def _gemini(self, pieces: tuple[str, ...], stream: bool) -> _Reply:
        """A Gemini reply saying ``pieces``: one ``GenerateContentResponse``, or one
        ``data:`` chunk a piece, the last with the finish and the usage."""
        usage = {
            "promptTokenCount": PROMPT_TOKENS,
            "candidatesTokenCount": len(pieces),
            "totalTokenCount": PROMPT_TOKENS + len(pieces),
        }

        def response(text: str, last: bool) -> dict[str, Any]:
            candidate: dict[str, Any] = {
                "content": {"parts": [{"text": text}], "role": "model"},
                "index": 0,
            }
            out: dict[str, Any] = {"candidates": [candidate]}
            if last:
                candidate["finishReason"] = "STOP"
                out["usageMetadata"] = usage
            return out | {"modelVersion": self.model, "responseId": _RESPONSE_ID}

        if not stream:
            return _Reply(_JSON, [orjson.dumps(response("".join(pieces), True))], stream=False)
        chunks = [
            b"data: " + orjson.dumps(response(piece, i == len(pieces) - 1)) + b"\r\n\r\n"
            for i, piece in enumerate(pieces)
        ]
        return _Reply(_SSE, chunks, stream=True, eof_apart=self.eof_apart)

    def _ollama_line(self, piece: str) -> bytes:
        frame = {
            "model": self.model,
            "created_at": self.created_at,
            "message": {"role": "assistant", "content": piece},
            "done": False,
        }
        return orjson.dumps(frame, option=orjson.OPT_APPEND_NEWLINE)

    def _ollama_final(self, n: int, content: str) -> dict[str, Any]:
        return {
            "model": self.model,
            "created_at": self.created_at,
            "message": {"role": "assistant", "content": content},
            "done_reason": "stop",
            "done": True,
            "total_duration": 1_000_000 + n * 1_000,
            "load_duration": 1_000,
            "prompt_eval_count": PROMPT_TOKENS,
            "prompt_eval_duration": 100_000,
            "eval_count": n,
            "eval_duration": n * 1_000,
        }


_RESPONSE_ID = "resp_bench"
_MESSAGE_ID = "msg_bench"


def _output_text(text: str) -> dict[str, Any]:
    return {"type": "output_text", "text": text, "annotations": [], "logprobs": []}


def _gemini_method(path: str) -> str | None:
    """``_GEMINI`` or ``_GEMINI_STREAM`` for a Gemini chat's path
    (``/v1beta/models/{model}:{method}``), else None."""
    if not path.startswith(_GEMINI_MODELS + "/"):
        return None
    method = path[path.rfind(":") :]
    return method if method in (_GEMINI, _GEMINI_STREAM) else None


def _ends_with_tool_result(messages: object) -> bool:
    """Whether a chat completions conversation's last message is a tool result."""
    if not isinstance(messages, list) or not messages or not isinstance(messages[-1], dict):
        return False
    return messages[-1].get("role") == "tool"


def _first_tool_name(tools: object) -> str | None:
    """The name of the first function tool of a chat completions request, if any."""
    if not isinstance(tools, list) or not tools or not isinstance(tools[0], dict):
        return None
    function = tools[0].get("function")
    name = function.get("name") if isinstance(function, dict) else None
    return name if isinstance(name, str) else None


def _size(value: object, default: int) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value > 0:
        return min(value, _MAX_CHUNKS)
    return default


async def _read_body(receive: Receive) -> bytes:
    message = await receive()
    body: bytes = message.get("body", b"")
    while message.get("more_body", False):
        message = await receive()
        body += message.get("body", b"")
    return body


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1", help="loopback only (default 127.0.0.1)")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--chunks", type=int, default=200, help="pieces per reply by default")
    parser.add_argument("--model", default=DEFAULT_MODEL)
    parser.add_argument(
        "--eof-with-last-event",
        action="store_true",
        help="send the stream's end (chunked terminator) in the same write as its last "
        "event, instead of in a write of its own like most real servers",
    )
    parser.add_argument(
        "--interval-ms",
        type=float,
        default=0.0,
        help="pause between two streamed chunks, for long-lived streams (bench/soak.py)",
    )
    parser.add_argument(
        "--processes",
        type=int,
        default=1,
        help="serve from this many processes on the one port (SO_REUSEPORT: the kernel "
        "spreads connections over them), for load a single process cannot answer",
    )
    args = parser.parse_args(argv)
    if not args.host.startswith("127.") and args.host != "localhost":
        parser.error("the benchmark backend binds loopback addresses only")
    if args.processes < 1:
        parser.error("--processes must be positive")
    if args.processes == 1:
        _serve(args, reuse_port=False)
    else:
        _serve_processes(args)


def _serve(args: argparse.Namespace, reuse_port: bool) -> None:
    """One process's server; with ``reuse_port`` on a socket of its own that shares the
    port with its siblings'."""
    import uvicorn

    config = uvicorn.Config(
        FastBackend(
            max(1, args.chunks),
            args.model,
            eof_apart=not args.eof_with_last_event,
            interval=args.interval_ms / 1000,
        ),
        host=args.host,
        port=args.port,
        loop="uvloop",
        http="httptools",
        lifespan="off",
        access_log=False,
        log_level="warning",
        server_header=False,
        date_header=False,
        # Longer than any pause between two benchmark rounds, so the load generator's
        # pooled connections are never closed under it.
        timeout_keep_alive=300,
        proxy_headers=False,
    )
    server = uvicorn.Server(config)
    if not reuse_port:
        server.run()
        return
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    sock.bind((args.host, args.port))
    server.run(sockets=[sock])


def _serve_processes(args: argparse.Namespace) -> None:
    """``--processes`` children, each serving the port; stopping this process (SIGINT
    or SIGTERM) stops them."""
    context = multiprocessing.get_context("fork")  # before any event loop exists
    children = [
        context.Process(target=_serve, args=(args, True), daemon=True)
        for _ in range(args.processes)
    ]
    for child in children:
        child.start()

    def stop(signum: int, frame: object) -> None:
        for child in children:
            if child.is_alive():
                child.terminate()

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    for child in children:
        child.join()


if __name__ == "__main__":
    main()
