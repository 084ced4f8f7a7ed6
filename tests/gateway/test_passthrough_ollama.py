"""The pass-through path for Ollama's ``/api/chat`` (core/relay.py,
dialects/ollama/relay.py): an Ollama client in front of an Ollama backend gets the
backend's NDJSON lines as they came, and everything recorded is what the translated
path records. Each case runs the same canned backend reply through a route that relays
and one that translates (``passthrough: false``) and compares what the client got and
what the ledger holds: streamed and not, a route that maps the model's name, tools,
``num_ctx`` set by serving, the official ``ollama`` client, the recorded streams, and
the faults (a cut stream, the backend's in-band error, a 429 with ``Retry-After`` and a
500 in Ollama's error shape, a client that leaves)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.dialects.ollama.types import parse_rfc3339
from llmbridge.features.token_count import count_text_tokens
from tests.conftest import RunningServer, ollama_client, running_gateway
from tests.dialects.ollama.helpers import FIXTURES
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
    upstream_fixture,
)
from tests.upstream import Canned, FakeUpstream
from tests.waiting import scaled

MASTER = "sk-master-passthrough-ollama"
KEY_NAME = "passthrough-ollama"
CREATED = "2025-03-01T10:00:00.1Z"
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {}}}]
WEATHER = ("get_weather", {"city": "Paris", "unit": "celsius"})


def line(model: str = "m", content: str = "", **more: Any) -> bytes:
    frame = {
        "model": model,
        "created_at": CREATED,
        "message": {"role": "assistant", "content": content, **more.pop("message", {})},
        "done": False,
        **more,
    }
    return orjson.dumps(frame) + b"\n"


DONE: dict[str, Any] = {
    "done": True,
    "done_reason": "stop",
    "total_duration": 900,
    "prompt_eval_count": 11,
    "eval_count": 3,
}


def stream(model: str = "m") -> list[bytes]:
    """A backend's stream of ``Hello there.`` as Ollama sends it, a line a read."""
    return [line(model, "Hello"), line(model, " there."), line(model, **DONE)]


def reply(model: str = "m") -> bytes:
    """The same reply sent whole (``stream: false``)."""
    whole = orjson.loads(line(model, "Hello there.", **DONE))
    return orjson.dumps(whole)


upstream = upstream_fixture()
database = database_fixture("passthrough-ollama")


gateway = gateway_fixture(
    lambda url: {"ol": OllamaBackend("ol", url)},
    [
        *routes("ol", "m", tools="tools"),
        {"name": "windowed", "backend": "ol", "model": "m", "context_length": 8192},
        {
            "name": "windowed-translated",
            "backend": "ol",
            "model": "m",
            "context_length": 8192,
            "passthrough": False,
        },
        {"name": "golden", "backend": "ol", "passthrough": True},
        {
            "name": "capped",
            "backend": "ol",
            "model": "m",
            "context_length": 8192,
            "max_tokens": 100,
        },
    ],
    master=MASTER,
    # The faults below would open the circuit for the cases after them
    # (``test_the_breaker_counts_relayed_failures`` has its own gateway).
    resilience={"backoff_ms": 10, "breaker_failures": 0},
)


key = key_fixture(MASTER, KEY_NAME)


def _post(gateway: RunningServer, key: str, body: dict[str, Any]) -> httpx.Response:
    return post(gateway, "/api/chat", body, bearer(key))


def _chat(model: str, **more: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": "hi"}], **more}


def _lines(raw: bytes) -> list[dict[str, Any]]:
    return [orjson.loads(x) for x in raw.split(b"\n") if x.strip()]


def _read(raw: bytes) -> dict[str, Any]:
    """What an Ollama client makes of a stream: its text, thinking, tool calls, counts,
    done reason where no tool was called, and whether it ended in an error (an error
    line's own words aside: the translated path writes seed 000's error frame)."""
    text, thinking, counts, reason, error = "", "", None, None, False
    calls: list[tuple[str, Any]] = []
    for frame in _lines(raw):
        if "error" in frame:
            error = True
            continue
        message = frame.get("message") or {}
        text += message.get("content") or ""
        thinking += message.get("thinking") or ""
        for call in message.get("tool_calls") or []:
            calls.append((call["function"]["name"], call["function"]["arguments"]))
        if frame.get("done"):
            counts = (frame.get("prompt_eval_count"), frame.get("eval_count"))
            reason = frame.get("done_reason")
    return {
        "text": text,
        "thinking": thinking,
        "calls": calls,
        "counts": counts,
        "reason": reason,
        "error": error,
    }


def _row(database: Path, request_id: str) -> Any:
    return ledger_row(database, KEY_NAME, request_id)


def test_a_stream_is_relayed_byte_for_byte_and_recorded_as_translated(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=stream()))
    relayed = _post(gateway, key, _chat("m"))  # no ``stream``: Ollama streams
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.headers["content-type"].startswith("application/x-ndjson")
    assert relayed.content == b"".join(stream())  # nothing had to change
    assert fake.bodies[-1] == orjson.dumps(_chat("m"))  # the client's own body
    fake.queue.append(Canned(chunks=stream()))
    translated = _post(gateway, key, _chat("translated"))
    assert "x-llmbridge-path" not in translated.headers
    assert _read(relayed.content) == _read(translated.content)
    one, other = rows_alike(database, KEY_NAME, (relayed, translated))
    assert one["input_tokens"] == 11 and one["output_tokens"] == 3
    assert orjson.loads(one["facts"])["x-llmbridge-path"] == "passthrough"
    assert "x-llmbridge-path" not in orjson.loads(other["facts"] or "{}")


def test_a_reply_sent_whole_is_the_backends_json(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type="application/json", chunks=[reply()]))
    relayed = _post(gateway, key, _chat("m", stream=False))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.content == reply()
    assert orjson.loads(fake.bodies[-1]) == _chat("m", stream=False)  # not made a stream
    fake.queue.append(Canned(media_type="application/json", chunks=[reply()]))  # asked whole too
    translated = _post(gateway, key, _chat("translated", stream=False))
    assert orjson.loads(fake.bodies[-1])["stream"] is False
    assert _read(relayed.content) == _read(translated.content)
    one, _ = rows_alike(database, KEY_NAME, (relayed, translated))
    assert (one["status"], one["input_tokens"], one["output_tokens"]) == (200, 11, 3)


def test_a_mapped_model_name_is_the_clients_in_every_line(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=stream()))
    relayed = _post(gateway, key, _chat("mapped"))
    assert orjson.loads(fake.bodies[-1])["model"] == "m"
    assert relayed.content == b"".join(stream("mapped"))
    fake.queue.append(Canned(media_type="application/json", chunks=[reply()]))
    whole = _post(gateway, key, _chat("mapped", stream=False))
    assert orjson.loads(fake.bodies[-1])["model"] == "m"
    assert whole.json() == orjson.loads(reply("mapped"))


def test_num_ctx_set_by_serving_arrives_in_the_clients_body(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    asked = _chat("windowed", options={"temperature": 0.2}, keep_alive="10m")
    fake.queue.append(Canned(chunks=stream()))
    relayed = _post(gateway, key, asked)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.headers["x-llmbridge-params"] == "num_ctx=8192"
    sent = orjson.loads(fake.bodies[-1])
    assert sent == {**asked, "model": "m", "options": {"temperature": 0.2, "num_ctx": 8192}}
    fake.queue.append(Canned(chunks=stream()))
    translated = _post(gateway, key, {**asked, "model": "windowed-translated"})
    assert orjson.loads(fake.bodies[-1])["options"]["num_ctx"] == 8192  # the same window
    assert translated.headers["x-llmbridge-params"] == "num_ctx=8192"
    assert _read(relayed.content) == _read(translated.content)
    # num_ctx and anything else (num_predict clamped to the route's max_tokens): translated.
    fake.queue.append(Canned(chunks=stream()))
    capped = _post(gateway, key, _chat("capped", options={"num_predict": 5000}))
    assert "x-llmbridge-path" not in capped.headers
    assert orjson.loads(fake.bodies[-1])["options"] == {"num_predict": 100, "num_ctx": 8192}


def test_tools_relay_where_the_route_says_so(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]
    raw = (FIXTURES / "tool_calls_in_done_frame.ndjson").read_bytes()
    fake.queue.append(Canned(chunks=[raw]))
    healed = _post(gateway, key, _chat("m", tools=tools))
    assert "x-llmbridge-path" not in healed.headers  # a local model's arguments get healed
    fake.queue.append(Canned(chunks=[raw]))
    relayed = _post(gateway, key, _chat("tools", tools=tools))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert orjson.loads(fake.bodies[-1])["tools"] == tools
    assert relayed.content == raw.replace(b'"model":"qwen3-coder"', b'"model":"tools"')
    assert _read(relayed.content)["calls"] == _read(healed.content)["calls"]


def test_the_official_client_reads_a_relayed_reply(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    client = ollama_client(gateway.url, headers={"Authorization": f"Bearer {key}"})
    fake.queue.append(Canned(chunks=stream()))
    parts = list(client.chat(model="m", messages=[{"role": "user", "content": "hi"}], stream=True))
    assert "".join(p.message.content or "" for p in parts) == "Hello there."
    assert parts[-1].done and parts[-1].eval_count == 3 and parts[-1].done_reason == "stop"
    fake.queue.append(Canned(media_type="application/json", chunks=[reply()]))
    whole = client.chat(model="m", messages=[{"role": "user", "content": "x"}], stream=False)
    assert whole.message.content == "Hello there."
    assert (whole.prompt_eval_count, whole.eval_count) == (11, 3)
    raw = (FIXTURES / "tool_calls_in_done_frame.ndjson").read_bytes()
    asked = {"messages": [{"role": "user", "content": "x"}], "tools": TOOLS}
    fake.queue.append(Canned(chunks=[raw]))
    parts = list(client.chat(model="tools", stream=True, **asked))
    calls = [c for p in parts for c in p.message.tool_calls or []]
    assert [(c.function.name, c.function.arguments) for c in calls] == [WEATHER]
    done_line = raw.strip().split(b"\n")[-1]  # the call and the counts: a reply sent whole
    fake.queue.append(Canned(media_type="application/json", chunks=[done_line]))
    called = client.chat(model="tools", stream=False, **asked)
    assert called.message.tool_calls is not None
    assert [(c.function.name, c.function.arguments) for c in called.message.tool_calls] == [WEATHER]


@pytest.mark.parametrize("model", ["m", "translated"])
def test_a_cut_stream_ends_in_the_dialects_error_and_is_billed(
    gateway: RunningServer,
    key: str,
    upstream: tuple[FakeUpstream, RunningServer],
    database: Path,
    model: str,
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(chunks=stream()[:2]))
    got = _post(gateway, key, _chat(model))
    frames = _lines(got.content)
    last = frames[-1]
    assert last["done"] is True and last["done_reason"] == "error"
    assert last["model"] == model and "done frame" in last["error"]
    assert last["message"] == {"role": "assistant", "content": f"Error: {last['error']}"}
    # Dated at the stream's start on both paths, as the translated path dates every line.
    assert parse_rfc3339(last["created_at"]) == parse_rfc3339(CREATED)
    assert _read(got.content)["text"] == "Hello there."
    row = _row(database, got.headers["x-request-id"])
    # The text streamed, counted, the same on both paths.
    assert row["status"] == 502 and row["output_tokens"] == count_text_tokens("Hello there.")


def test_the_backends_in_band_error_is_relayed_as_it_came(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    failing = [*stream()[:1], b'{"error":"an error was encountered: unexpected EOF"}\n']
    fake.queue.append(Canned(chunks=failing))
    got = _post(gateway, key, _chat("m"))
    assert got.content == b"".join(failing)
    row = _row(database, got.headers["x-request-id"])
    assert row["status"] != 200 and "unexpected EOF" in row["error"]
    fake.queue.append(Canned(chunks=failing))
    translated = _post(gateway, key, _chat("translated"))
    assert row["status"] == _row(database, translated.headers["x-request-id"])["status"]


def test_an_error_as_the_first_line_is_an_error_before_the_first_byte(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    answers: dict[str, httpx.Response] = {}
    for model in ("m", "translated"):
        for _ in range(4):  # the first try and the retries policy allows
            fake.queue.append(Canned(chunks=[b'{"error":"model runner crashed"}\n']))
        answers[model] = _post(gateway, key, _chat(model))
        fake.queue.clear()
    relayed, translated = answers["m"], answers["translated"]
    assert relayed.status_code == translated.status_code != 200
    assert relayed.json() == translated.json() == {"error": "model runner crashed"}


@pytest.mark.parametrize("status", [429, 500])
def test_an_error_status_before_the_first_byte_keeps_ollamas_shape(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], status: int
) -> None:
    fake, _ = upstream
    answers: dict[str, httpx.Response] = {}
    for model in ("m", "translated"):
        for _ in range(4):  # the first try and the retries policy allows
            fake.queue.append(
                Canned(
                    status=status, chunks=[b'{"error":"slow down"}'], headers={"Retry-After": "120"}
                )
            )
        answers[model] = _post(gateway, key, _chat(model))
        fake.queue.clear()
    relayed, translated = answers["m"], answers["translated"]
    assert relayed.status_code == translated.status_code
    assert relayed.json() == translated.json()
    assert "slow down" in relayed.json()["error"] and list(relayed.json()) == ["error"]
    if status == 429:
        assert relayed.status_code == 429 and relayed.headers["retry-after"] == "120"


def test_the_breaker_counts_relayed_failures(
    upstream: tuple[FakeUpstream, RunningServer],
) -> None:
    fake, up = upstream
    resilience = {"retries": 0, "breaker_failures": 1, "breaker_reset_s": 600}
    with running_gateway(
        {"ol": OllamaBackend("ol", up.url)},
        models=[{"name": "m", "backend": "ol"}],
        resilience=resilience,
    ) as gateway:
        fake.queue.append(Canned(chunks=stream()))
        served = httpx.post(gateway.url + "/api/chat", json=_chat("m"), timeout=scaled(30))
        assert served.headers["x-llmbridge-path"] == "passthrough"
        fake.queue.append(Canned(status=500, chunks=[b'{"error":"boom"}']))
        failed = httpx.post(gateway.url + "/api/chat", json=_chat("m"), timeout=scaled(30))
        sent = len(fake.bodies)
        skipped = httpx.post(gateway.url + "/api/chat", json=_chat("m"), timeout=scaled(30))
    assert failed.status_code >= 500 and "boom" in failed.json()["error"]
    assert skipped.status_code == 503 and len(fake.bodies) == sent  # the circuit is open
    assert list(skipped.json()) == ["error"]


def test_a_client_that_leaves_cancels_the_relayed_stream(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    slow = Canned(chunks=stream()[:2] * 50, delay=scaled(0.2))
    fake.queue.append(slow)
    request_id = leave_after_first_read(gateway, "/api/chat", _chat("m"), bearer(key))
    assert _row(database, request_id)["status"] == 499


GOLDEN = sorted(FIXTURES.glob("*.ndjson"))
"""Ollama's recorded streams (tests/fixtures/streams/ollama)."""


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
    fake.queue.append(Canned(chunks=[raw]))
    relayed = _post(gateway, key, _chat("golden", tools=TOOLS))
    fake.queue.append(Canned(chunks=[raw]))
    translated = _post(gateway, key, _chat("translated", tools=TOOLS))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    error = raw.find(b'{"error"')
    # Byte for byte up to the done or error line; then the gateway's error, if any.
    whole = raw[: raw.index(b"\n", error) + 1] if error >= 0 else raw
    assert relayed.content.startswith(whole)
    assert _read(relayed.content) == _read(translated.content)
    one, other = (_row(database, r.headers["x-request-id"]) for r in (relayed, translated))
    for field in ("status", "input_tokens", "output_tokens"):
        assert one[field] == other[field], field


def test_health_names_the_dialect_a_backend_relays(gateway: RunningServer, key: str) -> None:
    health = httpx.get(
        gateway.url + "/health", headers={"Authorization": f"Bearer {key}"}, timeout=scaled(30)
    ).json()
    assert health["backends"]["ol"]["passthrough"] == "ollama"
