"""The pass-through path for OpenAI Responses (dialects/responses/relay.py): a Responses
client in front of an ``openai_responses`` backend gets the backend's bytes as they
came, and everything recorded is what the translated path records. Each case runs the
same canned backend reply through a route that relays and one that translates
(``passthrough: false``) and compares what the client got and what the ledger holds:
streamed and not, a route that maps the model's name, tools, the official ``openai``
client, the golden streams, the faults (a cut stream, the backend's in-band error, a
429 with ``Retry-After``, a client that leaves), and the requests that must translate
(a response the gateway keeps or continues, an item llmbridge sealed)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from llmbridge.backends.base import Backend
from llmbridge.backends.openai_responses import OpenAIResponsesBackend
from llmbridge.core.messages import ThinkingPart
from llmbridge.dialects.responses.reasoning import seal_reasoning
from llmbridge.features.token_count import count_text_tokens
from tests.conftest import RunningServer, openai_client, running_gateway
from tests.gateway.passthrough import (
    bearer,
    database_fixture,
    gateway_fixture,
    key_fixture,
    leave_after_first_read,
    ledger_row,
    post,
    routes,
    rows_alike,
    sse_frame,
    upstream_fixture,
)
from tests.upstream import Canned, FakeUpstream
from tests.waiting import scaled

MASTER = "sk-master-passthrough-responses"
KEY_NAME = "passthrough-responses"
STREAMS = Path(__file__).parents[1] / "fixtures" / "streams" / "responses"
USAGE = {
    "input_tokens": 11,
    "input_tokens_details": {"cached_tokens": 4},
    "output_tokens": 3,
    "output_tokens_details": {"reasoning_tokens": 0},
    "total_tokens": 14,
}
MESSAGE = {
    "id": "msg_1",
    "type": "message",
    "status": "completed",
    "role": "assistant",
    "content": [{"type": "output_text", "text": "Hello there.", "annotations": []}],
}


def _response(status: str, output: list[Any], usage: Any = None) -> dict[str, Any]:
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1764000000,
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": "m",
        "output": output,
        "parallel_tool_calls": True,
        "store": False,
        "tool_choice": "auto",
        "tools": [],
        "usage": usage,
    }


def _event(kind: str, seq: int, **fields: Any) -> bytes:
    return sse_frame({"type": kind, "sequence_number": seq, **fields}, kind)


def stream() -> list[bytes]:
    """A backend's stream of ``Hello there.`` as OpenAI sends it, one event a read."""
    ids = {"item_id": "msg_1", "output_index": 0, "content_index": 0}
    adding = {**MESSAGE, "status": "in_progress", "content": []}
    part = {"type": "output_text", "text": "", "annotations": []}
    return [
        _event("response.created", 0, response=_response("in_progress", [])),
        _event("response.in_progress", 1, response=_response("in_progress", [])),
        _event("response.output_item.added", 2, output_index=0, item=adding),
        _event("response.content_part.added", 3, **ids, part=part),
        _event("response.output_text.delta", 4, **ids, delta="Hello"),
        _event("response.output_text.delta", 5, **ids, delta=" there."),
        _event("response.output_text.done", 6, **ids, text="Hello there."),
        _event("response.output_item.done", 7, output_index=0, item=MESSAGE),
        _event("response.completed", 8, response=_response("completed", [MESSAGE], USAGE)),
    ]


REPLY = _response("completed", [MESSAGE], USAGE)


upstream = upstream_fixture()
database = database_fixture("passthrough-responses")


gateway = gateway_fixture(
    lambda url: {"resp": OpenAIResponsesBackend("resp", url)},
    [
        *routes("resp", "m"),
        {"name": "golden", "backend": "resp", "passthrough": True},
        {"name": "golden-translated", "backend": "resp", "model": "golden", "passthrough": False},
    ],
    master=MASTER,
)


key = key_fixture(MASTER, KEY_NAME)


@pytest.fixture(autouse=True)
def _empty_queue(upstream: tuple[FakeUpstream, RunningServer]) -> None:
    upstream[0].queue.clear()


def _post(gateway: RunningServer, key: str, body: dict[str, Any]) -> httpx.Response:
    return post(gateway, "/v1/responses", body, bearer(key))


def _ask(model: str, **more: Any) -> dict[str, Any]:
    """A body the gateway keeps nothing of (``store: false``, as Codex sends)."""
    return {"model": model, "input": "hi", "store": False, **more}


def _events(raw: bytes) -> list[dict[str, Any]]:
    """The stream's events, parsed."""
    out: list[dict[str, Any]] = []
    for frame in raw.replace(b"\r\n", b"\n").split(b"\n\n"):
        data = b"\n".join(line[5:].strip() for line in frame.split(b"\n") if line[:5] == b"data:")
        if data:
            out.append(orjson.loads(data))
    return out


def _item_text(item: dict[str, Any]) -> str:
    """An item's text as its ``done`` carries it: a message's content, a reasoning
    item's summaries (joined by a blank line, as the translated path joins them), else
    its raw reasoning."""
    if item["type"] == "message":
        return "".join(part.get("text") or "" for part in item["content"])
    parts = item.get("summary") or item.get("content") or []
    return "\n\n".join(part["text"] for part in parts)


def _read(raw: bytes) -> dict[str, Any]:
    """What a client makes of a stream: its text and reasoning (from the deltas, or from
    an item sent whole without them; summaries joined by a blank line, as the
    translated path joins them into one), its calls, how it ended, the counts (zeros
    where the backend sent none, as the translated path writes them) and the output of
    its last response object, and its error."""
    texts: dict[str, str] = {"message": "", "reasoning": ""}
    streamed: dict[int, int] = {}  # output index -> the latest summary index (or 0)
    calls, last, error = [], None, None
    for event in _events(raw):
        kind = event.get("type")
        index = event.get("output_index", 0)
        if kind == "response.output_text.delta":
            texts["message"] += event["delta"]
            streamed[index] = 0
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            summary = event.get("summary_index", 0)
            if index in streamed and streamed[index] != summary:
                texts["reasoning"] += "\n\n"
            texts["reasoning"] += event["delta"]
            streamed[index] = summary
        elif kind == "response.output_item.done":
            item = event["item"]
            if item["type"] == "function_call":
                calls.append((item["name"], orjson.loads(item["arguments"] or "{}")))
            elif item["type"] in texts and index not in streamed:
                texts[item["type"]] += _item_text(item)
        elif kind == "error":
            error = event.get("code") or event.get("error", {}).get("code")
        if isinstance(event.get("response"), dict):
            last = kind, event["response"]
    ending, response = last if last is not None else (None, {})
    usage = response.get("usage") or {}
    return {
        "text": texts["message"],
        "reasoning": texts["reasoning"],
        "calls": calls,
        "ending": ending,
        "status": response.get("status"),
        "counts": (usage.get("input_tokens") or 0, usage.get("output_tokens") or 0),
        "output": [item.get("type") for item in response.get("output") or []],
        "error": error,
    }


def _row(database: Path, request_id: str) -> Any:
    return ledger_row(database, KEY_NAME, request_id)


RECORDED = (
    "status",
    "input_tokens",
    "output_tokens",
    "reasoning_tokens",
    "cached_tokens",
    "streamed",
    "cost_usd",
    "backend",
    "endpoint",
)


def test_a_stream_is_relayed_byte_for_byte_and_recorded_as_translated(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    relayed = _post(gateway, key, _ask("m", stream=True))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.content == b"".join(stream())  # nothing had to change
    assert fake.bodies[-1] == orjson.dumps(_ask("m", stream=True))  # the client's own body
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    translated = _post(gateway, key, _ask("translated", stream=True))
    assert "x-llmbridge-path" not in translated.headers
    read = _read(relayed.content)
    assert read == _read(translated.content)
    assert read["ending"] == "response.completed"
    assert read["text"] == "Hello there." and read["counts"] == (11, 3)
    one, _ = rows_alike(database, KEY_NAME, (relayed, translated), RECORDED)
    assert (one["input_tokens"], one["output_tokens"]) == (11, 3)
    assert orjson.loads(one["facts"])["x-llmbridge-path"] == "passthrough"


def test_a_reply_sent_whole_is_the_backends_json(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
    relayed = _post(gateway, key, _ask("m"))
    assert relayed.content == orjson.dumps(REPLY)
    assert orjson.loads(fake.bodies[-1]) == _ask("m")  # not made a stream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    translated = _post(gateway, key, _ask("translated"))
    whole = translated.json()
    assert whole["output"][0]["content"][0]["text"] == "Hello there."
    counts = [
        (u["input_tokens"], u["input_tokens_details"]["cached_tokens"], u["output_tokens"])
        for u in (whole["usage"], relayed.json()["usage"])
    ]
    assert counts[0] == counts[1] == (11, 4, 3)
    one, _ = rows_alike(database, KEY_NAME, (relayed, translated), RECORDED)
    assert (one["status"], one["input_tokens"], one["output_tokens"]) == (200, 11, 3)


@pytest.mark.parametrize("store", [None, True])
def test_store_false_is_sent_where_the_body_does_not_say_it(
    upstream: tuple[FakeUpstream, RunningServer], store: bool | None
) -> None:
    # A gateway that keeps no responses relays a body whatever its store says; the
    # backend is told to keep nothing, as on the translated path.
    fake, up = upstream
    backends: dict[str, Backend] = {"resp": OpenAIResponsesBackend("resp", up.url)}
    with running_gateway(backends, agent={"store_responses": "off"}) as bare:
        fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
        body = {"model": "m", "input": "hi"} | ({} if store is None else {"store": store})
        reply = httpx.post(bare.url + "/v1/responses", json=body, timeout=scaled(30))
    assert reply.headers["x-llmbridge-path"] == "passthrough"
    assert orjson.loads(fake.bodies[-1]) == {**body, "store": False}
    assert reply.json()["store"] is False


def test_a_large_body_relays_as_its_bytes_and_a_mapped_one_is_set_off_the_loop(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    # Over server.limits.offload_bytes (32 KiB): read, decoded and set in a worker thread.
    fake, _ = upstream
    long = "word " * 20_000
    for model in ("m", "mapped"):
        fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
        body = _ask(model, stream=True, input=long)
        relayed = _post(gateway, key, body)
        assert relayed.headers["x-llmbridge-path"] == "passthrough"
        sent = fake.bodies[-1]
        if model == "m":
            assert sent == orjson.dumps(body)  # the client's own bytes
        else:
            assert orjson.loads(sent) == {**body, "model": "m"}
        assert _read(relayed.content)["text"] == "Hello there."


def test_a_mapped_model_name_is_the_clients_in_every_response_object(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    relayed = _post(gateway, key, _ask("mapped", stream=True))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert orjson.loads(fake.bodies[-1])["model"] == "m"
    responses = [e["response"] for e in _events(relayed.content) if "response" in e]
    assert len(responses) == 3 and all(r["model"] == "mapped" for r in responses)
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
    assert _post(gateway, key, _ask("mapped")).json()["model"] == "mapped"


def test_tools_relay_only_where_nothing_needs_healing(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    tools = [{"type": "function", "name": "f", "parameters": {"type": "object"}}]
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    healed = _post(gateway, key, _ask("m", stream=True, tools=tools))
    assert healed.status_code == 200
    assert "x-llmbridge-path" not in healed.headers  # a local server's arguments get healed
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    trusted = _post(gateway, key, _ask("tools-trusted", stream=True, tools=tools))
    assert trusted.headers["x-llmbridge-path"] == "passthrough"
    assert orjson.loads(fake.bodies[-1])["tools"] == tools  # as the client sent them


def test_a_hosted_tool_the_front_leaves_out_is_translated_and_said(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    reply = _post(gateway, key, _ask("tools-trusted", stream=True, tools=[{"type": "web_search"}]))
    assert "x-llmbridge-path" not in reply.headers
    assert reply.headers["x-llmbridge-ignored-tools"] == "web_search"


def test_the_official_client_reads_a_relayed_reply(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    client = openai_client(gateway.url, key)
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    events = list(client.responses.create(model="m", input="hi", store=False, stream=True))
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "Hello there."
    completed = events[-1]
    assert completed.type == "response.completed"
    assert completed.response.output_text == "Hello there."
    assert completed.response.usage is not None
    assert completed.response.usage.input_tokens_details.cached_tokens == 4
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
    whole = client.responses.create(model="mapped", input="x", store=False)
    assert whole.output_text == "Hello there." and whole.model == "mapped"
    assert whole.usage is not None and whole.usage.total_tokens == 14


def test_a_response_the_gateway_keeps_or_continues_is_translated(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    client = openai_client(gateway.url, key)
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    kept = client.responses.with_raw_response.create(model="m", input="hi")  # stored here
    assert "x-llmbridge-path" not in kept.headers
    first = kept.parse()
    assert first.store is True
    assert orjson.loads(fake.bodies[-1])["store"] is False  # the backend keeps nothing
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    continued = client.responses.with_raw_response.create(
        model="m", input="and then?", previous_response_id=first.id, store=False
    )
    assert "x-llmbridge-path" not in continued.headers
    sent = orjson.loads(fake.bodies[-1])
    assert "previous_response_id" not in sent and len(sent["input"]) == 3  # the chain expanded
    assert continued.parse().previous_response_id == first.id


def test_a_body_with_an_item_llmbridge_sealed_is_translated(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    sealed = seal_reasoning(ThinkingPart("thought", signature="sig-1", provider="anthropic"))
    reasoning = {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "thought"}],
        "encrypted_content": sealed,
    }
    body = _ask("m", stream=True, input=[reasoning, {"role": "user", "content": "hi"}])
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    reply = _post(gateway, key, body)
    assert reply.status_code == 200 and "x-llmbridge-path" not in reply.headers
    assert b"llmbridge." not in fake.bodies[-1]  # opened for the backend, not sent sealed


def test_another_servers_reasoning_goes_to_the_backend_as_it_came(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-opaque"}
    body = _ask("m", stream=True, input=[reasoning, {"role": "user", "content": "hi"}])
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    relayed = _post(gateway, key, body)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert "x-llmbridge-dropped-reasoning" not in relayed.headers  # nothing was dropped
    assert orjson.loads(fake.bodies[-1])["input"][0] == reasoning
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    translated = _post(gateway, key, {**body, "model": "translated"})
    assert translated.headers["x-llmbridge-dropped-reasoning"] == "1"


@pytest.mark.parametrize("model", ["m", "translated"])
def test_a_cut_stream_ends_in_the_dialects_error_and_is_billed(
    gateway: RunningServer,
    key: str,
    upstream: tuple[FakeUpstream, RunningServer],
    database: Path,
    model: str,
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()[:6]))
    reply = _post(gateway, key, _ask(model, stream=True))
    events = _events(reply.content)
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    # Numbered on from the stream's own events, as the translated path numbers its own.
    numbers = [e["sequence_number"] for e in events]
    assert numbers == list(range(len(numbers)))
    failed = events[-1]["response"]
    assert failed["status"] == "failed" and failed["error"]["code"] == "server_error"
    assert failed["id"] == events[0]["response"]["id"]
    assert _read(reply.content)["text"] == "Hello there."
    row = _row(database, reply.headers["x-request-id"])
    # The text streamed, counted, the same on both paths.
    assert row["status"] == 502 and row["output_tokens"] == count_text_tokens("Hello there.")


def test_the_backends_in_band_error_is_relayed_as_it_came(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    raw = (STREAMS / "error_mid_stream.sse").read_bytes()
    fake.queue.append(Canned(media_type="text/event-stream", chunks=[raw]))
    reply = _post(gateway, key, _ask("golden", stream=True))
    assert reply.headers["x-llmbridge-path"] == "passthrough"
    assert reply.content == raw
    row = _row(database, reply.headers["x-request-id"])
    assert row["status"] == 429 and "Rate limit reached" in row["error"]


def test_a_failure_before_any_output_is_an_http_error_on_both_paths(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    raw = (STREAMS / "failed_before_output.sse").read_bytes()
    replies = []
    for model in ("golden", "golden-translated"):
        for _ in range(4):  # the first try and the retries policy allows (a 502)
            fake.queue.append(Canned(media_type="text/event-stream", chunks=[raw]))
        replies.append(_post(gateway, key, _ask(model, stream=True)))
        fake.queue.clear()
    relayed, translated = replies
    assert relayed.status_code == translated.status_code == 502
    assert relayed.json()["error"]["message"] == translated.json()["error"]["message"]
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert "x-llmbridge-path" not in translated.headers


def test_a_relayed_failure_says_its_path_and_drops_nothing(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    """Another server's reasoning went to the backend as it came: a relayed request
    that fails says so, not that the translated path dropped it."""
    fake, _ = upstream
    reasoning = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-opaque"}
    body = orjson.dumps({"error": {"message": "bad input", "type": "invalid_request_error"}})
    replies = []
    for model in ("m", "translated"):
        fake.queue.append(Canned(status=400, chunks=[body]))
        ask = _ask(model, stream=True, input=[reasoning, {"role": "user", "content": "hi"}])
        replies.append(_post(gateway, key, ask))
        fake.queue.clear()
    relayed, translated = replies
    assert relayed.status_code == translated.status_code == 400
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert "x-llmbridge-dropped-reasoning" not in relayed.headers
    assert translated.headers["x-llmbridge-dropped-reasoning"] == "1"


@pytest.mark.parametrize("model", ["m", "translated"])
def test_a_429_before_the_first_byte_keeps_its_status_and_retry_after(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], model: str
) -> None:
    fake, _ = upstream
    body = orjson.dumps({"error": {"message": "slow down", "type": "rate_limit_error"}})
    for _ in range(4):  # the first try and the retries policy allows
        fake.queue.append(Canned(status=429, chunks=[body], headers={"Retry-After": "120"}))
    reply = _post(gateway, key, _ask(model, stream=True))
    assert reply.status_code == 429 and reply.headers["retry-after"] == "120"
    error = reply.json()["error"]
    assert "slow down" in error["message"] and set(error) >= {"message", "type", "code"}


def test_a_client_that_leaves_cancels_the_relayed_stream(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    many = stream()[:6] + stream()[4:6] * 200
    fake.queue.append(Canned(media_type="text/event-stream", chunks=many, delay=scaled(0.2)))
    request_id = leave_after_first_read(
        gateway, "/v1/responses", _ask("m", stream=True), bearer(key)
    )
    assert _row(database, request_id)["status"] == 499


GOLDEN = sorted(STREAMS.glob("*.sse"))
"""The Responses servers' recorded quirks (tests/fixtures/streams/responses)."""
TOOLS = [{"type": "function", "name": "get_weather", "parameters": {"type": "object"}}]


@pytest.mark.parametrize("fixture", GOLDEN, ids=lambda path: path.stem)
def test_golden_streams_read_the_same_on_both_paths(
    gateway: RunningServer,
    key: str,
    upstream: tuple[FakeUpstream, RunningServer],
    database: Path,
    fixture: Path,
) -> None:
    fake, _ = upstream
    raw = fixture.read_bytes()
    asked = _ask("golden", stream=True, tools=TOOLS)
    replies = []
    for model in ("golden", "golden-translated"):
        for _ in range(4):  # a failure before any output is retried
            fake.queue.append(Canned(media_type="text/event-stream", chunks=[raw]))
        replies.append(_post(gateway, key, {**asked, "model": model}))
        fake.queue.clear()
    relayed, translated = replies
    assert relayed.status_code == translated.status_code
    rows_alike(database, KEY_NAME, (relayed, translated), RECORDED)
    if relayed.status_code != 200:
        return  # failed before any output: the same HTTP error (above)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    whole = raw[: raw.rfind(b"\n\n") + 2]  # the frames that ended
    assert relayed.content.startswith(whole)  # byte for byte; then the gateway's error, if any
    one_read, other_read = _read(relayed.content), _read(translated.content)
    assert one_read == other_read


def test_health_names_the_dialect_a_backend_relays(gateway: RunningServer, key: str) -> None:
    health = httpx.get(
        gateway.url + "/health", headers={"Authorization": f"Bearer {key}"}, timeout=scaled(30)
    ).json()
    assert health["backends"]["resp"]["passthrough"] == "responses"
