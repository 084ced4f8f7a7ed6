"""The pass-through path for Anthropic Messages (core/relay.py, dialects/anthropic/relay.py):
an Anthropic client in front of an Anthropic backend gets the backend's bytes as they
came, and everything recorded is what the translated path records. Each case runs the
same canned backend reply through a route that relays and one that translates
(``passthrough: false``) and compares what the client got and what the ledger holds
(cached tokens among the counts): streamed and not, a route that maps the model's name,
tools, a body the translation must rewrite, the official ``anthropic`` client, the
recorded streams of tests/fixtures/streams/anthropic, Claude Code's captured request, and
the faults (a failure retried, a cut stream, the backend's in-band error before and after
``message_start``, a 429 with ``Retry-After``, a client that leaves)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from llmbridge.backends.anthropic import ANTHROPIC_VERSION, AnthropicBackend
from llmbridge.features.token_count import count_text_tokens
from tests.conftest import RunningServer, anthropic_client
from tests.dialects.anthropic.sse import FIXTURES
from tests.gateway.passthrough import (
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

MASTER = "sk-master-passthrough-anthropic"
KEY_NAME = "passthrough-anthropic"
START_USAGE = {
    "input_tokens": 20,
    "cache_creation_input_tokens": 3,
    "cache_read_input_tokens": 5,
    "output_tokens": 1,
}
SSE = "text/event-stream"
REQUESTS = Path(__file__).parents[1] / "fixtures" / "requests"
JSON = "application/json"


def frame(kind: str, **data: Any) -> bytes:
    return sse_frame({"type": kind, **data}, kind)


def message(model: str = "claude-m", **more: Any) -> dict[str, Any]:
    return {
        "id": "msg_01relay",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": START_USAGE,
        **more,
    }


def stream(model: str = "claude-m") -> list[bytes]:
    """A backend's stream of ``Hello there.`` as Anthropic sends it, one frame a read."""
    return [
        frame("message_start", message=message(model)),
        frame("ping"),
        frame("content_block_start", index=0, content_block={"type": "text", "text": ""}),
        frame("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hello"}),
        frame("content_block_delta", index=0, delta={"type": "text_delta", "text": " there."}),
        frame("content_block_stop", index=0),
        frame(
            "message_delta",
            delta={"stop_reason": "end_turn", "stop_sequence": None},
            usage={"output_tokens": 3},
        ),
        frame("message_stop"),
    ]


def reply(model: str = "claude-m") -> dict[str, Any]:
    return message(
        model,
        content=[{"type": "text", "text": "Hello there."}],
        stop_reason="end_turn",
        usage={**START_USAGE, "output_tokens": 3},
    )


upstream = upstream_fixture("/v1/messages")
database = database_fixture("passthrough-anthropic")


# A model that thinks (the fake API lists none), so thinking is not dropped.
gateway = gateway_fixture(
    lambda url: {"claude": AnthropicBackend("claude", url, api_key="sk-upstream")},
    [
        *routes("claude", "claude-m", thinking=True),
        {"name": "golden", "backend": "claude", "passthrough": True},
    ],
    master=MASTER,
)


key = key_fixture(MASTER, KEY_NAME)


def _headers(key: str, **more: str) -> dict[str, str]:
    return {
        "x-api-key": key,
        "anthropic-version": "2023-06-01",
        "content-type": "application/json",
        **more,
    }


def _post(gateway: RunningServer, key: str, body: dict[str, Any], **headers: str) -> httpx.Response:
    return post(gateway, "/v1/messages", orjson.dumps(body), _headers(key, **headers))


def _ask(model: str, **more: Any) -> dict[str, Any]:
    return {
        "model": model,
        "max_tokens": 64,
        "messages": [{"role": "user", "content": "hi"}],
        **more,
    }


def _events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    """A stream's events: each frame's name and data, parsed."""
    out = []
    for chunk in raw.split(b"\n\n"):
        lines = chunk.split(b"\n")
        name = next((line[7:].decode() for line in lines if line.startswith(b"event: ")), "")
        data = b"".join(line[6:] for line in lines if line.startswith(b"data: "))
        if data:
            out.append((name, orjson.loads(data)))
    return out


def _read(raw: bytes) -> dict[str, Any]:
    """What a client makes of a stream: its text, thinking, tool input by block, stop
    reason, final usage (message_start's, updated by message_delta's, as the SDK
    does), model, and the error it ended in."""
    text, thinking, stop, model, error = "", "", None, None, None
    tools: dict[int, list[str]] = {}
    usage: dict[str, Any] = {}
    for name, data in _events(raw):
        if name == "message_start":
            model = data["message"]["model"]
            usage = {k: v for k, v in data["message"]["usage"].items() if v is not None}
        elif name == "content_block_start" and data["content_block"]["type"] == "tool_use":
            tools[data["index"]] = [data["content_block"]["name"], ""]
        elif name == "content_block_delta":
            delta = data["delta"]
            text += delta.get("text", "")
            thinking += delta.get("thinking", "")
            if delta["type"] == "input_json_delta":
                tools[data["index"]][1] += delta["partial_json"]
        elif name == "message_delta":
            stop = data["delta"]["stop_reason"]
            usage.update({k: v for k, v in data["usage"].items() if v is not None})
        elif name == "error":
            error = data["error"]["type"]
    counts = ("input_tokens", "output_tokens", "cache_read_input_tokens")
    return {
        "text": text,
        "thinking": thinking,
        "tools": [(n, orjson.loads(args or "{}")) for n, args in tools.values()],
        "stop": stop,
        # The counts once the reply ended (message_start's output count is a
        # placeholder, 0 on the translated path, the backend's own when relayed).
        "usage": {k: usage.get(k) or 0 for k in counts} if stop is not None else None,
        "model": model,
        "error": error,
    }


def _row(database: Path, request_id: str) -> Any:
    return ledger_row(database, KEY_NAME, request_id)


RECORDED = (
    "status",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "streamed",
    "cost_usd",
    "backend",
    "served_model",
    "endpoint",
    "dialect",
    "retries",
    "fallbacks",
)


def _same_rows(database: Path, *replies: httpx.Response, fields: tuple[str, ...] = RECORDED) -> Any:
    return rows_alike(database, KEY_NAME, replies, fields)[0]


def test_a_stream_is_relayed_byte_for_byte_and_recorded_as_translated(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    beta = {"anthropic-beta": "interleaved-thinking-2025-05-14"}
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    relayed = _post(gateway, key, _ask("claude-m", stream=True), **beta)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert float(relayed.headers["x-llmbridge-overhead-ms"]) >= 0  # measured alike
    assert relayed.content == b"".join(stream())  # nothing had to change
    assert fake.bodies[-1] == orjson.dumps(_ask("claude-m", stream=True))  # the client's own
    relayed_headers = fake.headers[-1]
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    translated = _post(gateway, key, _ask("translated", stream=True), **beta)
    assert "x-llmbridge-path" not in translated.headers
    translated_headers = fake.headers[-1]
    # The headers the backend sends on both paths: its version, its key, the betas.
    for name in ("anthropic-version", "x-api-key", "anthropic-beta"):
        assert relayed_headers.get(name) == translated_headers.get(name), name
    assert relayed_headers["anthropic-version"] == ANTHROPIC_VERSION
    assert relayed_headers["x-api-key"] == "sk-upstream"
    assert relayed_headers["anthropic-beta"] == "interleaved-thinking-2025-05-14"
    assert _read(relayed.content) == _read(translated.content) | {"model": "claude-m"}
    row = _same_rows(database, relayed, translated)
    # Anthropic's uncached input plus its cache reads and writes, as the core counts them.
    assert (row["input_tokens"], row["output_tokens"], row["cached_tokens"]) == (28, 3, 5)
    assert row["ttft_ms"] is not None  # read from the frames as they passed
    assert orjson.loads(row["facts"])["x-llmbridge-path"] == "passthrough"


def test_a_reply_sent_whole_is_the_backends_json(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type=JSON, chunks=[orjson.dumps(reply())]))
    relayed = _post(gateway, key, _ask("claude-m"))
    assert relayed.content == orjson.dumps(reply())
    assert orjson.loads(fake.bodies[-1]) == _ask("claude-m")  # not made a stream
    fake.queue.append(Canned(media_type=JSON, chunks=[orjson.dumps(reply())]))
    translated = _post(gateway, key, _ask("translated"))
    assert "stream" not in orjson.loads(fake.bodies[-1])  # asked for whole there too
    said, whole = relayed.json(), translated.json()
    assert said["content"] == whole["content"] and said["stop_reason"] == whole["stop_reason"]
    assert said["usage"] == {**START_USAGE, "output_tokens": 3}
    for count in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        assert said["usage"][count] == whole["usage"][count], count
    row = _same_rows(database, relayed, translated)
    assert (row["status"], row["input_tokens"], row["output_tokens"]) == (200, 28, 3)


def test_a_mapped_model_name_is_the_clients(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    relayed = _post(gateway, key, _ask("mapped", stream=True))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert orjson.loads(fake.bodies[-1])["model"] == "claude-m"
    assert _read(relayed.content)["model"] == "mapped"
    # Only the name changed: every other byte is the backend's.
    assert relayed.content == b"".join(stream()).replace(b'"claude-m"', b'"mapped"')
    fake.queue.append(Canned(media_type=JSON, chunks=[orjson.dumps(reply())]))
    assert _post(gateway, key, _ask("mapped")).json()["model"] == "mapped"


def test_a_discovery_id_is_the_gateways_name_on_both_paths(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type=JSON, chunks=[orjson.dumps(reply())]))
    relayed = _post(gateway, key, _ask("anthropic/mapped"))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert orjson.loads(fake.bodies[-1])["model"] == "claude-m"
    assert relayed.json()["model"] == "mapped"


TOOLS = [{"name": "get_weather", "input_schema": {"type": "object"}}]


def test_tools_relay_only_where_nothing_needs_healing(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    healed = _post(gateway, key, _ask("claude-m", stream=True, tools=TOOLS))
    assert "x-llmbridge-path" not in healed.headers  # a server of unknown arguments
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    trusted = _post(gateway, key, _ask("tools-trusted", stream=True, tools=TOOLS))
    assert trusted.headers["x-llmbridge-path"] == "passthrough"
    assert orjson.loads(fake.bodies[-1])["tools"] == TOOLS


def test_thinking_with_a_budget_relays(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    """The effort serving derives from a budget (for backends that take levels) is no
    change to the body, which says the budget itself."""
    fake, _ = upstream
    asked = _ask(
        "claude-m",
        stream=True,
        max_tokens=4096,
        thinking={"type": "enabled", "budget_tokens": 1024},
    )
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    relayed = _post(gateway, key, asked)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert fake.bodies[-1] == orjson.dumps(asked)


UNSIGNED_HISTORY = [
    {"role": "user", "content": "first"},
    {
        "role": "assistant",
        "content": [
            {"type": "thinking", "thinking": "a local model's", "signature": ""},
            {"type": "text", "text": "Done."},
        ],
    },
    {"role": "user", "content": "again"},
]


@pytest.mark.parametrize(
    "more",
    [
        {"messages": UNSIGNED_HISTORY},  # the unsigned block is dropped
        {"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]},
        {"thinking": {"type": "enabled", "budget_tokens": 2048}},  # not under max_tokens
    ],
    ids=["unsigned-thinking", "turns-merged", "thinking-budget"],
)
def test_a_body_the_translation_rewrites_is_translated(
    gateway: RunningServer,
    key: str,
    upstream: tuple[FakeUpstream, RunningServer],
    more: dict[str, Any],
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    answered = _post(gateway, key, _ask("claude-m", stream=True, **more))
    assert answered.status_code == 200
    assert "x-llmbridge-path" not in answered.headers
    assert fake.bodies[-1] != orjson.dumps(_ask("claude-m", stream=True, **more))


def test_claude_codes_request_goes_to_the_backend_as_it_sent_it(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    """Claude Code 2.1.332's captured request (adaptive thinking, a system turn with
    per-turn settings, deferred tools, context editing, cache breakpoints, 128000
    ``max_tokens``): its bytes reach the backend as they came, and the row is the
    translated path's. Its tools relay on a route that says ``passthrough: true``."""
    fake, _ = upstream
    captured = REQUESTS / "claude_code_2_1_332_messages.json"
    body = {**orjson.loads(captured.read_bytes()), "model": "tools-trusted"}
    beta = {"anthropic-beta": "per-turn-control-2026-07-01,context-management-2025-06-27"}
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    relayed = _post(gateway, key, body, **beta)
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert fake.bodies[-1] == orjson.dumps({**body, "model": "claude-m"})
    assert fake.headers[-1]["anthropic-beta"] == beta["anthropic-beta"]
    fake.queue.append(Canned(media_type=SSE, chunks=stream()))
    translated = _post(gateway, key, {**body, "model": "translated"}, **beta)
    assert _read(relayed.content) == _read(translated.content) | {"model": "tools-trusted"}
    _same_rows(database, relayed, translated)


def test_the_official_client_reads_a_relayed_reply(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer]
) -> None:
    fake, _ = upstream
    client = anthropic_client(gateway.url, key)
    finals = []
    for model in ("claude-m", "translated"):
        fake.queue.append(Canned(media_type=SSE, chunks=stream()))
        with client.messages.stream(
            model=model, max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as parts:
            assert "".join(parts.text_stream) == "Hello there."
            finals.append(parts.get_final_message())
    relayed, translated = finals
    assert relayed.content[0].text == translated.content[0].text == "Hello there."
    assert relayed.stop_reason == translated.stop_reason == "end_turn"
    for count in ("input_tokens", "output_tokens", "cache_read_input_tokens"):
        assert getattr(relayed.usage, count) == getattr(translated.usage, count), count
    fake.queue.append(Canned(media_type=JSON, chunks=[orjson.dumps(reply())]))
    whole = client.messages.create(
        model="claude-m", max_tokens=64, messages=[{"role": "user", "content": "x"}]
    )
    assert whole.content[0].text == "Hello there." and whole.model == "claude-m"
    assert (whole.usage.input_tokens, whole.usage.cache_creation_input_tokens) == (20, 3)


@pytest.mark.parametrize("model", ["claude-m", "translated"])
def test_a_cut_stream_ends_in_the_dialects_error_and_is_billed(
    gateway: RunningServer,
    key: str,
    upstream: tuple[FakeUpstream, RunningServer],
    database: Path,
    model: str,
) -> None:
    fake, _ = upstream
    fake.queue.append(Canned(media_type=SSE, chunks=stream()[:5]))
    answered = _post(gateway, key, _ask(model, stream=True))
    events = _events(answered.content)
    assert events[-1] == (
        "error",
        {
            "type": "error",
            "error": {
                "type": "api_error",
                "message": "the Anthropic stream ended before message_stop",
            },
        },
    )
    assert _read(answered.content)["text"] == "Hello there."
    row = _row(database, answered.headers["x-request-id"])
    # The text streamed, counted, the same on both paths.
    assert row["status"] == 502 and row["output_tokens"] == count_text_tokens("Hello there.")


def test_the_backends_in_band_error_is_relayed_as_it_came(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    overloaded = frame("error", error={"type": "overloaded_error", "message": "Overloaded"})
    failing = [*stream()[:4], overloaded]
    replies = []
    for model in ("claude-m", "translated"):
        fake.queue.append(Canned(media_type=SSE, chunks=failing))
        replies.append(_post(gateway, key, _ask(model, stream=True)))
    relayed, translated = replies
    assert relayed.content == b"".join(failing)
    assert _events(relayed.content)[-1] == _events(translated.content)[-1]
    row = _same_rows(database, relayed, translated)
    assert row["status"] == 503 and "Overloaded" in row["error"]


def test_a_failure_before_the_first_byte_is_retried_with_the_same_body(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    overloaded = orjson.dumps(
        {"type": "error", "error": {"type": "overloaded_error", "message": "busy"}}
    )
    replies = []
    for model in ("claude-m", "translated"):
        fake.queue.append(Canned(status=529, chunks=[overloaded], media_type=JSON))
        fake.queue.append(Canned(media_type=SSE, chunks=stream()))
        replies.append(_post(gateway, key, _ask(model, stream=True)))
        if model == "claude-m":
            assert fake.bodies[-2] == fake.bodies[-1] == orjson.dumps(_ask(model, stream=True))
    relayed, translated = replies
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    assert relayed.content == b"".join(stream())
    row = _same_rows(database, relayed, translated)
    assert (row["status"], row["retries"]) == (200, 1)


@pytest.mark.parametrize("model", ["claude-m", "translated"])
def test_an_error_event_before_message_start_is_an_http_error(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], model: str
) -> None:
    fake, _ = upstream
    overloaded = frame("error", error={"type": "overloaded_error", "message": "Overloaded"})
    for _ in range(4):  # the first try and the retries policy allows
        fake.queue.append(Canned(media_type=SSE, chunks=[frame("ping"), overloaded]))
    answered = _post(gateway, key, _ask(model, stream=True))
    fake.queue.clear()
    assert answered.status_code == 503
    error = answered.json()
    assert error["type"] == "error" and error["error"]["type"] == "overloaded_error"


@pytest.mark.parametrize("model", ["claude-m", "translated"])
def test_a_429_before_the_first_byte_keeps_its_status_and_retry_after(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], model: str
) -> None:
    fake, _ = upstream
    body = orjson.dumps(
        {"type": "error", "error": {"type": "rate_limit_error", "message": "slow down"}}
    )
    for _ in range(4):  # the first try and the retries policy allows
        fake.queue.append(Canned(status=429, chunks=[body], headers={"Retry-After": "120"}))
    answered = _post(gateway, key, _ask(model, stream=True))
    fake.queue.clear()
    assert answered.status_code == 429 and answered.headers["retry-after"] == "120"
    error = answered.json()
    assert error["type"] == "error" and error["error"]["type"] == "rate_limit_error"
    assert "slow down" in error["error"]["message"]


def test_a_client_that_leaves_cancels_the_relayed_stream(
    gateway: RunningServer, key: str, upstream: tuple[FakeUpstream, RunningServer], database: Path
) -> None:
    fake, _ = upstream
    deltas = [stream()[3]] * 200
    slow = Canned(media_type=SSE, chunks=[*stream()[:3], *deltas], delay=scaled(0.2))
    fake.queue.append(slow)
    request_id = leave_after_first_read(
        gateway, "/v1/messages", orjson.dumps(_ask("claude-m", stream=True)), _headers(key)
    )
    assert _row(database, request_id)["status"] == 499


GOLDEN = sorted(FIXTURES.glob("*.sse"))
"""Anthropic's recorded streams (tests/fixtures/streams/anthropic): pings between
events, thinking with its signature, redacted thinking, a tool call, an error mid-stream,
a stream cut short."""


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
    asked = {"stream": True, "tools": TOOLS}
    fake.queue.append(Canned(media_type=SSE, chunks=[raw]))
    relayed = _post(gateway, key, _ask("golden", **asked))
    fake.queue.append(Canned(media_type=SSE, chunks=[raw]))
    translated = _post(gateway, key, _ask("translated", **asked))
    assert relayed.headers["x-llmbridge-path"] == "passthrough"
    whole = raw[: raw.rfind(b"\n\n") + 2]  # the frames that ended
    assert relayed.content.startswith(whole)  # byte for byte; then the gateway's error, if any
    model = _read(relayed.content)["model"]
    assert _read(relayed.content) == _read(translated.content) | {"model": model}
    # The golden route serves the name asked for; the translated one, claude-m.
    fields = tuple(field for field in RECORDED if field != "served_model")
    _same_rows(database, relayed, translated, fields=fields)


def test_health_names_the_dialect_a_backend_relays(gateway: RunningServer, key: str) -> None:
    health = httpx.get(
        gateway.url + "/health", headers={"x-api-key": key}, timeout=scaled(30)
    ).json()
    assert health["backends"]["claude"]["passthrough"] == "anthropic"
