"""Every route of the model API goes through one ``Exchange`` (gateway/exchange/):
admitted on the caller's key and recorded once in the usage ledger, however it ends
(requests slipped past four hand-finished objects; 400s, 404s for an unknown
``previous_response_id``, Ollama load requests and ``/v1/responses/input_tokens`` were
never recorded, and the last skipped every key check).

The app's routes are enumerated, so a route added later without ``exchanged`` fails
here. Each one is then called once with a database key and its ledger row looked up
by request id; a key whose globs leave the model out is refused on every route that
names a model; a key with its requests per minute spent is refused on every route
that calls a model.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.routing import Route, WebSocketRoute

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from llmbridge.gateway.exchange.handler import EXCHANGED
from tests.conftest import RunningServer, create_key, ledger_rows, running_gateway

MASTER = "sk-master-routes"
OPERATIONS = {"/", "/api/hello", "/health", "/metrics", "/openapi.json"}
"""Probes and operations: answered without a key, no model, no ledger row."""
OWN_GATES = ("/admin/", "/agent/", "/ui")
"""The admin API (the master key) and the agent API (its gate, gateway/exchange/agent_gate.py:
tests/accounts/test_agent_limits.py); the operator console (its session, no model:
tests/console/)."""

CHAT = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
GEMINI = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}

# (method, path, body, does it call a model?) for one request to each route. The
# model named is ``scripted`` (the test swaps it per case).
CALLS: list[tuple[str, str, dict[str, Any] | None, bool]] = [
    ("POST", "/api/chat", CHAT, True),
    ("POST", "/api/generate", {"model": "scripted", "prompt": "hi"}, True),
    ("GET", "/api/tags", None, False),
    ("POST", "/api/show", {"model": "scripted"}, False),
    ("GET", "/api/ps", None, False),
    ("GET", "/api/version", None, False),
    ("POST", "/api/embed", {"model": "scripted", "input": "hi"}, True),
    ("POST", "/api/embeddings", {"model": "scripted", "prompt": "hi"}, True),
    # Model management: a database key may not (403), but the request is recorded.
    ("POST", "/api/pull", {"model": "scripted"}, False),
    ("POST", "/api/push", {"model": "scripted"}, False),
    ("DELETE", "/api/delete", {"model": "scripted"}, False),
    ("POST", "/api/copy", {"source": "scripted", "destination": "scripted-copy"}, False),
    ("POST", "/api/create", {"model": "scripted", "from": "scripted"}, False),
    ("POST", "/v1/chat/completions", CHAT, True),
    ("GET", "/v1/models", None, False),
    ("GET", "/v1/models/scripted", None, False),
    ("POST", "/v1/embeddings", {"model": "scripted", "input": "hi"}, True),
    ("POST", "/v1/completions", {"model": "scripted", "prompt": "hi"}, True),
    ("POST", "/v1/responses", {"model": "scripted", "input": "hi"}, True),
    ("POST", "/v1/responses/input_tokens", {"model": "scripted", "input": "hi"}, True),
    ("POST", "/v1/responses/compact", {"model": "scripted", "input": "hi"}, True),
    ("GET", "/v1/responses/resp_missing", None, False),
    ("DELETE", "/v1/responses/resp_missing", None, False),
    ("POST", "/v1/messages", {**CHAT, "max_tokens": 16}, True),
    ("POST", "/v1/messages/count_tokens", CHAT, True),
    ("POST", "/v1beta/models/scripted:generateContent", GEMINI, True),
    ("POST", "/v1beta/models/scripted:streamGenerateContent", GEMINI, True),
    ("POST", "/v1beta/models/scripted:countTokens", GEMINI, True),
    (
        "POST",
        "/v1beta/models/scripted:embedContent",
        {"content": {"parts": [{"text": "hi"}]}},
        True,
    ),
    (
        "POST",
        "/v1beta/models/scripted:batchEmbedContents",
        {"requests": [{"model": "models/scripted", "content": {"parts": [{"text": "hi"}]}}]},
        True,
    ),
    ("POST", "/v1/models/scripted:generateContent", GEMINI, True),
    ("POST", "/v1/models/scripted:streamGenerateContent", GEMINI, True),
    ("POST", "/v1/models/scripted:countTokens", GEMINI, True),
    ("POST", "/v1/models/scripted:embedContent", {"content": {"parts": [{"text": "hi"}]}}, True),
    (
        "POST",
        "/v1/models/scripted:batchEmbedContents",
        {"requests": [{"model": "models/scripted", "content": {"parts": [{"text": "hi"}]}}]},
        True,
    ),
    ("POST", "/v1/models/scripted:unknownMethod", GEMINI, False),
    ("POST", "/v1beta/interactions", {"model": "scripted", "input": "hi"}, True),
    ("GET", "/v1beta/interactions/int_missing", None, False),
    ("DELETE", "/v1beta/interactions/int_missing", None, False),
    ("POST", "/v1/interactions", {"model": "scripted", "input": "hi"}, True),
    ("GET", "/v1/interactions/int_missing", None, False),
    ("DELETE", "/v1/interactions/int_missing", None, False),
    ("GET", "/v1beta/models", None, False),
    ("GET", "/v1beta/models/scripted", None, False),
    ("POST", "/v1beta/models/scripted:unknownMethod", GEMINI, False),
]


def _route_templates(config_agent: bool = True) -> list[tuple[str, frozenset[str], Any]]:
    config = load_config(None, {"agent": {"enabled": config_agent}})
    app = create_app(config, backends={"scripted": ScriptedBackend()})
    found = []
    for route in app.routes:
        if isinstance(route, WebSocketRoute):
            # A socket's frames are requests to the HTTP route at its path (the Responses
            # API over a WebSocket): its handler is marked, and checked below as they are.
            found.append((route.path, frozenset({"WEBSOCKET"}), route.endpoint))
            continue
        assert isinstance(route, Route), f"not a plain route: {route!r}"
        found.append((route.path, frozenset(route.methods or ()), route.endpoint))
    return found


def test_every_model_api_route_is_exchanged() -> None:
    """The static half: no route of the model API is left without an ``Exchange``."""
    missing = [
        f"{sorted(methods)} {path}"
        for path, methods, endpoint in _route_templates()
        if path not in OPERATIONS
        and not path.startswith(OWN_GATES)
        and not getattr(endpoint, EXCHANGED, False)
    ]
    assert not missing, f"routes that bypass the per-request Exchange: {missing}"


def test_the_calls_below_cover_every_exchanged_route() -> None:
    """Each exchanged route has a request in ``CALLS`` (so the behaviour tests below
    reach every one)."""
    import re

    # A socket's frames are POSTs to its path, which CALLS covers; its admission and
    # ledger rows are tests/gateway/test_responses_socket.py's.
    exchanged = [
        (path, methods)
        for path, methods, endpoint in _route_templates()
        if getattr(endpoint, EXCHANGED, False) and methods != {"WEBSOCKET"}
    ]
    for path, methods in exchanged:
        pattern = re.sub(r"\{[^}:]+(:path)?\}", "[^?]+", path.replace(".", r"\."))
        covered = any(
            method in methods and re.fullmatch(pattern, call_path)
            for method, call_path, _, _ in CALLS
        )
        assert covered, f"no request in CALLS reaches {sorted(methods)} {path}"


# -- behaviour, on a gateway with keys in its database --------------------------------


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("routes") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend, database: Path) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": scripted},
        server={"master_key": MASTER},
        agent={"database": str(database)},
    ) as server:
        yield server


def _new_key(gateway: RunningServer, name: str, **limits: Any) -> str:
    return create_key(gateway.url, MASTER, name, **limits)


def _send(gateway: RunningServer, key: str, call: tuple[str, str, Any, bool], model: str) -> Any:
    method, path, body, _ = call
    path = path.replace("scripted", model)
    if body is not None:
        body = _renamed(body, model)
    return httpx.request(
        method,
        gateway.url + path,
        json=body,
        headers={"Authorization": f"Bearer {key}", "x-goog-api-key": key},
        timeout=30,
    )


def _renamed(body: Any, model: str) -> Any:
    if isinstance(body, dict):
        return {k: _renamed(v, model) for k, v in body.items()}
    if isinstance(body, list):
        return [_renamed(v, model) for v in body]
    if body in ("scripted", "models/scripted"):
        return body.replace("scripted", model)
    return body


def test_every_route_is_recorded_once_with_its_status(
    gateway: RunningServer, database: Path
) -> None:
    key = _new_key(gateway, "every-route")
    statuses = []
    for call in CALLS:
        reply = _send(gateway, key, call, "scripted")
        assert reply.status_code < 500, (call, reply.status_code, reply.text)
        statuses.append((call[1], reply.status_code, reply.headers.get("x-request-id")))
    rows = ledger_rows(database, "every-route", len(CALLS))
    assert len(rows) == len(CALLS), [dict(r) for r in rows]
    by_id = {row["request_id"]: row for row in rows}
    for path, status, request_id in statuses:
        if request_id is not None:  # every route but a stream's body names it
            assert request_id in by_id, f"{path}: no ledger row for {request_id}"
            assert by_id[request_id]["status"] == status, path
    recorded = sorted(row["status"] for row in rows)
    assert recorded == sorted(status for _, status, _ in statuses)
    # The unknown stored response (GET, DELETE), the unknown Gemini method and the
    # unknown stored interaction (GET, DELETE; both under both prefixes): recorded 404s.
    assert sum(1 for _, status, _ in statuses if status == 404) == 8


def test_a_model_outside_the_keys_globs_is_refused_on_every_route(
    gateway: RunningServer, database: Path
) -> None:
    key = _new_key(gateway, "globbed", models=["allowed-*"])
    for call in CALLS:
        _, path, body, _ = call
        names_model = "scripted" in path or (body is not None and "scripted" in str(body))
        if not names_model or path.endswith(":unknownMethod") or "resp_missing" in path:
            continue
        reply = _send(gateway, key, call, "scripted")
        assert reply.status_code in (403, 404), (path, reply.status_code, reply.text)


def test_a_key_out_of_requests_is_refused_on_every_route_that_calls_a_model(
    gateway: RunningServer,
) -> None:
    calls = [call for call in CALLS if call[3]]
    key = _new_key(gateway, "one-rpm", rpm=1)
    first = _send(gateway, key, calls[0], "scripted")
    assert first.status_code == 200, first.text
    for call in calls:
        reply = _send(gateway, key, call, "scripted")
        assert reply.status_code == 429, (call[1], reply.status_code, reply.text)
        assert int(reply.headers["retry-after"]) >= 1


def test_unknown_previous_response_and_bad_bodies_are_recorded(
    gateway: RunningServer, database: Path
) -> None:
    """Item 7's cases: a 400 (a body that fails validation), a 404 for an unknown
    ``previous_response_id`` and an Ollama load request, each one ledger row."""
    key = _new_key(gateway, "edge-cases")
    headers = {"Authorization": f"Bearer {key}"}
    bad = httpx.post(
        gateway.url + "/v1/chat/completions", json={"model": 3}, headers=headers, timeout=30
    )
    assert bad.status_code == 400
    unknown = httpx.post(
        gateway.url + "/v1/responses",
        json={"model": "scripted", "input": "hi", "previous_response_id": "resp_nope"},
        headers=headers,
        timeout=30,
    )
    assert unknown.status_code == 404
    load = httpx.post(
        gateway.url + "/api/chat", json={"model": "scripted"}, headers=headers, timeout=30
    )
    assert load.status_code == 200 and load.json()["done_reason"] == "load"
    rows = ledger_rows(database, "edge-cases", 3)
    assert sorted(row["status"] for row in rows) == [200, 400, 404]
    assert {row["endpoint"] for row in rows} == {
        "/v1/chat/completions",
        "/v1/responses",
        "/api/chat",
    }
