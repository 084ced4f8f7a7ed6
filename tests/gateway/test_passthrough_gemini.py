"""The pass-through path for Gemini ``generateContent`` (core/relay.py,
dialects/gemini/relay.py): a Gemini client in front of a ``gemini`` backend gets Google's
bytes as they came, and everything recorded is what the translated path records. Each
case runs the same scripted Google reply (tests/backends/gemini_server.py) through a
route that relays and one that translates (``passthrough: false``) and compares what the
client got and what the ledger holds: streamed and not, a route that maps the model's
name, tools, the official ``google-genai`` client, Google's recorded streams
(tests/fixtures/gemini), and the faults (a cut stream, Google's in-band error, a 429 with
``Retry-After`` or ``RetryInfo``, a client that leaves)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import types

from llmbridge.backends.gemini import GeminiBackend
from llmbridge.dialects.gemini.response import wire_signature
from llmbridge.dialects.gemini.thoughts import GEMINI
from llmbridge.features.token_count import count_text_tokens
from tests.backends.gemini_server import (
    GeminiServer,
    Reply,
    chunk,
    google_error,
    json_reply,
    model_entry,
    running_gemini_server,
    sse,
)
from tests.conftest import RunningServer
from tests.dialects.gemini.test_stream import FIXTURES
from tests.gateway.passthrough import (
    database_fixture,
    key_fixture,
    leave_after_first_read,
    ledger_row,
    passthrough_gateway,
    post,
    routes,
    rows_alike,
)
from tests.waiting import scaled

MASTER = "sk-master-passthrough-gemini"
KEY_NAME = "passthrough-gemini"
GOOGLE_KEY = "AIza-backend-key"
MODEL = "gemini-2.5-flash"
USAGE = {
    "promptTokenCount": 11,
    "cachedContentTokenCount": 4,
    "candidatesTokenCount": 3,
    "thoughtsTokenCount": 2,
    "totalTokenCount": 16,
}
HI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def stream() -> Reply:
    """Google's stream of ``Hello there.``, framed as Google frames it."""
    return sse(
        chunk({"text": "Hello"}, usage={"promptTokenCount": 11}),
        chunk({"text": " there."}),
        chunk({"text": ""}, finish="STOP", usage=USAGE),
    )


REPLY = chunk({"text": "Hello there."}, finish="STOP", usage=USAGE)


@pytest.fixture(scope="module")
def google() -> Iterator[tuple[GeminiServer, str]]:
    with running_gemini_server() as (server, http):
        yield server, http.url


database = database_fixture("passthrough-gemini")


@pytest.fixture(scope="module")
def gateway(google: tuple[GeminiServer, str], database: Path) -> Iterator[RunningServer]:
    server, url = google
    server.models[MODEL] = model_entry(MODEL)
    with passthrough_gateway(
        {"gem": GeminiBackend("gem", url, api_key=GOOGLE_KEY)},
        routes("gem", MODEL),
        master=MASTER,
        database=database,
    ) as running:
        yield running


key = key_fixture(MASTER, KEY_NAME)


@pytest.fixture
def queue(google: tuple[GeminiServer, str]) -> Iterator[GeminiServer]:
    server, _ = google
    server.queue.clear()
    yield server
    server.queue.clear()


def _post(
    gateway: RunningServer, key: str, model: str, body: object, *, stream: bool = True
) -> httpx.Response:
    method = "streamGenerateContent?alt=sse" if stream else "generateContent"
    raw = body if isinstance(body, bytes) else orjson.dumps(body)
    headers = {"x-goog-api-key": key, "content-type": "application/json"}
    return post(gateway, f"/v1beta/models/{model}:{method}", raw, headers)


def _chunks(raw: bytes) -> list[Any]:
    """The stream's data payloads, parsed (either framing)."""
    frames = raw.replace(b"\r\n", b"\n").split(b"\n\n")
    return [orjson.loads(f[6:]) for f in frames if f.startswith(b"data: ")]


def _read(chunks: list[Any]) -> dict[str, Any]:
    """What a client makes of a reply's chunks: its text (thoughts apart: the translated
    path hides those the client did not ask for), calls, finish, usage, error."""
    text, calls, finish, usage, error = "", [], None, None, None
    for body in chunks:
        error = body.get("error", error)
        counts = body.get("usageMetadata") or {}
        if counts.get("candidatesTokenCount"):
            usage = (counts.get("promptTokenCount"), counts.get("candidatesTokenCount"))
        for candidate in body.get("candidates") or []:
            finish = candidate.get("finishReason") or finish
            for part in (candidate.get("content") or {}).get("parts") or []:
                if part.get("thought"):
                    continue
                text += part.get("text") or ""
                if "functionCall" in part:
                    call = part["functionCall"]
                    calls.append((call["name"], call.get("args") or {}))
    return {
        "text": text,
        "calls": calls,
        "finish": finish,
        "usage": usage,
        "error": None if error is None else (error.get("code"), error.get("status")),
    }


def _row(database: Path, request_id: str) -> Any:
    return ledger_row(database, KEY_NAME, request_id)


def _same_rows(database: Path, *replies: httpx.Response) -> Any:
    return rows_alike(database, KEY_NAME, replies)[0]


def test_a_stream_is_relayed_byte_for_byte_and_recorded_as_translated(
    gateway: RunningServer, key: str, queue: GeminiServer, database: Path
) -> None:
    raw = orjson.dumps(HI | {"generationConfig": {"temperature": 0.2}})
    queue.enqueue(stream())
    relayed = _post(gateway, key, MODEL, raw)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.content == b"".join(stream().chunks)  # Google's bytes, nothing changed
    seen = queue.last
    assert seen.raw == raw  # the client's own body
    assert seen.path.endswith(f"{MODEL}:streamGenerateContent") and seen.query == {"alt": "sse"}
    assert seen.headers["x-goog-api-key"] == GOOGLE_KEY  # the backend's key, not the client's
    queue.enqueue(stream())
    translated = _post(gateway, key, "translated", raw)
    assert "x-llmbridge-path" not in translated.headers
    assert _read(_chunks(relayed.content)) == _read(_chunks(translated.content))
    row = _same_rows(database, relayed, translated)
    assert (row["input_tokens"], row["output_tokens"]) == (11, 5)  # thoughts are output
    assert orjson.loads(row["facts"])["x-llmbridge-path"] == "passthrough"


def test_a_key_in_the_query_is_taken_as_today(
    gateway: RunningServer, key: str, queue: GeminiServer
) -> None:
    queue.enqueue(stream())
    reply = httpx.post(
        f"{gateway.url}/v1beta/models/{MODEL}:streamGenerateContent?alt=sse&key={key}",
        json=HI,
        timeout=scaled(30),
    )
    assert reply.status_code == 200 and reply.headers["x-llmbridge-path"] == "passthrough"
    assert "key" not in queue.last.query  # never passed on


def test_a_reply_sent_whole_is_googles_json(
    gateway: RunningServer, key: str, queue: GeminiServer, database: Path
) -> None:
    queue.enqueue(json_reply(REPLY))
    relayed = _post(gateway, key, MODEL, HI, stream=False)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.content == orjson.dumps(REPLY)
    assert queue.last.path.endswith(f"{MODEL}:generateContent")  # not made a stream
    queue.enqueue(json_reply(REPLY))
    translated = _post(gateway, key, "translated", HI, stream=False)
    assert queue.last.path.endswith(f"{MODEL}:generateContent")  # asked for whole there too
    assert _read([relayed.json()]) == _read([translated.json()])
    row = _same_rows(database, relayed, translated)
    assert (row["status"], row["input_tokens"], row["output_tokens"]) == (200, 11, 5)


def test_a_mapped_model_name_is_the_clients_in_every_chunk(
    gateway: RunningServer, key: str, queue: GeminiServer
) -> None:
    queue.enqueue(stream())
    relayed = _post(gateway, key, "mapped", HI)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert queue.last.path.endswith(f"/models/{MODEL}:streamGenerateContent")
    chunks = _chunks(relayed.content)
    assert len(chunks) == 3 and all(c["modelVersion"] == "mapped" for c in chunks)
    queue.enqueue(json_reply(REPLY))
    whole = _post(gateway, key, "mapped", HI, stream=False).json()
    assert whole == REPLY | {"modelVersion": "mapped"}


def test_tools_relay_only_where_nothing_needs_healing(
    gateway: RunningServer, key: str, queue: GeminiServer
) -> None:
    declaration = {"name": "f", "parameters": {"type": "OBJECT", "properties": {}}}
    body = HI | {"tools": [{"functionDeclarations": [declaration]}]}
    queue.enqueue(stream())
    healed = _post(gateway, key, MODEL, body)
    assert "x-llmbridge-path" not in healed.headers  # a server on loopback is not Google
    queue.enqueue(stream())
    trusted = _post(gateway, key, "tools-trusted", body)
    assert trusted.headers["x-llmbridge-path"] == "passthrough"
    assert queue.last.body == body  # Google's own schema, not converted
    assert GeminiBackend("google").capabilities.trusted_tool_arguments  # Google's own API


def test_a_body_holding_what_the_gateway_issued_is_translated(
    gateway: RunningServer, key: str, queue: GeminiServer
) -> None:
    signed = wire_signature(GEMINI.carry("gem", "c2ln"))
    call = {"functionCall": {"name": "f", "args": {}}, "thoughtSignature": signed}
    body = {
        "contents": [
            *HI["contents"],
            {"role": "model", "parts": [call]},
            {"role": "user", "parts": [{"functionResponse": {"name": "f", "response": {}}}]},
        ]
    }
    queue.enqueue(stream())
    reply = _post(gateway, key, MODEL, body)
    assert reply.status_code == 200 and "x-llmbridge-path" not in reply.headers
    sent = queue.last.body["contents"][1]["parts"][0]
    assert sent["thoughtSignature"] == "c2ln"  # Google's own, unwrapped


def test_the_official_client_reads_a_relayed_reply(
    gateway: RunningServer, key: str, queue: GeminiServer
) -> None:
    client = genai.Client(api_key=key, http_options=types.HttpOptions(base_url=gateway.url))
    call = {"functionCall": {"name": "get_weather", "args": {"city": "Oslo"}}}
    queue.enqueue(
        sse(
            chunk({"text": "Let me check. "}),
            chunk(call | {"thoughtSignature": "c2lnbmF0dXJl"}, finish="STOP", usage=USAGE),
        )
    )
    parts = list(client.models.generate_content_stream(model=MODEL, contents="weather?"))
    assert parts[0].text == "Let me check. "
    calls = [c for p in parts for c in p.function_calls or ()]
    assert [(c.name, c.args) for c in calls] == [("get_weather", {"city": "Oslo"})]
    last = parts[-1].candidates[0].content.parts[0]  # type: ignore[index,union-attr]
    assert last.thought_signature == b"signature"  # Google's own, as it sent it
    queue.enqueue(json_reply(REPLY))
    whole = client.models.generate_content(model="mapped", contents="hi")
    assert whole.text == "Hello there." and whole.model_version == "mapped"
    assert whole.usage_metadata is not None and whole.usage_metadata.total_token_count == 16
    client.close()


@pytest.mark.parametrize("model", [MODEL, "translated"])
def test_a_cut_stream_ends_in_googles_error_and_is_billed(
    gateway: RunningServer, key: str, queue: GeminiServer, database: Path, model: str
) -> None:
    queue.enqueue(Reply(chunks=stream().chunks[:2]))
    reply = _post(gateway, key, model, HI)
    read = _read(_chunks(reply.content))
    assert read["text"] == "Hello there." and read["error"] == (502, "UNAVAILABLE")
    row = _row(database, reply.headers["x-request-id"])
    # The text streamed, counted, the same on both paths.
    assert row["status"] == 502 and row["output_tokens"] == count_text_tokens("Hello there.")


def test_googles_in_band_error_is_relayed_as_it_came(
    gateway: RunningServer, key: str, queue: GeminiServer, database: Path
) -> None:
    error = {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}}
    failing = [*stream().chunks[:1], b"data: " + orjson.dumps(error) + b"\r\n\r\n"]
    queue.enqueue(Reply(chunks=failing))
    reply = _post(gateway, key, MODEL, HI)
    assert reply.content == b"".join(failing)
    row = _row(database, reply.headers["x-request-id"])
    assert row["status"] == 503 and "overloaded" in row["error"]


RETRY_INFO = [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": "120s"}]


@pytest.mark.parametrize("model", [MODEL, "translated"])
@pytest.mark.parametrize("said", ["header", "retry-info", "in-band"])
def test_a_429_before_the_first_byte_keeps_googles_shape_status_and_retry_after(
    gateway: RunningServer, key: str, queue: GeminiServer, model: str, said: str
) -> None:
    for _ in range(4):  # the first try and the retries policy allows
        if said == "header":
            queue.enqueue(google_error(429, "slow down", "RESOURCE_EXHAUSTED", retry_after="120"))
        elif said == "in-band":  # a 200 whose stream opens with the error
            error = {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}
            queue.enqueue(sse({"error": error | {"details": RETRY_INFO}}))
        else:
            queue.enqueue(google_error(429, "slow down", "RESOURCE_EXHAUSTED", details=RETRY_INFO))
    reply = _post(gateway, key, model, HI)
    assert reply.status_code == 429 and reply.headers["retry-after"] == "120"
    error = reply.json()["error"]
    assert error["code"] == 429 and error["status"] == "RESOURCE_EXHAUSTED"
    assert "slow down" in error["message"]


def test_a_client_that_leaves_cancels_the_relayed_stream(
    gateway: RunningServer, key: str, queue: GeminiServer, database: Path
) -> None:
    queue.enqueue(Reply(chunks=stream().chunks[:2] * 50, delay=scaled(0.2)))
    request_id = leave_after_first_read(
        gateway,
        f"/v1beta/models/{MODEL}:streamGenerateContent?alt=sse",
        HI,
        {"x-goog-api-key": key},
    )
    assert _row(database, request_id)["status"] == 499


GOLDEN = sorted(p for p in FIXTURES.glob("reply_*.sse") if not p.stem.startswith("reply_encoded"))
"""Google's recorded streams (tests/fixtures/gemini), each named after its quirk."""


@pytest.mark.parametrize("fixture", GOLDEN, ids=lambda path: path.stem)
def test_golden_streams_read_the_same_on_both_paths(
    gateway: RunningServer, key: str, queue: GeminiServer, database: Path, fixture: Path
) -> None:
    raw = fixture.read_bytes()
    queue.enqueue(Reply(chunks=[raw]))
    relayed = _post(gateway, key, MODEL, HI)
    queue.enqueue(Reply(chunks=[raw]))
    translated = _post(gateway, key, "translated", HI)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    whole = raw[: max(raw.rfind(b"\n\n") + 2, raw.rfind(b"\r\n\r\n") + 4)]
    assert relayed.content.startswith(whole)  # byte for byte; then the gateway's error, if any
    assert _read(_chunks(relayed.content)) == _read(_chunks(translated.content))
    rows = [_row(database, r.headers["x-request-id"]) for r in (relayed, translated)]
    for field in ("status", "input_tokens", "output_tokens"):
        assert rows[0][field] == rows[1][field], field


def test_health_names_the_dialect_a_backend_relays(gateway: RunningServer, key: str) -> None:
    health = httpx.get(
        gateway.url + "/health", headers={"Authorization": f"Bearer {key}"}, timeout=scaled(30)
    ).json()
    assert health["backends"]["gem"]["passthrough"] == "gemini"


@pytest.mark.parametrize(
    ("thinking", "relays"),
    [
        pytest.param({"thinkingBudget": 0}, True, id="off"),
        # Serving derives an effort from the budget for backends that take levels
        # (fit.py ``_same_thinking``): the body still says all of it, so it relays.
        pytest.param({"thinkingBudget": 1024, "includeThoughts": True}, True, id="on"),
    ],
)
def test_a_request_relays_where_serving_left_its_thinking_alone(
    gateway: RunningServer, key: str, queue: GeminiServer, thinking: Any, relays: bool
) -> None:
    body = HI | {"generationConfig": {"thinkingConfig": thinking}}
    queue.enqueue(stream())
    reply = _post(gateway, key, MODEL, body)
    assert reply.status_code == 200
    assert (reply.headers.get("x-llmbridge-path") == "passthrough") is relays
    assert (
        queue.last.body["generationConfig"]["thinkingConfig"]["thinkingBudget"]
        == (thinking["thinkingBudget"])
    )
