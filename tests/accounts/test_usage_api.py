"""The usage ledger through a real gateway: official clients, every request recorded
once, ``GET /admin/usage`` and ``llmbridge usage``, on SQLite and PostgreSQL.

A scripted backend gives each reply exact token counts; the test sums the ``usage``
the official clients read from their replies and compares it with what the ledger
reports. Failures (before the first byte, mid-stream), an unknown model and a
client that hangs up mid-stream are each recorded once, with their status.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from click.testing import CliRunner
from sqlalchemy import select

from llmbridge.accounts.ledger import USAGE
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.errors import BackendError
from llmbridge.core.response import Usage
from llmbridge.store import make_engine
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)

MASTER = "sk-master-usage"
STATIC = "sk-static-usage"
PRICES = {"priced-*": {"input": 2.0, "output": 8.0, "cached_input": 0.5, "reasoning": 16.0}}


@pytest.fixture
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("priced-model", "free-model"))


@pytest.fixture
def gateway(scripted: ScriptedBackend, db_url: str) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": scripted},
        server={"api_keys": [STATIC], "master_key": MASTER},
        agent={"database": db_url, "summaries": False},
        prices=PRICES,
        models=[{"name": "priced-*", "backend": "scripted"}],
    ) as server:
        yield server


def _admin(server: RunningServer, method: str, path: str, **kwargs: Any) -> Any:
    response = httpx.request(
        method,
        server.url + path,
        headers={"Authorization": f"Bearer {MASTER}"},
        timeout=10,
        **kwargs,
    )
    assert response.status_code < 300, response.text
    return response.json()


def _usage(server: RunningServer, group_by: str, **params: str) -> list[dict[str, Any]]:
    body = _admin(server, "GET", "/admin/usage", params={"group_by": group_by, **params})
    assert body["object"] == "list" and body["group_by"] == group_by
    rows: list[dict[str, Any]] = body["data"]
    return rows


def _recorded(server: RunningServer, requests: int) -> list[dict[str, Any]]:
    """``/admin/usage?group_by=model`` once ``requests`` rows are written (the ledger
    writes every second): a bounded poll."""
    waited = threading.Event()
    for _ in range(100):
        rows = _usage(server, "model")
        if sum(r["requests"] for r in rows) >= requests:
            return rows
        waited.wait(0.1)
    raise AssertionError(f"the ledger never reached {requests} requests: {rows}")


def _rows_by_request(db_url: str) -> dict[str, Any]:
    import asyncio

    async def read() -> dict[str, Any]:
        engine = make_engine(db_url)
        try:
            async with engine.connect() as conn:
                rows = (await conn.execute(select(USAGE))).mappings().all()
        finally:
            await engine.dispose()
        return {row["request_id"]: dict(row) for row in rows}

    return asyncio.run(read())


def _scripts(backend: ScriptedBackend, *usages: Usage) -> None:
    backend.enqueue(*(Script(text=["Hello", " there."], usage=u) for u in usages))


def test_totals_equal_the_replies_usage(
    gateway: RunningServer, scripted: ScriptedBackend, db_url: str
) -> None:
    created = _admin(gateway, "POST", "/admin/keys", json={"name": "team-a"})
    team_key = created["key"]
    usages = [
        Usage(input_tokens=11, output_tokens=7, reasoning_tokens=3, cache_read_input_tokens=4),
        Usage(input_tokens=13, output_tokens=5, reasoning_tokens=2, cache_read_input_tokens=6),
        Usage(input_tokens=17, output_tokens=9),
        Usage(input_tokens=19, output_tokens=2),
        Usage(input_tokens=23, output_tokens=4),
        Usage(input_tokens=29, output_tokens=6),
    ]
    _scripts(scripted, *usages)
    seen = {"input": 0, "output": 0, "reasoning": 0, "cached": 0}

    def saw(input_: int, output: int, reasoning: int = 0, cached: int = 0) -> None:
        for name, value in zip(seen, (input_, output, reasoning, cached), strict=True):
            seen[name] += value

    # OpenAI, with the database key: not streamed, then streamed with usage.
    client = openai_client(gateway.url, api_key=team_key)
    messages = [{"role": "user", "content": "hi"}]
    reply = client.chat.completions.create(model="priced-model", messages=messages)
    u = reply.usage
    saw(
        u.prompt_tokens,
        u.completion_tokens,
        u.completion_tokens_details.reasoning_tokens,
        u.prompt_tokens_details.cached_tokens,
    )
    chunks = list(
        client.chat.completions.create(
            model="priced-model",
            messages=messages,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    u = next(c.usage for c in chunks if c.usage is not None)
    saw(
        u.prompt_tokens,
        u.completion_tokens,
        u.completion_tokens_details.reasoning_tokens,
        u.prompt_tokens_details.cached_tokens,
    )
    # Anthropic, with the static key.
    anthropic = anthropic_client(gateway.url, api_key=STATIC)
    message = anthropic.messages.create(
        model="free-model", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    )
    saw(message.usage.input_tokens, message.usage.output_tokens)
    with anthropic.messages.stream(
        model="free-model", max_tokens=50, messages=[{"role": "user", "content": "hi"}]
    ) as stream:
        final = stream.get_final_message()
    saw(final.usage.input_tokens, final.usage.output_tokens)
    # Ollama, with the database key: not streamed, then streamed.
    ollama = ollama_client(gateway.url, headers={"Authorization": f"Bearer {team_key}"})
    answer = ollama.chat(model="free-model", messages=messages)
    saw(answer.prompt_eval_count, answer.eval_count)
    last = list(ollama.chat(model="free-model", messages=messages, stream=True))[-1]
    saw(last.prompt_eval_count, last.eval_count)
    # An embedding: its input tokens.
    embedded = client.embeddings.create(model="free-model", input=["one two three"])
    saw(embedded.usage.prompt_tokens, 0)

    rows = _recorded(gateway, 7)
    total = {
        "input": sum(r["input_tokens"] for r in rows),
        "output": sum(r["output_tokens"] for r in rows),
        "reasoning": sum(r["reasoning_tokens"] for r in rows),
        "cached": sum(r["cached_tokens"] for r in rows),
    }
    assert total == seen
    assert sum(r["requests"] for r in rows) == 7
    assert sum(r["errors"] for r in rows) == 0

    by_model = {r["group"]: r for r in rows}
    priced = by_model["priced-model"]
    assert (priced["requests"], priced["priced"]) == (2, 2)
    # (11-4)*2 + 4*0.5 + (7-3)*8 + 3*16, and the same for the second reply, per million.
    expected = ((7 * 2 + 4 * 0.5 + 4 * 8 + 3 * 16) + (7 * 2 + 6 * 0.5 + 3 * 8 + 2 * 16)) / 1e6
    assert priced["cost_usd"] == pytest.approx(expected)
    assert by_model["free-model"]["priced"] == 0  # no price: unknown, not free

    by_key = {r["group"]: r for r in _usage(gateway, "key")}
    assert by_key["team-a"]["requests"] == 5  # 2 OpenAI, 2 Ollama, the embedding
    static = [name for name in by_key if name and name.startswith("static:")]
    assert len(static) == 1 and by_key[static[0]]["requests"] == 2
    assert by_key["team-a"]["cost_usd"] == pytest.approx(expected)
    # The key's spend, as the admin API shows it, is what the ledger charged.
    (team,) = [k for k in _admin(gateway, "GET", "/admin/keys")["data"] if k["name"] == "team-a"]
    assert team["spent_usd"] == pytest.approx(expected)

    (today,) = _usage(gateway, "day")
    assert today["requests"] == 7
    assert _usage(gateway, "day", since="2999-01-01") == []

    # Every row names the deployment, the backend kind, the endpoint and the replica.
    recorded = _rows_by_request(db_url)
    assert len(recorded) == 7
    assert {r["deployment"] for r in recorded.values()} == {"scripted"}
    assert {r["backend"] for r in recorded.values()} == {"scripted"}
    assert {r["endpoint"] for r in recorded.values()} == {
        "/v1/chat/completions",
        "/v1/messages",
        "/api/chat",
        "/v1/embeddings",
    }
    assert {r["streamed"] for r in recorded.values()} == {True, False}
    assert all(r["replica"] and ":" in r["replica"] for r in recorded.values())
    assert all(r["latency_ms"] is not None for r in recorded.values())
    # Nothing was dropped, and /metrics says so.
    metrics = httpx.get(
        gateway.url + "/metrics", headers={"Authorization": f"Bearer {STATIC}"}, timeout=10
    )
    assert "llmbridge_usage_records_dropped_total 0.0" in metrics.text


def test_failures_and_hang_ups_are_recorded_once(scripted: ScriptedBackend, db_url: str) -> None:
    with running_gateway(
        {"scripted": scripted},
        server={"api_keys": [STATIC]},  # the ledger is on with auth
        agent={"database": db_url, "summaries": False},
        restrict_models=True,
        models=[{"name": "known", "backend": "scripted"}],
        resilience={"retries": 0},
    ) as gateway:
        client = openai_client(gateway.url, api_key=STATIC)
        messages = [{"role": "user", "content": "hi"}]
        ids: dict[str, str] = {}

        # Before the first byte: the backend fails.
        scripted.enqueue(Script(fail_before=BackendError("down", status_code=502)))
        raw = client.chat.completions.with_raw_response
        with pytest.raises(openai.APIStatusError) as failed:
            raw.create(model="known", messages=messages)
        assert failed.value.status_code == 502
        # An unknown model: refused before any backend is called.
        with pytest.raises(openai.NotFoundError):
            raw.create(model="unknown", messages=messages)
        # Mid-stream: an in-band error after the first chunk.
        scripted.enqueue(
            Script(
                text=["a", "b", "c"],
                fail_after=1,
                fail_error=BackendError("broke", status_code=502),
            )
        )
        response = httpx.post(
            gateway.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {STATIC}"},
            json={"model": "known", "messages": messages, "stream": True},
            timeout=10,
        )
        assert response.status_code == 200 and "broke" in response.text
        ids["mid-stream"] = response.headers["x-request-id"]
        # A client that hangs up after the first chunk of a slow stream.
        scripted.enqueue(Script(text=["x"] * 50, chunk_delay=0.05))
        cancelled = scripted.cancelled
        with httpx.stream(
            "POST",
            gateway.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {STATIC}"},
            json={"model": "known", "messages": messages, "stream": True},
            timeout=10,
        ) as stream:
            ids["hang-up"] = stream.headers["x-request-id"]
            next(stream.iter_bytes())
        for _ in range(100):
            if scripted.cancelled > cancelled:
                break
            threading.Event().wait(0.05)
        assert scripted.cancelled == cancelled + 1
        # And one that succeeds.
        scripted.enqueue(Script(usage=Usage(input_tokens=3, output_tokens=2)))
        ok = raw.create(model="known", messages=messages)
        ids["ok"] = ok.headers["x-request-id"]
    # The gateway has shut down: whatever was buffered is written.
    recorded = _rows_by_request(db_url)
    statuses = sorted(r["status"] for r in recorded.values())
    assert statuses == [200, 404, 499, 502, 502]
    assert recorded[ids["mid-stream"]]["status"] == 502
    assert recorded[ids["mid-stream"]]["streamed"] is True
    assert recorded[ids["hang-up"]]["status"] == 499
    assert recorded[ids["hang-up"]]["ttft_ms"] is not None
    assert recorded[ids["ok"]]["input_tokens"] == 3
    unknown = [r for r in recorded.values() if r["status"] == 404]
    assert unknown[0]["model"] == "unknown" and unknown[0]["deployment"] is None

    # The same ledger through the CLI.
    runner = CliRunner()
    result = runner.invoke(cli, ["usage", "--db", db_url, "--group-by", "model", "--json"])
    assert result.exit_code == 0, result.output
    by_model = {r["group"]: r for r in json.loads(result.output)}
    assert by_model["known"]["requests"] == 4 and by_model["known"]["errors"] == 3  # 499 too
    assert by_model["unknown"]["errors"] == 1
    table = runner.invoke(cli, ["usage", "--db", db_url, "--group-by", "key"])
    assert table.exit_code == 0, table.output
    lines = table.output.splitlines()
    assert lines[0].split() == [
        "key",
        "requests",
        "input",
        "output",
        "reasoning",
        "cached",
        "cost_usd",
        "errors",
    ]
    assert lines[-1].split()[:2] == ["total", "5"]
    bad = runner.invoke(cli, ["usage", "--db", db_url, "--group-by", "week"])
    assert bad.exit_code == 2 and "week" in bad.output
