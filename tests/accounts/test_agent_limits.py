"""Agent turns count like any request (agent/gate.py, gateway/exchange/agent_gate.py):
a real gateway on loopback with keys in its database, the agent API over a scripted
backend. A key's requests per minute, models, parallel slot and tokens per minute
refuse a turn before it runs (an OpenAI-shaped 403 / 429 with ``Retry-After`` and
``x-ratelimit-*``, never an SSE event, nothing stored), the slot comes back however
a turn ends, and every turn (a tool loop's several model calls included) is one
usage-ledger record with the usage the agent API reported."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmbridge.agent.tools import Tool, ToolRegistry
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.response import Usage
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from llmbridge.web.render import Dialect
from tests.accounts.test_limits import MASTER, new_key
from tests.agent.serving import sse_events
from tests.conftest import RunningServer
from tests.fuzz.shapes import assert_error_shape

STATIC = "sk-static-agent-limits"
CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}
TURNS = "/agent/sessions/{session_id}/messages"


async def _weather(arguments: dict[str, Any]) -> str:
    return f"{arguments['city']}: 21 C"


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("agent-limits") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend, database: Path) -> Iterator[RunningServer]:
    config = GatewayConfig.model_validate(
        {
            "server": {"master_key": MASTER, "api_keys": [STATIC]},
            "backends": {"scripted": {"type": "scripted"}},
            "default_backend": "scripted",
            # Turns name no model: the agent's default is the one the key is checked on.
            "agent": {"database": str(database), "model": "scripted", "summaries": False},
        }
    )
    tools = ToolRegistry([Tool("get_weather", "Weather by city", CITY, _weather)])
    app = create_app(config, backends={"scripted": scripted}, agent_tools=tools)
    with RunningServer(app, http=http_protocol(app)) as server:
        yield server


def _client(gateway: RunningServer, key: str) -> httpx.Client:
    return httpx.Client(
        base_url=gateway.url, headers={"Authorization": f"Bearer {key}"}, timeout=30
    )


def _session(client: httpx.Client) -> str:
    created = client.post("/agent/sessions", json={})
    assert created.status_code == 201, created.text
    session_id: str = created.json()["id"]
    return session_id


def _turn(client: httpx.Client, session_id: str, **body: Any) -> httpx.Response:
    return client.post(TURNS.format(session_id=session_id), json={"input": "hi", **body})


def _stored(client: httpx.Client, session_id: str) -> list[dict[str, Any]]:
    listed = client.get(TURNS.format(session_id=session_id))
    assert listed.status_code == 200, listed.text
    messages: list[dict[str, Any]] = listed.json()["messages"]
    return messages


def _error(response: httpx.Response, status: int) -> str:
    """An OpenAI-shaped error, a plain HTTP reply (no event stream); its message."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith("application/json")
    return assert_error_shape(Dialect.OPENAI, status, response.content)


def _eventually_admitted(client: httpx.Client, session_id: str) -> None:
    """A turn once the key's slot is back: a stream's slot is given back when its
    response closes, just after the client read the end (a bounded wait)."""
    for _ in range(100):
        response = _turn(client, session_id)
        if response.status_code == 200:
            return
        assert "max_parallel 1" in _error(response, 429)
        threading.Event().wait(0.02)
    raise AssertionError("the parallel slot was never released")


def test_rpm_2_lets_2_turns_through_then_429(gateway: RunningServer) -> None:
    with _client(gateway, new_key(gateway, "agent-rpm", rpm=2)) as client:
        session_id = _session(client)  # no model called: not counted
        first = _turn(client, session_id)
        assert first.status_code == 200, first.text
        assert first.headers["x-ratelimit-limit-requests"] == "2"
        assert first.headers["x-ratelimit-remaining-requests"] == "1"
        with client.stream(
            "POST", TURNS.format(session_id=session_id), json={"input": "hi", "stream": True}
        ) as streamed:
            assert streamed.headers["content-type"].startswith("text/event-stream")
            assert streamed.headers["x-ratelimit-remaining-requests"] == "0"
            names = [name for name, _ in sse_events(streamed.read().decode())]
        assert names[0] == "start" and names[-1] == "done"
        for stream in (True, False):
            refused = _turn(client, session_id, stream=stream)
            assert "2 requests per minute" in _error(refused, 429)
            assert 1 <= int(refused.headers["retry-after"]) <= 60
            assert refused.headers["x-ratelimit-limit-requests"] == "2"
            assert refused.headers["x-ratelimit-remaining-requests"] == "0"
            assert refused.headers["x-ratelimit-reset-requests"].endswith("s")
        # Two turns, two answers: the refused ones stored nothing.
        assert [m["role"] for m in _stored(client, session_id)] == ["user", "assistant"] * 2


def test_a_model_outside_the_keys_globs_is_403_and_nothing_runs(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    with _client(gateway, new_key(gateway, "agent-models", models=["other-*"])) as client:
        persona = client.post("/agent/personas", json={"name": "Nurse", "prompt": "Be kind."})
        assert persona.status_code == 201, persona.text
        created = client.post("/agent/sessions", json={"persona_id": persona.json()["id"]})
        session_id = created.json()["id"]
        called = len(scripted.requests)
        for stream in (False, True):
            # The persona's turn runs on the agent's model, "scripted": outside "other-*".
            refused = _turn(client, session_id, stream=stream)
            assert "may not use the model 'scripted'" in _error(refused, 403)
            assert refused.json()["error"]["param"] == "model"
            assert "retry-after" not in refused.headers
        summary = client.post(f"/agent/sessions/{session_id}/summaries", json={"model": "scripted"})
        assert "'scripted'" in _error(summary, 403)
        assert _stored(client, session_id) == [] and len(scripted.requests) == called
        allowed = _turn(client, session_id, model="other-1")
        assert allowed.status_code == 200, allowed.text
        assert [m["model"] for m in _stored(client, session_id)] == [None, "other-1"]


def test_the_parallel_slot_comes_back_however_a_turn_ends(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    with _client(gateway, new_key(gateway, "agent-parallel", max_parallel=1)) as client:
        session_id, other = _session(client), _session(client)
        # A streamed turn holds the slot until its stream ends.
        scripted.enqueue(Script(text=["a", "b", "c", "d"], chunk_delay=0.2))
        url = TURNS.format(session_id=session_id)
        with client.stream("POST", url, json={"input": "hi", "stream": True}) as streamed:
            lines = streamed.iter_lines()
            assert any(line.startswith("event: delta") for line in lines)
            busy = _turn(client, other)
            assert "max_parallel 1" in _error(busy, 429)
            assert busy.headers["retry-after"] == "1"
            rest = "\n".join(lines)
        assert "event: done" in rest
        _eventually_admitted(client, other)

        # A turn the backend fails midway: its error answers, the slot is back at once.
        scripted.enqueue(Script(text=["a", "b"], fail_after=1))
        failed = _turn(client, session_id)
        assert _error(failed, 502) == "scripted failure mid-stream"
        assert _turn(client, other).status_code == 200

        # A client that leaves mid-stream: the turn is cancelled and its slot given back.
        cancelled = scripted.cancelled
        scripted.enqueue(Script(text=["one ", "two ", "three ", "four"], chunk_delay=0.3))
        with client.stream("POST", url, json={"input": "count", "stream": True}) as leaving:
            assert any(line.startswith("event: delta") for line in leaving.iter_lines())
        _eventually_admitted(client, other)
        assert scripted.cancelled == cancelled + 1


def _ledger(database: Path, key_name: str, count: int) -> list[dict[str, Any]]:
    """The usage rows of keys named like ``key_name`` (SQL ``LIKE``) once ``count``
    are written (the ledger writes every second in the background: a bounded poll)."""
    rows: list[dict[str, Any]] = []
    for _ in range(100):
        with sqlite3.connect(database) as db:
            db.row_factory = sqlite3.Row
            found = db.execute("SELECT * FROM usage WHERE key_name LIKE ?", (key_name,))
            rows = [dict(row) for row in found]
        if len(rows) >= count:
            return rows
        threading.Event().wait(0.1)
    raise AssertionError(f"the ledger never held {count} rows for {key_name}: {rows}")


def test_each_turn_is_one_ledger_record_with_its_reported_usage(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    scripted.enqueue(
        Script(text=["Hello"], usage=Usage(input_tokens=11, output_tokens=3)),
        Script(text=["Hi", " there"], usage=Usage(input_tokens=13, output_tokens=5)),
        # A tool loop: two model calls, one turn.
        Script(
            tool_calls=[("get_weather", {"city": "Oslo"})],
            text=[],
            usage=Usage(input_tokens=17, output_tokens=7),
        ),
        Script(text=["21 C."], usage=Usage(input_tokens=19, output_tokens=2)),
        Script(text=["They talked."], usage=Usage(input_tokens=23, output_tokens=4)),
    )
    reported: list[dict[str, int]] = []
    with _client(gateway, new_key(gateway, "agent-ledger")) as client:
        session_id = _session(client)
        first = _turn(client, session_id)
        reported.append(first.json()["usage"])
        streamed = _turn(client, session_id, stream=True)
        done = [data for name, data in sse_events(streamed.text) if name == "done"]
        reported.append(done[0]["usage"])
        looped = _turn(client, session_id, input="Weather in Oslo?")
        assert looped.json()["rounds"] == 2 and looped.json()["tool_calls"]
        reported.append(looped.json()["usage"])
        # An on-demand summary calls the model too (with the session's model).
        summary = client.post(f"/agent/sessions/{session_id}/summaries")
        assert summary.status_code == 201, summary.text
    assert reported[2] == {"input_tokens": 17 + 19, "output_tokens": 7 + 2}

    rows = sorted(_ledger(database, "agent-ledger", 4), key=lambda row: row["id"])
    assert len(rows) == 4  # one per turn (the tool loop's two calls too), the summary
    recorded = [
        {"input_tokens": r["input_tokens"], "output_tokens": r["output_tokens"]} for r in rows
    ]
    assert recorded == [*reported, {"input_tokens": 23, "output_tokens": 4}]
    assert {(r["model"], r["deployment"], r["backend"]) for r in rows} == {
        ("scripted", "scripted", "scripted")
    }
    assert [(r["endpoint"], r["status"], bool(r["streamed"])) for r in rows] == [
        (TURNS, 200, False),
        (TURNS, 200, True),
        (TURNS, 200, False),
        ("/agent/sessions/{session_id}/summaries", 201, False),
    ]
    assert all(r["ttft_ms"] is not None and r["latency_ms"] >= r["ttft_ms"] for r in rows)

    usage = httpx.get(
        gateway.url + "/admin/usage",
        params={"group_by": "key"},
        headers={"Authorization": f"Bearer {MASTER}"},
    )
    by_key = {row["group"]: row for row in usage.json()["data"]}
    mine = by_key["agent-ledger"]
    assert mine["requests"] == 4 and mine["errors"] == 0
    assert mine["input_tokens"] == sum(u["input_tokens"] for u in reported) + 23
    assert mine["output_tokens"] == sum(u["output_tokens"] for u in reported) + 4


def test_a_static_key_is_not_limited_but_recorded(gateway: RunningServer, database: Path) -> None:
    with _client(gateway, STATIC) as client:
        session_id = _session(client)
        for _ in range(2):
            turn = _turn(client, session_id)
            assert turn.status_code == 200 and "x-ratelimit-limit-requests" not in turn.headers
    rows = _ledger(database, "static:%", 2)
    assert [(r["key_id"], r["endpoint"], r["status"]) for r in rows] == [(None, TURNS, 200)] * 2


def test_a_turns_tokens_land_in_the_keys_per_minute_window(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    with _client(gateway, new_key(gateway, "agent-tpm", tpm=100)) as client:
        session_id = _session(client)
        scripted.enqueue(Script(text=["ok"], usage=Usage(input_tokens=30, output_tokens=60)))
        first = _turn(client, session_id)
        assert first.status_code == 200, first.text
        assert first.headers["x-ratelimit-limit-tokens"] == "100"
        assert first.json()["token_usage"] == 90
        # 90 of 100 used: the next question's estimate does not fit.
        refused = _turn(client, session_id, input="one two three " * 10)
        assert "100 tokens per minute" in _error(refused, 429)
        assert int(refused.headers["x-ratelimit-remaining-tokens"]) <= 10
        assert int(refused.headers["retry-after"]) >= 1
        assert len(_stored(client, session_id)) == 2
