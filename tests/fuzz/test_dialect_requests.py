"""Hypothesis-generated requests for every dialect.

Wild bodies (``strategies.py``) go over loopback to a real gateway on the scripted
backend, as raw bytes, to each route that takes a body. For every reply:

- never a 500, and a 502/503/504 only when the scripted backend was told to fail
  (with exactly that failure's status);
- every error is the error JSON of the route's dialect, and no body holds a traceback;
- the gateway agrees with its own decoder run in-process on the same bytes: a body the
  decoder rejects gets that error's status, and a body it accepts gets a 200 with a
  well-formed reply (a JSON object, or an NDJSON / SSE stream that ends properly, with
  the dialect's in-stream error when the backend failed mid-stream).

The Responses routes are fuzzed the same way; their decoder is also run in-process on
the same bodies, where it may raise only ``InvalidRequestError`` naming the field
(``param``) of any body that is a JSON object.

Deterministic (``derandomize``, no example database). ``FUZZ_MAX_EXAMPLES`` raises the
number of bodies per route.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import httpx_sse
import orjson
import pytest
from hypothesis import HealthCheck, event, given, note, settings
from hypothesis import strategies as st

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import (
    BackendError,
    BackendProtocolError,
    BackendTimeoutError,
    BackendUnavailableError,
    InvalidRequestError,
    LLMBridgeError,
    NotFoundError,
)
from llmbridge.core.request import ChatRequest
from llmbridge.dialects import anthropic, ollama, openai, responses
from llmbridge.dialects.responses.request import decode_input_tokens_request
from llmbridge.web.bodies import parse_json
from tests.conftest import RunningServer
from tests.fuzz.shapes import assert_error_shape, assert_no_traceback, dialect_for_path
from tests.fuzz.strategies import BODIES, ENCODINGS, OPENAI_RESPONSES, encode, mutated

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "250"))

DECODERS: dict[str, Callable[[object], Any]] = {
    "/api/chat": ollama.decode_chat_request,
    "/api/generate": ollama.decode_generate_request,
    "/api/embed": ollama.decode_embed_request,
    "/api/show": ollama.decode_show_request,
    "/v1/chat/completions": openai.decode_chat_request,
    "/v1/embeddings": openai.decode_embed_request,
    "/v1/messages": anthropic.decode_chat_request,
    "/v1/messages/count_tokens": anthropic.decode_count_tokens_request,
    "/v1/responses": responses.decode_chat_request,
    "/v1/responses/input_tokens": decode_input_tokens_request,
}
RESPONSES_PATHS = ("/v1/responses", "/v1/responses/input_tokens")
CHAT_ROUTES = (
    "/api/chat",
    "/api/generate",
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/responses",
)

SCRIPTS = st.one_of(
    st.none(),
    st.sampled_from(
        [
            Script(thinking=["hm"], signature="sig", text=["ok"], tool_calls=[("f", {"a": 1})]),
            Script(fail_before=BackendError("scripted: the backend failed")),
            Script(fail_before=BackendUnavailableError("scripted: unreachable")),
            Script(fail_before=BackendTimeoutError("scripted: no answer")),
            Script(
                text=["a", "b"], fail_after=1, fail_error=BackendProtocolError("scripted: junk")
            ),
            Script(text=["a", "b"], fail_after=1, in_band=True, fail_error=BackendError("in band")),
        ]
    ),
)
"""What the scripted backend does with a chat request: its default reply, or one of these."""


def _expected_status(path: str, raw: bytes) -> tuple[int, Any]:
    """What the gateway should answer, by its own JSON parser and decoder; and the
    decoded request, when there is one."""
    try:
        body = parse_json(raw)
        if path in RESPONSES_PATHS and isinstance(body, dict):
            previous = body.get("previous_response_id")
            if isinstance(previous, str):
                # The agent store is on (its default): the stored response is looked
                # up before the body is decoded, and no fuzzed id was ever stored.
                return NotFoundError.default_status, None
        decoded = DECODERS[path](body)  # what limits.read_json / read_chat do
    except LLMBridgeError as exc:
        return exc.status_code, None
    return 200, decoded


def _loads_only(path: str, chat: ChatRequest) -> bool:
    """Ollama answers a request with nothing to generate by loading (or, with
    ``keep_alive`` 0, unloading) the model, with no generation: a chat with no messages,
    a generate with no prompt, suffix or images (a ``system`` alone included)."""
    if path == "/api/generate":
        return chat.completion is None
    return path.startswith("/api/") and not chat.messages


def _backend_status(path: str, script: Script | None, chat: ChatRequest) -> int:
    """The status a chat request answered by ``script`` gets (200 when it succeeds or
    fails only after the first byte of a stream)."""
    if _loads_only(path, chat):
        return 200
    if chat.completion is not None and chat.completion.suffix:
        # Fill-in-the-middle: the scripted backend has no FIM, so preparation refuses
        # it (400 naming ``suffix``) before any backend call.
        return 400
    if script is None:
        return 200
    if script.fail_before is not None:
        return script.fail_before.status_code
    if script.fail_error is not None and not chat.stream:
        return script.fail_error.status_code
    return 200


# -- well-formed replies ------------------------------------------------------------


# Streams are read the way clients read them: lines split by httpx (ollama-python
# reads NDJSON so) and events parsed by httpx-sse, both of which split at U+2028 too.


def _ndjson(response: httpx.Response, key: str, fails_mid_stream: bool) -> None:
    frames = [orjson.loads(line) for line in response.iter_lines() if line]
    assert frames and all(isinstance(frame, dict) for frame in frames), frames
    last = frames[-1]
    if fails_mid_stream and key == "message":  # /api/chat: seed 000's error frame
        assert set(last) == {"model", "created_at", "message", "done", "done_reason", "error"}
        assert last["done"] is True and last["done_reason"] == "error", last
        assert last["message"]["content"] == f"Error: {last['error']}", last
        frames = frames[:-1]
    elif fails_mid_stream:
        assert set(last) == {"error"}, last
        frames = frames[:-1]
    else:
        assert last["done"] is True, last
    for frame in frames:
        assert key in frame and isinstance(frame["done"], bool), frame


def _sse(response: httpx.Response) -> list[tuple[str, str]]:
    """(event name, data) of each server-sent event."""
    return [(event.event, event.data) for event in httpx_sse.EventSource(response).iter_sse()]


def _openai_stream(response: httpx.Response, fails_mid_stream: bool) -> None:
    events = _sse(response)
    assert events[-1] == ("message", "[DONE]"), events[-3:]
    chunks = [orjson.loads(data) for _, data in events[:-1]]
    if fails_mid_stream:
        assert set(chunks[-1]) == {"error"}, chunks[-1]
        chunks = chunks[:-1]
    assert all(chunk["object"] == "chat.completion.chunk" for chunk in chunks), chunks


def _anthropic_stream(response: httpx.Response, fails_mid_stream: bool) -> None:
    events = _sse(response)
    assert events[0][0] == "message_start", events[:2]
    assert events[-1][0] == ("error" if fails_mid_stream else "message_stop"), events[-2:]
    for name, data in events:
        assert orjson.loads(data)["type"] == name, (name, data)


def _responses_stream(response: httpx.Response, fails_mid_stream: bool) -> None:
    events = _sse(response)
    payloads = [orjson.loads(data) for _, data in events]
    assert [p["sequence_number"] for p in payloads] == list(range(len(payloads))), payloads
    assert all(p["type"] == name for (name, _), p in zip(events, payloads, strict=True))
    names = [name for name, _ in events]
    assert names[:2] == ["response.created", "response.in_progress"], names
    if fails_mid_stream:
        assert names[-2:] == ["error", "response.failed"], names
    else:
        assert names[-1] in ("response.completed", "response.incomplete"), names
        assert payloads[-1]["response"]["status"] in ("completed", "incomplete"), payloads[-1]


def _check_reply(path: str, request: Any, response: httpx.Response, fails_mid: bool) -> None:
    stream = isinstance(request, ChatRequest) and request.stream
    stream = stream and not _loads_only(path, request)
    if stream and path in ("/api/chat", "/api/generate"):
        return _ndjson(response, "message" if path == "/api/chat" else "response", fails_mid)
    if stream and path == "/v1/chat/completions":
        return _openai_stream(response, fails_mid)
    if stream and path == "/v1/messages":
        return _anthropic_stream(response, fails_mid)
    if stream and path == "/v1/responses":
        return _responses_stream(response, fails_mid)
    body = response.json()
    assert isinstance(body, dict), body
    if path in ("/api/chat", "/api/generate"):
        assert body["done"] is True and ("message" in body or "response" in body), body
    elif path == "/api/embed":
        assert len(body["embeddings"]) == len(request.inputs), body
    elif path == "/api/show":
        assert {"details", "model_info", "capabilities"} <= set(body), body
    elif path == "/v1/chat/completions":
        assert body["object"] == "chat.completion", body
        assert body["choices"][0]["message"]["role"] == "assistant", body
    elif path == "/v1/embeddings":
        assert body["object"] == "list" and len(body["data"]) == len(request.inputs), body
    elif path == "/v1/messages":
        assert body["type"] == "message" and body["role"] == "assistant", body
        assert all(block["type"] != "error" for block in body["content"]), body
    elif path == "/v1/responses":
        assert body["object"] == "response" and body["status"] != "failed", body
        assert isinstance(body["output"], list) and body["id"].startswith("resp_"), body
    elif path == "/v1/responses/input_tokens":
        assert body["object"] == "response.input_tokens", body
        assert isinstance(body["input_tokens"], int) and body["input_tokens"] >= 0, body
    else:
        assert isinstance(body["input_tokens"], int) and body["input_tokens"] >= 0, body
    return None


# -- the test -----------------------------------------------------------------------


@pytest.fixture(scope="module")
def client(gateway: RunningServer) -> Iterator[httpx.Client]:
    # TCP_NODELAY: httpx writes headers and body separately, and Nagle's algorithm plus
    # delayed ACKs would add 40 ms to every request.
    nodelay = httpx.HTTPTransport(socket_options=[(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)])
    with httpx.Client(base_url=gateway.url, timeout=30, transport=nodelay) as http:
        yield http


@pytest.mark.parametrize("path", list(BODIES))
def test_wild_requests(client: httpx.Client, scripted: ScriptedBackend, path: str) -> None:
    dialect = dialect_for_path(path)
    chat_route = path in CHAT_ROUTES

    @settings(
        max_examples=MAX_EXAMPLES,
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(
        body=mutated(BODIES[path]),
        encoding=ENCODINGS,
        script=SCRIPTS if chat_route else st.none(),
    )
    def fuzz(body: Any, encoding: str, script: Script | None) -> None:
        raw = encode(body, encoding)
        note(f"sent: {raw[:3000]!r}")
        status, request = _expected_status(path, raw)
        if script is not None:
            scripted.enqueue(script)
        try:
            response = client.post(path, content=raw, headers={"content-type": "application/json"})
        finally:
            scripted.queue.clear()  # a script the request never reached must not leak
        assert_no_traceback(response.content)
        assert response.status_code != 500, response.text
        if status == 200 and isinstance(request, ChatRequest) and chat_route:
            status = _backend_status(path, script, request)
        assert response.status_code == status, (response.status_code, response.text[:2000])
        event(f"HTTP {status}")  # --hypothesis-show-statistics: how many got how far
        if status >= 400:
            assert_error_shape(dialect, status, response.content, response.headers)
            return
        fails_mid = script is not None and script.fail_after is not None
        fails_mid = fails_mid and not _loads_only(path, request)
        _check_reply(path, request, response, fails_mid)

    fuzz()


@settings(max_examples=MAX_EXAMPLES, derandomize=True, deadline=None, database=None)
@given(body=mutated(OPENAI_RESPONSES))
def test_responses_decoder_raises_only_errors_naming_a_field(body: Any) -> None:
    """In-process, no gateway: every body the Responses decoder refuses is an
    ``InvalidRequestError`` (a 400 in OpenAI's shape), never another exception, and it
    names the field at fault whenever the body is an object to have fields."""
    try:
        responses.decode_chat_request(body)
    except InvalidRequestError as exc:
        assert exc.status_code == 400
        assert exc.message
        if isinstance(body, dict):
            assert exc.param, (exc.message, body)
