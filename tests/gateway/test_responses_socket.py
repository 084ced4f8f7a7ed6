"""The Responses API over a WebSocket (``/v1/responses`` upgraded), with real clients:
the openai SDK's ``responses.connect()`` and the ``websockets`` library replaying the
frames Codex 0.171.0 sent, with its upgrade headers
(``tests/fixtures/requests/codex_0_171_0_websocket_frames.json``).

Several responses on one socket, each continuing the last with ``previous_response_id``
and ``store: false``; Codex's warm-up (``generate: false``), its compaction and the turn
after it; the key checked at the upgrade (401 in OpenAI's shape) and the key's ledger
row written for each response, as over HTTP; bad frames answered with ``error`` events
while the socket stays open; a client that leaves cancels its response; and a socket
past its age refused as OpenAI refuses it.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from websockets.exceptions import ConnectionClosed, InvalidStatus
from websockets.sync.client import ClientConnection, connect

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.dialects.responses.summary import SUMMARY_INTRO
from llmbridge.features.compaction import SUMMARY_PROMPT
from tests.conftest import RunningServer, create_key, ledger_rows, running_gateway
from tests.waiting import scaled, wait_until

CAPTURED = json.loads(
    (
        Path(__file__).parents[1] / "fixtures" / "requests" / "codex_0_171_0_websocket_frames.json"
    ).read_text()
)
FRAMES: list[dict[str, Any]] = CAPTURED["frames"]
MASTER = "sk-master-socket"
TERMINAL = ("response.completed", "response.incomplete", "response.failed", "error")


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("socket") / "gateway.db"


@pytest.fixture(scope="module")
def keyed(scripted: ScriptedBackend, database: Path) -> Iterator[RunningServer]:
    """A gateway whose keys are in its database (so every response has a ledger row)."""
    with running_gateway(
        {"scripted": scripted},
        server={"master_key": MASTER},
        agent={"database": str(database)},
        models=[{"name": "gpt-5.5", "backend": "scripted", "model": "scripted"}],
    ) as server:
        yield server


def ws_url(server: RunningServer) -> str:
    return server.url.replace("http://", "ws://") + "/v1/responses"


def codex_socket(server: RunningServer, key: str) -> ClientConnection:
    """A socket opened as Codex opens it: its own upgrade headers, the key as a bearer."""
    headers = {k: v for k, v in CAPTURED["upgrade_headers"].items() if k not in _HANDSHAKE}
    headers["authorization"] = f"Bearer {key}"
    return connect(ws_url(server), additional_headers=headers, open_timeout=scaled(30))


_HANDSHAKE = {"connection", "upgrade", "sec-websocket-version", "sec-websocket-extensions"}


def one_response(socket: ClientConnection) -> list[dict[str, Any]]:
    """The events of one response, up to its terminal one."""
    events: list[dict[str, Any]] = []
    while True:
        event = json.loads(socket.recv(timeout=scaled(30)))
        events.append(event)
        if event["type"] in TERMINAL:
            return events


def frame(index: int, previous: str | None) -> str:
    """Codex's frame ``index``, continuing ``previous`` where Codex continued."""
    sent = copy.deepcopy(FRAMES[index])
    if "previous_response_id" in sent:
        assert previous is not None
        sent["previous_response_id"] = previous
    return json.dumps(sent)


async def test_sdk_chains_responses_on_one_socket(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["Paris."]), Script(text=["About 2 million."]))
    client = openai.AsyncOpenAI(base_url=gateway.url + "/v1", api_key="unused", max_retries=0)
    async with client.responses.connect() as connection:
        await connection.send(
            {
                "type": "response.create",
                "model": "scripted",
                "store": False,
                "input": "Capital of France?",
            }
        )
        first = await _until_done(connection)
        assert first[-1].type == "response.completed"
        text = "".join(e.delta for e in first if e.type == "response.output_text.delta")
        assert text == "Paris."
        await connection.send(
            {
                "type": "response.create",
                "model": "scripted",
                "store": False,
                "previous_response_id": first[-1].response.id,
                "input": [{"role": "user", "content": "Population?"}],
            }
        )
        second = await _until_done(connection)
    await client.close()
    assert second[-1].type == "response.completed"
    assert second[-1].response.previous_response_id == first[-1].response.id
    # Only the new turn was sent: the socket held the rest (store: false).
    assert [(m.role, m.text) for m in scripted.requests[-1].messages] == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", "Population?"),
    ]


async def _until_done(connection: Any) -> list[Any]:
    """The SDK's parsed events of one response, up to its terminal one."""
    events = []
    async for event in connection:
        events.append(event)
        if event.type in TERMINAL:
            break
    return events


def test_codex_session_on_one_socket_with_its_ledger_rows(
    keyed: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    """Codex's four frames: the warm-up calls no model; the turn continues it with only
    its new items; the compaction continues the turn; the turn after it carries the
    compaction item. Each is admitted and recorded as a request of its own."""
    key = create_key(keyed.url, MASTER, "codex-socket")
    shell_call = ("exec_command", {"cmd": "echo hi"})
    scripted.enqueue(
        Script(text=[], tool_calls=[shell_call]),
        Script(text=["Ran echo hi for a greeting."]),
        Script(text=["Hi!"]),
    )
    before = len(scripted.requests)
    with codex_socket(keyed, key) as socket:
        socket.send(frame(0, None))
        warm = one_response(socket)
        assert [e["type"] for e in warm] == [
            "response.created",
            "response.in_progress",
            "response.completed",
        ]
        assert warm[-1]["response"]["output"] == []
        assert len(scripted.requests) == before  # no model was called

        socket.send(frame(1, warm[-1]["response"]["id"]))
        turn = one_response(socket)
        assert turn[-1]["type"] == "response.completed", turn[-1]
        (call,) = turn[-1]["response"]["output"]
        assert call["type"] == "function_call" and call["name"] == "exec_command"
        sent = scripted.requests[-1]
        # The warm-up's developer message, then the turn's own three items.
        assert [m.role for m in sent.messages][-3:] == ["system", "user", "user"]

        # The capture's call id was its server's; here it is the scripted call's.
        trigger = json.loads(frame(2, turn[-1]["response"]["id"]))
        trigger["input"][0]["call_id"] = call["call_id"]
        socket.send(json.dumps(trigger))
        compaction = one_response(socket)
        assert compaction[-1]["type"] == "response.completed", compaction[-1]
        (item,) = compaction[-1]["response"]["output"]
        assert item["type"] == "compaction"
        asked = scripted.requests[-1]
        assert asked.messages[-1].text == SUMMARY_PROMPT
        assert asked.messages[-2].role == "tool"  # the shell's output, continued

        after = json.loads(frame(3, None))
        after["input"][-1] = item
        socket.send(json.dumps(after))
        final = one_response(socket)
    assert final[-1]["type"] == "response.completed"
    assert scripted.requests[-1].messages[-1].text == SUMMARY_INTRO + "Ran echo hi for a greeting."
    rows = ledger_rows(database, "codex-socket", 4)
    assert [row["endpoint"] for row in rows] == ["/v1/responses"] * 4
    assert [row["status"] for row in rows] == [200] * 4


def test_the_key_is_checked_at_the_upgrade(keyed: RunningServer) -> None:
    for headers in ({}, {"authorization": "Bearer sk-not-a-key"}):
        with pytest.raises(InvalidStatus) as refused:
            connect(ws_url(keyed), additional_headers=headers, open_timeout=scaled(30))
        response = refused.value.response
        assert response.status_code == 401
        assert json.loads(response.body)["error"]["type"]


def test_bad_frames_get_error_events_and_the_socket_stays_open(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["Still here."]))
    with connect(ws_url(gateway), open_timeout=scaled(30)) as socket:
        answers = []
        for bad in (
            "not json",
            b"\x00binary",
            "[1, 2]",
            json.dumps({"type": "response.steer", "input": "x"}),
            json.dumps({"type": "response.create", "model": "scripted"}),  # no input
            json.dumps(
                {
                    "type": "response.create",
                    "model": "scripted",
                    "input": "x",
                    "previous_response_id": "resp_unknown",
                }
            ),
        ):
            socket.send(bad)
            answers.append(json.loads(socket.recv(timeout=scaled(30))))
        socket.send(json.dumps({"type": "response.create", "model": "scripted", "input": "hi"}))
        good = one_response(socket)
    assert [a["type"] for a in answers] == ["error"] * 6
    assert [(a["status"], a["error"]["code"]) for a in answers] == [
        (400, "invalid_json"),
        (400, "invalid_frame"),
        (400, "invalid_frame"),
        (400, "unsupported_event"),
        (400, None),
        (404, "previous_response_not_found"),
    ]
    assert answers[4]["error"]["param"] == "input"
    assert all(a["status_code"] == a["status"] for a in answers)
    assert good[-1]["type"] == "response.completed"


def test_a_client_that_leaves_cancels_its_response(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    cancelled = scripted.cancelled
    scripted.enqueue(Script(text=["tick"] * 200, chunk_delay=0.05))
    with connect(ws_url(gateway), open_timeout=scaled(30)) as socket:
        socket.send(json.dumps({"type": "response.create", "model": "scripted", "input": "go"}))
        while json.loads(socket.recv(timeout=scaled(30)))["type"] != "response.output_text.delta":
            pass
    wait_until(lambda: scripted.cancelled > cancelled, "the backend's stream to be cancelled")


def test_a_socket_past_its_age_is_refused_and_closed(scripted: ScriptedBackend) -> None:
    """Past its age, a frame is refused and the socket closed. The first frame may come
    before or after the (1 ms) age; its response takes longer than that, so the second
    comes after it."""
    create = json.dumps({"type": "response.create", "model": "scripted", "input": "x"})
    scripted.enqueue(Script(text=["a", "b"], chunk_delay=0.01))
    aged = running_gateway({"scripted": scripted}, server={"websocket_max_age_s": 0.001})
    with aged as server, connect(ws_url(server), open_timeout=scaled(30)) as socket:
        socket.send(create)
        answer = one_response(socket)
        if answer[-1]["type"] != "error":
            assert answer[-1]["type"] == "response.completed", answer[-1]
            socket.send(create)
            answer = one_response(socket)
        assert answer[-1]["error"]["code"] == "websocket_connection_limit_reached"
        with pytest.raises(ConnectionClosed):
            socket.recv(timeout=scaled(30))
