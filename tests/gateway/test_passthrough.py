"""The pass-through path for OpenAI chat completions (core/relay.py,
dialects/openai/relay.py): an OpenAI client in front of an OpenAI-compatible backend gets
the backend's bytes as they came, and everything recorded is what the translated path
records. Each case runs the same canned backend reply through a route that relays and
one that translates (``passthrough: false``) and compares what the client got and what
the ledger holds: streamed (with and without the client's ``include_usage``) and not, a
route that maps the model's name, tools, and the faults (a cut stream, the backend's
in-band error, a 429 with ``Retry-After``, a client that leaves)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.features.token_count import count_text_tokens
from tests.conftest import RunningServer, openai_client
from tests.dialects.openai.helpers import FIXTURES
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

MASTER = "sk-master-passthrough"
KEY_NAME = "passthrough"
BASE = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 7, "model": "m"}
USAGE = {"prompt_tokens": 11, "completion_tokens": 3, "total_tokens": 14}


def sse(*payloads: dict[str, Any] | str) -> list[bytes]:
    return [sse_frame(p) for p in payloads]


def stream(*, with_usage_nulls: bool = True) -> list[bytes]:
    """A backend's stream of ``Hello there.`` as OpenAI sends it with include_usage."""
    null = {"usage": None} if with_usage_nulls else {}
    return sse(
        BASE | {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]} | null,
        BASE | {"choices": [{"index": 0, "delta": {"content": "Hello"}}]} | null,
        BASE | {"choices": [{"index": 0, "delta": {"content": " there."}}]} | null,
        BASE | {"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]} | null,
        BASE | {"choices": [], "usage": USAGE},
        "[DONE]",
    )


REPLY = {
    "id": "chatcmpl-2",
    "object": "chat.completion",
    "created": 7,
    "model": "m",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Hello there."},
            "finish_reason": "stop",
        }
    ],
    "usage": USAGE,
}


upstream = upstream_fixture()
database = database_fixture("passthrough")


gateway = gateway_fixture(
    lambda url: {"compat": OpenAICompatBackend("compat", url)},
    [*routes("compat", "m"), {"name": "golden", "backend": "compat", "passthrough": True}],
    master=MASTER,
)


key = key_fixture(MASTER, KEY_NAME)


def _post(gateway: RunningServer, key: str, body: dict[str, Any]) -> httpx.Response:
    return post(gateway, "/v1/chat/completions", body, bearer(key))


def _chat(model: str, **more: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **more}


def _chunks(raw: bytes) -> list[Any]:
    """The stream's data payloads, parsed (``[DONE]`` as the string; a named ``error``
    event's as ``{"error": ...}``)."""
    out: list[Any] = []
    for frame in raw.split(b"\n\n"):
        lines = frame.split(b"\n")
        data = b"".join(line[6:] for line in lines if line.startswith(b"data: "))
        if not data:
            continue
        value = data.decode() if data == b"[DONE]" else orjson.loads(data)
        if b"event: error" in lines and isinstance(value, dict) and "error" not in value:
            value = {"error": value}
        out.append(value)
    return out


def _said(chunks: list[Any]) -> tuple[str, str | None, dict[str, Any] | None]:
    """The text, finish reason and usage a stream's chunks carry."""
    text, finish, usage = "", None, None
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        usage = chunk.get("usage") or usage
        for choice in chunk.get("choices", []):
            text += choice.get("delta", {}).get("content") or ""
            finish = choice.get("finish_reason") or finish
    return text, finish, usage


def _row(database: Path, request_id: str) -> Any:
    return ledger_row(database, KEY_NAME, request_id)


def test_a_stream_is_relayed_byte_for_byte_and_recorded_as_translated(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    relayed = _post(gateway, key, _chat("m", **asked))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.content == b"".join(stream())  # nothing had to change
    sent = fake.bodies[-1]
    assert sent == orjson.dumps(_chat("m", **asked))  # the client's own body
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    translated = _post(gateway, key, _chat("translated", **asked))
    assert "x-llmbridge-path" not in translated.headers
    assert _said(_chunks(relayed.content)) == _said(_chunks(translated.content))
    one, other = rows_alike(database, KEY_NAME, (relayed, translated))
    assert one["input_tokens"] == 11 and one["output_tokens"] == 3
    # The request log says which path served each.
    assert orjson.loads(one["facts"])["x-llmbridge-path"] == "passthrough"
    assert "x-llmbridge-path" not in orjson.loads(other["facts"] or "{}")


def test_counts_the_client_did_not_ask_for_are_taken_out(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    relayed = _post(gateway, key, _chat("m", stream=True))
    sent = orjson.loads(fake.bodies[-1])
    assert sent["stream_options"] == {"include_usage": True}  # the ledger needs them
    assert b"usage" not in relayed.content
    assert relayed.content == b"".join(stream(with_usage_nulls=False)[:4] + sse("[DONE]"))
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    translated = _post(gateway, key, _chat("translated", stream=True))
    assert _said(_chunks(relayed.content)) == _said(_chunks(translated.content))
    assert _row(database, relayed.headers["x-request-id"])["output_tokens"] == 3


def test_a_reply_sent_whole_is_the_backends_json(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
    relayed = _post(gateway, key, _chat("m"))
    assert relayed.content == orjson.dumps(REPLY)
    assert orjson.loads(fake.bodies[-1]) == _chat("m")  # not made a stream
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
    translated = _post(gateway, key, _chat("translated")).json()  # asked whole too
    assert translated["choices"][0]["message"]["content"] == "Hello there."
    assert translated["usage"]["completion_tokens"] == relayed.json()["usage"]["completion_tokens"]
    row = _row(database, relayed.headers["x-request-id"])
    assert (row["status"], row["input_tokens"], row["output_tokens"]) == (200, 11, 3)


def test_a_mapped_model_name_is_the_clients_in_every_chunk(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    relayed = _post(gateway, key, _chat("mapped", stream=True))
    assert orjson.loads(fake.bodies[-1])["model"] == "m"
    chunks = [c for c in _chunks(relayed.content) if isinstance(c, dict)]
    assert chunks and all(c["model"] == "mapped" for c in chunks)
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
    assert _post(gateway, key, _chat("mapped")).json()["model"] == "mapped"


def test_tools_relay_only_where_nothing_needs_healing(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    healed = _post(gateway, key, _chat("m", stream=True, tools=tools))
    assert "x-llmbridge-path" not in healed.headers  # a local server's arguments get healed
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    trusted = _post(gateway, key, _chat("tools-trusted", stream=True, tools=tools))
    assert trusted.headers["x-llmbridge-path"] == "passthrough"


def test_the_official_client_reads_a_relayed_reply(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    client = openai_client(gateway.url, key)
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()))
    parts = client.chat.completions.create(
        model="m", messages=[{"role": "user", "content": "hi"}], stream=True
    )
    assert "".join(c.choices[0].delta.content or "" for c in parts if c.choices) == "Hello there."
    fake.queue.append(Canned(media_type="application/json", chunks=[orjson.dumps(REPLY)]))
    whole = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "x"}])
    assert whole.choices[0].message.content == "Hello there."
    assert whole.usage is not None and whole.usage.total_tokens == 14


@pytest.mark.parametrize("model", ["m", "translated"])
def test_a_cut_stream_ends_in_the_dialects_error_and_is_billed(
    gateway: RunningServer,
    key: str,
    upstream: tuple[FakeUpstream, RunningServer],
    database: Path,
    model: str,
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="text/event-stream", chunks=stream()[:3]))
    reply = _post(gateway, key, _chat(model, stream=True))
    chunks = _chunks(reply.content)
    assert chunks[-1] == "[DONE]" and "error" in chunks[-2]
    assert _said(chunks)[0] == "Hello there."
    row = _row(database, reply.headers["x-request-id"])
    # The text streamed, counted, the same on both paths.
    assert row["status"] == 502 and row["output_tokens"] == count_text_tokens("Hello there.")


def test_the_backends_in_band_error_is_relayed_as_it_came(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    failing = stream()[:2] + sse({"error": {"message": "overloaded", "code": "busy"}})
    fake.queue.append(Canned(media_type="text/event-stream", chunks=failing))
    asked = {"stream": True, "stream_options": {"include_usage": True}}
    reply = _post(gateway, key, _chat("m", **asked))
    # As it came, and the stream's end as the translated path writes it.
    assert reply.content == b"".join(failing) + b"data: [DONE]\n\n"
    row = _row(database, reply.headers["x-request-id"])
    assert row["status"] != 200 and "overloaded" in row["error"]


@pytest.mark.parametrize("model", ["m", "translated"])
def test_a_429_before_the_first_byte_keeps_its_status_and_retry_after(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], model: str
) -> None:
    fake, _ = upstream
    body = orjson.dumps({"error": {"message": "slow down", "type": "rate_limit"}})
    for _ in range(4):  # the first try and the retries policy allows
        fake.queue.append(Canned(status=429, chunks=[body], headers={"Retry-After": "120"}))
    reply = _post(gateway, key, _chat(model, stream=True))
    fake.queue.clear()
    assert reply.status_code == 429 and reply.headers["retry-after"] == "120"
    assert "slow down" in reply.json()["error"]["message"]


def test_a_client_that_leaves_cancels_the_relayed_stream(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    slow = Canned(media_type="text/event-stream", chunks=stream() * 50, delay=scaled(0.2))
    fake.queue.append(slow)
    request_id = leave_after_first_read(
        gateway, "/v1/chat/completions", _chat("m", stream=True), bearer(key)
    )
    assert _row(database, request_id)["status"] == 499


GOLDEN = sorted(p for p in FIXTURES.glob("*.sse") if not p.stem.startswith("legacy_"))
"""The OpenAI-compatible servers' recorded quirks (tests/fixtures/streams/openai)."""
REPAIRED = {"parallel_index_zero"}
"""Quirks the translated path repairs and the relayed bytes keep (parallel calls all
numbered 0): a route whose server has them keeps ``passthrough`` off for requests with
tools, the default where arguments are not trusted."""
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]


def _read(raw: bytes) -> dict[str, Any]:
    """What a client makes of a stream: its text, reasoning (either field), tool calls by
    index, usage and whether it ended in an error; the finish reason where no tool was
    called (the translated path says ``tool_calls`` after a call whatever the backend
    said: a fix the relayed bytes do not make)."""
    text, reasoning, usage, finish, error = "", "", None, None, False
    calls: dict[int, list[str]] = {}
    for chunk in _chunks(raw):
        if not isinstance(chunk, dict):
            continue
        error |= "error" in chunk
        counts = chunk.get("usage") or {}
        if any(counts.get(k) for k in ("prompt_tokens", "completion_tokens")):
            # The counts (the translated path writes zeros where the backend sent none,
            # and only the fields it models).
            usage = {k: counts.get(k) for k in ("prompt_tokens", "completion_tokens")}
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            text += delta.get("content") or ""
            reasoning += delta.get("reasoning_content") or delta.get("reasoning") or ""
            for call in delta.get("tool_calls") or []:
                named = calls.setdefault(call.get("index", 0), ["", ""])
                named[0] += (call.get("function") or {}).get("name") or ""
                named[1] += (call.get("function") or {}).get("arguments") or ""
            finish = choice.get("finish_reason") or finish
    return {
        "text": text,
        "reasoning": reasoning,
        "calls": {i: (name, orjson.loads(args or "{}")) for i, (name, args) in calls.items()},
        "usage": usage,
        "finish": None if calls else finish,
        "error": error,
    }


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
    asked = {"stream": True, "stream_options": {"include_usage": True}, "tools": TOOLS}
    fake.queue.append(Canned(media_type="text/event-stream", chunks=[raw]))
    relayed = _post(gateway, key, _chat("golden", **asked))
    fake.queue.append(Canned(media_type="text/event-stream", chunks=[raw]))
    translated = _post(gateway, key, _chat("translated", **asked))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    whole = raw[: raw.rfind(b"\n\n") + 2]  # the frames that ended
    assert relayed.content.startswith(whole)  # byte for byte; then the gateway's error, if any
    if fixture.stem not in REPAIRED:
        assert _read(relayed.content) == _read(translated.content)
    rows_alike(
        database, KEY_NAME, (relayed, translated), ("status", "input_tokens", "output_tokens")
    )


def test_health_names_the_dialect_a_backend_relays(gateway: RunningServer, key: str) -> None:
    health = httpx.get(
        gateway.url + "/health", headers={"Authorization": f"Bearer {key}"}, timeout=scaled(30)
    ).json()
    assert health["backends"]["compat"]["passthrough"] == "openai"
