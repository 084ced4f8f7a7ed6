"""Hypothesis-drawn agent API requests (``tests/fuzz/agent_strategies.py``) against a
real gateway on a loopback port, on SQLite and on PostgreSQL: the shapes that broke it once
(superscript digits, U+0000, non-finite floats, ids beyond 64 bits, timestamps past
the ends of the calendar) and ordinary requests mixed.

For every reply: never a 5xx (the scripted backend always answers); an error is the
OpenAI error JSON with the status's ``type`` and no traceback; a 400 names the
field at fault, one the request holds (only a body that is not a JSON object names
none), so no bad value reaches the database to be refused there. Deterministic
(``derandomize``, no example database); ``FUZZ_MAX_EXAMPLES`` draws more.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, note, settings

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.web.render import Dialect
from tests.agent.serving import agent_gateway, sse_events
from tests.fuzz.agent_strategies import AGENT_REQUESTS, AgentCall
from tests.fuzz.shapes import assert_error_shape, assert_no_traceback

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "150"))


@pytest.fixture
def http(db_url: str) -> Iterator[tuple[httpx.Client, dict[str, str]]]:
    """A client of a gateway on ``db_url``, and the ids of a session, a persona, a
    patient and a document made there."""
    with (
        agent_gateway(db_url, {"scripted": ScriptedBackend("scripted")}) as server,
        httpx.Client(base_url=server.url, timeout=60) as client,
    ):
        ids = {
            "session": client.post("/agent/sessions", json={}).json()["id"],
            "persona": client.post("/agent/personas", json={"name": "P"}).json()["id"],
            "patient": str(client.post("/agent/patients", json={"name": "M"}).json()["id"]),
            "document": str(
                client.post("/agent/documents", json={"title": "T", "content": "x"}).json()["id"]
            ),
        }
        yield client, ids


@settings(
    max_examples=MAX_EXAMPLES,
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(call=AGENT_REQUESTS)
def test_agent_requests_never_get_a_5xx(
    http: tuple[httpx.Client, dict[str, str]], call: AgentCall
) -> None:
    client, ids = http
    path = call.path
    for name, value in ids.items():
        path = path.replace("{" + name + "}", value)
    note(f"{call.method} {path} {call.query} {call.body!r}")
    response = client.request(
        call.method,
        path,
        params=call.query,
        content=call.body,
        headers={"content-type": "application/json"} if call.body is not None else {},
    )
    assert response.status_code < 500, response.text
    if response.status_code >= 400:
        message = assert_error_shape(Dialect.OPENAI, response.status_code, response.content)
        param = response.json()["error"]["param"]
        if response.status_code == 400 and not message.startswith("request body "):
            # Every bad value is named: none reaches the database to be refused there.
            assert param is not None, message
            assert message.startswith(f"{param}: "), message
            assert _mentioned(param.split(".")[0], call, path), (param, call)
        return
    assert_no_traceback(response.content)
    if call.stream:
        names = [name for name, _ in sse_events(response.text)]
        assert names[0] == "start" and names[-1] == "done", names
    elif response.status_code != 204:
        assert isinstance(orjson.loads(response.content), dict)


def _mentioned(field: str, call: AgentCall, path: str) -> bool:
    """Whether the request holds ``field``: in its body, its query or its path."""
    body = (call.body or b"").decode("utf-8", "surrogatepass")
    return (
        f'"{field}"' in body
        or field in call.query
        or field.endswith("_id")  # a path parameter
        or field == "kind"
        or field in path
    )
