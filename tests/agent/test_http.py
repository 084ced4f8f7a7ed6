"""The agent's HTTP API (``/agent/...``) through httpx against a real gateway on a
loopback port, over scripted backends: every route, streaming, disconnects,
concurrent turns, ownership with two keys, and memory within budget across a gateway
restart on SQLite and PostgreSQL. The tools are in test_http_tools.py."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from llmbridge.agent.memory import PINS_PREFIX, RECENT_PREFIX
from llmbridge.agent.store import AgentStore
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import (
    BackendError,
    BackendUnavailableError,
    ConflictError,
    ServiceUnavailableError,
)
from llmbridge.features.token_count import count_message_tokens
from tests.agent.serving import agent_gateway, error_of, messages_of, session_of, sse_events
from tests.conftest import RunningServer

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend("scripted")


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


@pytest.fixture
def server(db: str, backend: ScriptedBackend) -> Any:
    with agent_gateway(db, {"scripted": backend}) as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=30) as http:
        yield http


# -- personas and sessions ----------------------------------------------------------


async def test_personas_and_sessions_round_trip(client: httpx.AsyncClient) -> None:
    created = await client.post(
        "/agent/personas",
        json={"name": "Nurse", "prompt": "You are a nurse.", "settings": {"temperature": 0.5}},
    )
    assert created.status_code == 201
    persona = created.json()
    assert persona["name"] == "Nurse" and persona["settings"] == {"temperature": 0.5}
    assert persona["shared"] is True  # auth is off
    named = await client.post("/agent/personas", json={"name": "Cook", "id": "cook"})
    assert named.status_code == 201 and named.json()["id"] == "cook"
    taken = error_of(
        await client.post("/agent/personas", json={"name": "Again", "id": "cook"}), 409
    )
    assert (taken["message"], taken["code"]) == ("persona id 'cook' is taken", "conflict")

    listed = (await client.get("/agent/personas")).json()["personas"]
    assert [p["name"] for p in listed] == ["Cook", "Nurse"]
    patched = await client.patch(
        f"/agent/personas/{persona['id']}", json={"prompt": "You are a caring nurse."}
    )
    assert patched.json()["prompt"] == "You are a caring nurse."
    assert patched.json()["settings"] == {"temperature": 0.5}
    fetched = await client.get(f"/agent/personas/{persona['id']}")
    assert fetched.json()["prompt"] == "You are a caring nurse."

    session_id = await session_of(client, persona_id=persona["id"], title="Grandma")
    session = (await client.get(f"/agent/sessions/{session_id}")).json()
    assert session["title"] == "Grandma" and session["persona_id"] == persona["id"]
    assert [s["id"] for s in (await client.get("/agent/sessions")).json()["sessions"]] == [
        session_id
    ]
    patched = await client.patch(f"/agent/sessions/{session_id}", json={"title": "Mary"})
    assert patched.json()["title"] == "Mary" and patched.json()["persona_id"] == persona["id"]
    cleared = await client.patch(f"/agent/sessions/{session_id}", json={"persona_id": None})
    assert cleared.json()["persona_id"] is None

    assert (await client.delete("/agent/personas/cook")).status_code == 204
    error_of(await client.get("/agent/personas/cook"), 404)
    assert (await client.delete(f"/agent/sessions/{session_id}")).status_code == 204
    error_of(await client.get(f"/agent/sessions/{session_id}"), 404)
    assert (await client.get("/agent/sessions")).json()["sessions"] == []


# -- a turn -------------------------------------------------------------------------------


async def test_a_turn_answers_with_the_reply_and_its_token_usage(
    client: httpx.AsyncClient, backend: ScriptedBackend
) -> None:
    persona = (
        await client.post("/agent/personas", json={"name": "N", "prompt": "You are a nurse."})
    ).json()
    session_id = await session_of(client, persona_id=persona["id"])
    backend.enqueue(Script(text=["Hello", " Mary."]))
    response = await client.post(f"/agent/sessions/{session_id}/messages", json={"input": "Hi"})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["reply"] == "Hello Mary." and body["session_id"] == session_id
    assert body["token_usage"] == body["usage"]["input_tokens"] + body["usage"]["output_tokens"]
    assert body["token_usage"] > 0 and body["rounds"] == 1 and body["tool_calls"] == []
    stored = await messages_of(client, session_id)
    assert [(m["role"], m["content"], m["status"]) for m in stored] == [
        ("user", "Hi", "complete"),
        ("assistant", "Hello Mary.", "complete"),
    ]
    assert stored[1]["id"] == body["message_id"] and stored[0]["id"] == body["user_message_id"]
    assert stored[1]["model"] == "scripted"  # agent.model unset: the backend's first model
    (request,) = backend.requests
    assert request.messages[0].role == "system"
    assert request.messages[0].text.startswith("You are a nurse.")
    # Paging: after the first message, one at a time.
    page = await client.get(
        f"/agent/sessions/{session_id}/messages", params={"after": stored[0]["id"], "limit": 1}
    )
    assert [m["id"] for m in page.json()["messages"]] == [stored[1]["id"]]


async def test_a_streamed_turn_is_server_sent_events(
    client: httpx.AsyncClient, backend: ScriptedBackend
) -> None:
    session_id = await session_of(client)
    backend.enqueue(Script(text=["The ", "answer ", "is ", "42."]))
    async with client.stream(
        "POST", f"/agent/sessions/{session_id}/messages", json={"input": "Q?", "stream": True}
    ) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = sse_events((await response.aread()).decode())
    names = [name for name, _ in events]
    assert names == ["start", "delta", "delta", "delta", "delta", "done"]
    assert "".join(data["text"] for name, data in events if name == "delta") == "The answer is 42."
    start, done = events[0][1], events[-1][1]
    assert start["session_id"] == session_id
    assert done["reply"] == "The answer is 42." and done["token_usage"] > 0
    assert done["token_usage"] == done["usage"]["input_tokens"] + done["usage"]["output_tokens"]
    stored = await messages_of(client, session_id)
    assert [m["id"] for m in stored] == [start["user_message_id"], done["message_id"]]
    assert stored[1]["status"] == "complete"


async def test_a_backend_failure_mid_stream_is_an_error_event(
    client: httpx.AsyncClient, backend: ScriptedBackend
) -> None:
    session_id = await session_of(client)
    backend.enqueue(Script(text=["The ", "answer ", "is ", "42."], fail_after=2))
    response = await client.post(
        f"/agent/sessions/{session_id}/messages", json={"input": "Q?", "stream": True}
    )
    events = sse_events(response.text)
    assert [name for name, _ in events] == ["start", "delta", "delta", "error"]
    error = events[-1][1]["error"]
    assert error["message"] == "scripted failure mid-stream" and error["status"] == 502
    stored = await messages_of(client, session_id)
    assert [(m["role"], m["content"], m["status"]) for m in stored] == [
        ("user", "Q?", "complete"),
        ("assistant", "The answer ", "incomplete"),
    ]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_backend_that_is_down_is_a_503(
    client: httpx.AsyncClient, backend: ScriptedBackend, stream: bool
) -> None:
    session_id = await session_of(client)
    # Down for the try and for the serving layer's one retry (resilience.retries).
    backend.enqueue(*[Script(fail_before=BackendUnavailableError("connection refused"))] * 2)
    response = await client.post(
        f"/agent/sessions/{session_id}/messages", json={"input": "Hi", "stream": stream}
    )
    assert error_of(response, 503)["message"] == "connection refused"
    # The question is kept; no answer was produced, so none is stored.
    assert [m["role"] for m in await messages_of(client, session_id)] == ["user"]


async def test_a_client_that_disconnects_stops_generation_and_keeps_the_partial_answer(
    client: httpx.AsyncClient, backend: ScriptedBackend
) -> None:
    session_id = await session_of(client)
    backend.enqueue(Script(text=["one ", "two ", "three ", "four ", "five"], chunk_delay=0.3))
    async with client.stream(
        "POST", f"/agent/sessions/{session_id}/messages", json={"input": "count", "stream": True}
    ) as response:
        seen = ""
        async for chunk in response.aiter_text():
            seen += chunk
            if "one " in seen:
                break  # leaving the block closes the connection mid-answer
    for _ in range(200):
        stored = await messages_of(client, session_id)
        if len(stored) == 2:
            break
        await asyncio.sleep(0.05)
    assert [(m["role"], m["status"]) for m in stored] == [
        ("user", "complete"),
        ("assistant", "incomplete"),
    ]
    assert stored[1]["content"].startswith("one ")
    assert stored[1]["content"] != "one two three four five"
    assert backend.cancelled == 1 and backend.completed == 0


async def test_concurrent_turns_on_one_session_keep_every_message(
    db_url: str, backend: ScriptedBackend
) -> None:
    backend.default = Script(text=["ok"], chunk_delay=0.01)
    with agent_gateway(db_url, {"scripted": backend}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            session_id = await session_of(client)
            responses = await asyncio.gather(
                *(
                    client.post(
                        f"/agent/sessions/{session_id}/messages", json={"input": f"question {n}"}
                    )
                    for n in range(10)
                )
            )
            assert [r.status_code for r in responses] == [200] * 10
            stored = await messages_of(client, session_id)
    assert len(stored) == 20
    assert sorted(m["content"] for m in stored if m["role"] == "user") == sorted(
        f"question {n}" for n in range(10)
    )
    assert all(m["status"] == "complete" for m in stored)
    assert {r.json()["message_id"] for r in responses} == {
        m["id"] for m in stored if m["role"] == "assistant"
    }


# -- pins, summaries, documents, eldercare ---------------------------------------------


async def test_pins_and_summaries(
    client: httpx.AsyncClient, backend: ScriptedBackend, db: str
) -> None:
    session_id = await session_of(client)
    reply = (
        await client.post(f"/agent/sessions/{session_id}/messages", json={"input": "Hi"})
    ).json()
    pin = await client.post(
        f"/agent/sessions/{session_id}/pins",
        json={"content": "Mary is allergic to penicillin", "message_id": reply["message_id"]},
    )
    assert pin.status_code == 201 and pin.json()["message_id"] == reply["message_id"]
    other = await client.post(f"/agent/sessions/{session_id}/pins", json={"content": "Drop me"})
    pins = (await client.get(f"/agent/sessions/{session_id}/pins")).json()["pins"]
    assert [p["content"] for p in pins] == ["Mary is allergic to penicillin", "Drop me"]
    assert (
        await client.delete(f"/agent/sessions/{session_id}/pins/{other.json()['id']}")
    ).status_code == 204
    error_of(await client.delete(f"/agent/sessions/{session_id}/pins/{other.json()['id']}"), 404)
    error_of(
        await client.post(
            f"/agent/sessions/{session_id}/pins", json={"content": "x", "message_id": 999999}
        ),
        404,
    )

    # The pin is in the next turn's context.
    await client.post(f"/agent/sessions/{session_id}/messages", json={"input": "Medicine?"})
    assert any(
        m.text.startswith(PINS_PREFIX) and "penicillin" in m.text
        for m in backend.requests[-1].messages
    )

    assert (await client.get(f"/agent/sessions/{session_id}/summaries")).json() == {"summaries": []}
    store = await AgentStore.open(db)
    try:
        stored = await store.last_messages(session_id, 2)
        await store.add_summary(session_id, "They said hello.", [m.id for m in stored], model="m")
    finally:
        await store.close()
    (summary,) = (await client.get(f"/agent/sessions/{session_id}/summaries")).json()["summaries"]
    assert summary["content"] == "They said hello." and len(summary["message_ids"]) == 2


async def test_long_sessions_are_summarised_by_the_summary_model(db: str) -> None:
    chat = ScriptedBackend("chat", default=Script(text=["ok"]))
    writer = ScriptedBackend("writer", default=Script(text=["They counted to fifteen."]))
    routes = ({"name": "summary", "backend": "writer"},)
    backends = {"chat": chat, "writer": writer}
    with agent_gateway(db, backends, routes=routes, summary_model="summary") as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            session_id = await session_of(client)
            for n in range(15):  # 30 messages: 20 to summarise beyond the newest 10
                await client.post(f"/agent/sessions/{session_id}/messages", json={"input": f"{n}"})
            for _ in range(200):
                found = (await client.get(f"/agent/sessions/{session_id}/summaries")).json()
                if found["summaries"]:
                    break
                await asyncio.sleep(0.05)
            await client.post(f"/agent/sessions/{session_id}/messages", json={"input": "and?"})
    (summary,) = found["summaries"]
    assert summary["content"] == "They counted to fifteen." and len(summary["message_ids"]) == 20
    assert len(writer.requests) == 1
    # The next turn carries the summary instead of the messages it covers.
    texts = [m.text for m in chat.requests[-1].messages]
    assert any("They counted to fifteen." in t for t in texts)


async def test_documents_crud_search_and_context(
    client: httpx.AsyncClient, backend: ScriptedBackend
) -> None:
    created = await client.post(
        "/agent/documents",
        json={
            "title": "Care plan",
            "content": "Walk every morning.\n\nTake metformin with breakfast.",
            "source": "clinic",
        },
    )
    assert created.status_code == 201
    document = created.json()
    assert document["content"].startswith("Walk") and document["token_count"] > 0
    listed = (await client.get("/agent/documents")).json()["documents"]
    assert [(d["id"], d["title"]) for d in listed] == [(document["id"], "Care plan")]
    assert "content" not in listed[0]
    hits = (await client.get("/agent/documents/search", params={"q": "metformin"})).json()["hits"]
    assert hits and hits[0]["document_id"] == document["id"]

    patched = await client.patch(
        f"/agent/documents/{document['id']}", json={"content": "Take lisinopril at night."}
    )
    assert patched.json()["content"] == "Take lisinopril at night."
    assert (await client.get("/agent/documents/search", params={"q": "metformin"})).json() == {
        "hits": []
    }
    session_id = await session_of(client)
    await client.post(
        f"/agent/sessions/{session_id}/messages", json={"input": "When does she take lisinopril?"}
    )
    assert "Take lisinopril at night." in backend.requests[-1].messages[-1].text

    assert (await client.delete(f"/agent/documents/{document['id']}")).status_code == 204
    error_of(await client.get(f"/agent/documents/{document['id']}"), 404)
    error_of(await client.delete(f"/agent/documents/{document['id']}"), 404)


async def test_eldercare_crud_and_the_patient_context(
    client: httpx.AsyncClient, backend: ScriptedBackend
) -> None:
    patient = (
        await client.post(
            "/agent/patients",
            json={"name": "Mary Smith", "birth_date": "1942-03-01", "conditions": ["Diabetes"]},
        )
    ).json()
    base = f"/agent/patients/{patient['id']}"
    bodies = {
        "caregivers": {"name": "John Smith", "relationship": "Grandson", "is_primary": True},
        "medications": {
            "name": "Metformin",
            "dosage": "500mg",
            "frequency": "Twice daily with meals",
            "times": ["08:00", "18:00"],
            "side_effects": ["Nausea"],
        },
        "vitals": {"kind": "glucose", "value": 104, "unit": "mg/dL"},
        "appointments": {
            "provider": "Dr. Johnson",
            "specialty": "Cardiologist",
            "scheduled_at": "2099-11-05T10:00:00Z",
        },
    }
    ids = {}
    for kind, body in bodies.items():
        response = await client.post(f"{base}/{kind}", json=body)
        assert response.status_code == 201, (kind, response.text)
        ids[kind] = response.json()["id"]
        listed = (await client.get(f"{base}/{kind}")).json()[kind]
        assert [r["id"] for r in listed] == [ids[kind]]
    changed = await client.patch(f"{base}/medications/{ids['medications']}", json={"dosage": "1g"})
    assert changed.json()["dosage"] == "1g" and changed.json()["times"] == ["08:00", "18:00"]
    vital = (await client.get(f"{base}/vitals/{ids['vitals']}")).json()
    assert vital["value"] == 104 and vital["measured_at"].endswith("+00:00")
    renamed = await client.patch(base, json={"notes": "Uses a walker"})
    assert renamed.json()["notes"] == "Uses a walker" and renamed.json()["name"] == "Mary Smith"
    assert [p["id"] for p in (await client.get("/agent/patients")).json()["patients"]] == [
        patient["id"]
    ]

    session_id = await session_of(client, patient_id=patient["id"])
    await client.post(
        f"/agent/sessions/{session_id}/messages", json={"input": "Any side effects of metformin?"}
    )
    turn = backend.requests[-1].messages[-1].text  # this turn's context, then the input
    assert "Patient Information:" in turn and "- Name: Mary Smith" in turn
    assert "Metformin 1g" in turn and "Side effects to monitor: Nausea" in turn

    assert (await client.delete(f"{base}/vitals/{ids['vitals']}")).status_code == 204
    error_of(await client.get(f"{base}/vitals/{ids['vitals']}"), 404)
    assert (await client.delete(base)).status_code == 204
    error_of(await client.get(f"{base}/medications"), 404)
    error_of(await client.get(base), 404)


# -- bad input ------------------------------------------------------------------------------


async def test_bad_input_is_a_clear_error(client: httpx.AsyncClient) -> None:
    session_id = await session_of(client)
    messages = f"/agent/sessions/{session_id}/messages"
    patient = (await client.post("/agent/patients", json={"name": "Mary"})).json()["id"]
    # (method, path, body or raw bytes, status, the field named)
    cases: list[tuple[str, str, Any, int, str | None]] = [
        ("POST", messages, b"{not json", 400, None),
        ("POST", messages, b"", 400, None),
        ("POST", messages, [1, 2], 400, None),
        ("POST", messages, {}, 400, "input"),
        ("POST", messages, {"input": 5}, 400, "input"),
        ("POST", messages, {"input": "   "}, 400, "input"),
        ("POST", messages, {"input": "hi", "stream": "yes"}, 400, "stream"),
        ("POST", messages, {"input": "hi", "settings": {"temperature": "hot"}}, 400, None),
        ("POST", messages, {"input": "hi", "surprise": 1}, 400, "surprise"),
        ("POST", messages, {"input": "hi", "tools": "web_search"}, 400, "tools"),
        ("POST", messages, {"input": "hi", "tools": [""]}, 400, "tools"),
        ("POST", messages, {"input": "hi", "tools": ["tavily_search"]}, 400, "tools"),
        ("POST", "/agent/sessions/nope/messages", {"input": "hi"}, 404, None),
        ("GET", "/agent/sessions/nope/messages", None, 404, None),
        ("POST", "/agent/personas", {"prompt": "no name"}, 400, "name"),
        ("POST", "/agent/personas", {"name": "x", "settings": {"top_p": 7}}, 400, None),
        ("POST", "/agent/personas", {"name": "x", "id": "bad id!"}, 400, "id"),
        ("PATCH", "/agent/personas/nope", {"name": "x"}, 404, None),
        ("POST", "/agent/sessions", {"persona_id": "nope"}, 404, None),
        ("POST", "/agent/sessions", {"patient_id": 999}, 404, None),
        ("POST", "/agent/sessions", {"title": 7}, 400, "title"),
        ("PATCH", f"/agent/sessions/{session_id}", {"title": None}, 400, "title"),
        ("POST", f"/agent/sessions/{session_id}/pins", {}, 400, "content"),
        ("POST", f"/agent/sessions/{session_id}/pins", {"content": ["x"]}, 400, "content"),
        ("GET", f"{messages}?limit=abc", None, 400, "limit"),
        ("GET", f"{messages}?limit=-1", None, 400, "limit"),
        ("GET", "/agent/sessions?offset=x", None, 400, "offset"),
        ("POST", "/agent/documents", {"title": "t"}, 400, "content"),
        ("GET", "/agent/documents/search", None, 400, "q"),
        ("GET", "/agent/documents/999", None, 404, None),
        ("PATCH", "/agent/documents/999", {"title": "x"}, 404, None),
        ("POST", "/agent/patients", {"name": "M", "birth_date": "yesterday"}, 400, "birth_date"),
        ("POST", f"/agent/patients/{patient}/medications", {"dosage": "1"}, 400, "name"),
        (
            "POST",
            f"/agent/patients/{patient}/medications",
            {"name": "X", "times": ["8am"]},
            400,
            "times",
        ),
        ("POST", f"/agent/patients/{patient}/vitals", {"kind": "w", "value": "a"}, 400, "value"),
        ("POST", f"/agent/patients/{patient}/appointments", {"provider": "D"}, 400, None),
        ("PATCH", f"/agent/patients/{patient}", {"name": ""}, 400, "name"),
        ("PATCH", f"/agent/patients/{patient}", {"height": 1}, 400, "height"),
        ("POST", f"/agent/patients/{patient}/pets", {"name": "Rex"}, 404, None),
        ("GET", "/agent/patients/999/vitals", None, 404, None),
        ("POST", "/agent/patients/999/vitals", {"kind": "w", "value": 1}, 404, None),
        ("DELETE", f"/agent/sessions/{session_id}/messages", None, 405, None),
    ]
    for method, path, body, status, param in cases:
        if isinstance(body, bytes):
            response = await client.request(method, path, content=body)
        else:
            response = await client.request(method, path, json=body)
        error = error_of(response, status)
        if param is not None:
            assert error["param"] == param, (method, path, body, error)
            assert param in error["message"], (method, path, error)
    # Nothing was stored by the bad turns.
    assert await messages_of(client, session_id) == []


async def test_a_body_over_the_limit_is_a_413(db: str, backend: ScriptedBackend) -> None:
    with agent_gateway(db, {"scripted": backend}) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            session_id = await session_of(client)
            response = await client.post(
                f"/agent/sessions/{session_id}/messages",
                json={"input": "x" * (33 * 1024 * 1024)},
            )
    error_of(response, 413)


# -- ownership ----------------------------------------------------------------------------

KEY_A, KEY_B = "sk-agent-a", "sk-agent-b"


async def test_sessions_belong_to_the_key_that_created_them(
    db: str, backend: ScriptedBackend
) -> None:
    with agent_gateway(db, {"scripted": backend}, keys=(KEY_A, KEY_B)) as server:
        a = httpx.AsyncClient(base_url=server.url, headers={"authorization": f"Bearer {KEY_A}"})
        b = httpx.AsyncClient(base_url=server.url, headers={"x-api-key": KEY_B})
        anonymous = httpx.AsyncClient(base_url=server.url)
        async with a, b, anonymous:
            error_of(await anonymous.get("/agent/sessions"), 401)
            persona = (await a.post("/agent/personas", json={"name": "A's"})).json()
            assert persona["shared"] is False
            session_id = await session_of(a, persona_id=persona["id"])
            await a.post(f"/agent/sessions/{session_id}/messages", json={"input": "secret"})
            await a.post(f"/agent/sessions/{session_id}/pins", json={"content": "pinned"})

            base = f"/agent/sessions/{session_id}"
            for method, path, body in [
                ("GET", base, None),
                ("PATCH", base, {"title": "mine now"}),
                ("DELETE", base, None),
                ("GET", f"{base}/messages", None),
                ("POST", f"{base}/messages", {"input": "let me in"}),
                ("POST", f"{base}/messages", {"input": "let me in", "stream": True}),
                ("GET", f"{base}/pins", None),
                ("POST", f"{base}/pins", {"content": "x"}),
                ("DELETE", f"{base}/pins/1", None),
                ("GET", f"{base}/summaries", None),
                ("GET", f"/agent/personas/{persona['id']}", None),
            ]:
                response = await b.request(method, path, json=body)
                # The same answer as for a session that does not exist: nothing leaks.
                error = error_of(response, 404)
                assert "secret" not in response.text, error
            error_of(await b.post("/agent/sessions", json={"persona_id": persona["id"]}), 404)
            assert (await b.get("/agent/sessions")).json() == {"sessions": []}
            assert (await b.get("/agent/personas")).json() == {"personas": []}
            # A's session is intact, and A still sees it.
            assert [m["content"] for m in await messages_of(a, session_id)] == [
                "secret",
                "Hello from llmbridge.",
            ]
            assert [s["id"] for s in (await a.get("/agent/sessions")).json()["sessions"]] == [
                session_id
            ]
            # B's documents and patients are B's: A's turns never see them.
            await b.post("/agent/documents", json={"title": "B", "content": "B's zebra notes"})
            await b.post("/agent/patients", json={"name": "Zelda Bee"})
            assert (await a.get("/agent/documents")).json() == {"documents": []}
            assert (await a.get("/agent/patients")).json() == {"patients": []}
            await a.post(f"{base}/messages", json={"input": "zebra notes about Zelda?"})
            assert "zebra" not in backend.requests[-1].messages[0].text
            assert "Zelda" not in backend.requests[-1].messages[0].text

    # Stored: the key's hash, never the key.
    store = await AgentStore.open(db)
    try:
        session = await store.find_session(session_id)
        assert session is not None and session.owner is not None
        assert KEY_A not in session.owner and len(session.owner) == 32
    finally:
        await store.close()


async def test_shared_personas_are_visible_to_every_key_and_changed_by_none(
    db: str, backend: ScriptedBackend
) -> None:
    store = await AgentStore.open(db)
    try:  # created without a key (as the CLI does): shared
        await store.put_persona("nurse", name="Nurse", prompt="You are a nurse.")
    finally:
        await store.close()
    with agent_gateway(db, {"scripted": backend}, keys=(KEY_A,)) as server:
        headers = {"authorization": f"Bearer {KEY_A}"}
        async with httpx.AsyncClient(base_url=server.url, headers=headers) as a:
            (persona,) = (await a.get("/agent/personas")).json()["personas"]
            assert persona["id"] == "nurse" and persona["shared"] is True
            error_of(await a.patch("/agent/personas/nurse", json={"name": "Mine"}), 403)
            error_of(await a.delete("/agent/personas/nurse"), 403)
            error_of(await a.post("/agent/personas", json={"name": "x", "id": "nurse"}), 409)
            session_id = await session_of(a, persona_id="nurse")
            await a.post(f"/agent/sessions/{session_id}/messages", json={"input": "Hi"})
    assert backend.requests[-1].messages[0].text.startswith("You are a nurse.")


# -- memory across a restart ---------------------------------------------------------------


async def test_memory_stays_within_budget_across_a_gateway_restart(db_url: str) -> None:
    budget = 600
    first = ScriptedBackend("scripted")
    long_reply = [" ".join(f"word{n}" for n in range(40))]  # ~ 80 tokens an answer
    first.default = Script(text=long_reply)
    with agent_gateway(db_url, {"scripted": first}, history_budget=budget) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            persona = await client.post(
                "/agent/personas", json={"name": "Nurse", "prompt": "You are a nurse."}
            )
            session_id = await session_of(client, persona_id=persona.json()["id"])
            for fact in ("Mary is allergic to penicillin", "Mary takes metformin at 8"):
                await client.post(f"/agent/sessions/{session_id}/pins", json={"content": fact})
            for n in range(8):
                response = await client.post(
                    f"/agent/sessions/{session_id}/messages", json={"input": f"turn {n}"}
                )
                assert response.status_code == 200

    # A new gateway on the same database: the conversation goes on.
    second = ScriptedBackend("scripted", default=Script(text=["Noted."]))
    with agent_gateway(db_url, {"scripted": second}, history_budget=budget) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            response = await client.post(
                f"/agent/sessions/{session_id}/messages", json={"input": "What do we know?"}
            )
            assert response.json()["reply"] == "Noted."
            stored = await messages_of(client, session_id)
    assert len(stored) == 18
    (request,) = second.requests
    system, *history, question = request.messages
    assert system.text.startswith("You are a nurse.") and question.text == "What do we know?"
    assert sum(count_message_tokens(m) for m in history) <= budget
    texts = [m.text for m in history]
    (pins,) = [t for t in texts if t.startswith(PINS_PREFIX)]
    assert "penicillin" in pins and "metformin at 8" in pins
    # The last exchange before the restart is there as recent history.
    assert any(t.startswith(RECENT_PREFIX + "turn 7") for t in texts), texts
    # ... and the oldest turns did not fit: the budget, not the history, sets the size.
    assert not any("turn 0" in t for t in texts)


# -- the service itself --------------------------------------------------------------------


async def test_an_unopenable_database_leaves_the_gateway_serving(
    backend: ScriptedBackend,
) -> None:
    dead = "postgresql://nobody@127.0.0.1:1/agent"  # nothing listens on port 1
    with agent_gateway(dead, {"scripted": backend}) as server:
        async with httpx.AsyncClient(base_url=server.url) as client:
            error = error_of(await client.get("/agent/sessions"), 503)
            assert "database could not be opened" in error["message"]
            assert "nobody" not in error["message"]
            assert (await client.get("/health")).status_code == 200


def test_the_agent_can_be_turned_off(db: str, backend: ScriptedBackend) -> None:
    # Stored responses off too: they would open the database on their own
    # (tests/gateway/test_responses_store.py).
    with agent_gateway(db, {"scripted": backend}, enabled=False, store_responses="off") as server:
        error_of(httpx.get(server.url + "/agent/sessions"), 404)
    assert not Path(db).exists()  # and its database is never opened


def test_errors_keep_their_status_and_a_bug_its_secret() -> None:
    """The agent's routes classify nothing (agent/routes.py): the store's and the
    backends' core errors are rendered as they come; anything else is a bug, a 500
    that does not show its message."""
    from llmbridge.web.render import Dialect, error_response

    def rendered(exc: BaseException) -> tuple[int, dict[str, Any]]:
        response = error_response(Dialect.OPENAI, exc, "req_1")
        return response.status_code, orjson.loads(bytes(response.body))["error"]

    assert rendered(BackendError("x"))[0] == 502
    assert rendered(BackendUnavailableError("x"))[0] == 503
    status, error = rendered(ServiceUnavailableError("the database is unavailable"))
    assert (status, error["type"]) == (503, "api_error")
    status, error = rendered(ConflictError("persona id 'cook' is taken"))
    assert (status, error["code"]) == (409, "conflict")
    status, error = rendered(RuntimeError("boom"))
    assert status == 500 and "boom" not in error["message"]


@pytest.mark.parametrize("stream", [False, True])
async def test_a_dead_primary_with_a_fallback_serves_the_turn_as_it_serves_api_chat(
    db: str, stream: bool
) -> None:
    """An agent turn used to reach its backend around the gateway's resilience,
    so with a dead primary and a configured fallback ``/api/chat`` was served by the
    fallback while ``POST /agent/sessions/{id}/messages`` answered 503."""
    down = Script(fail_before=BackendUnavailableError("connection refused"))
    primary = ScriptedBackend("primary", default=down)
    spare = ScriptedBackend("spare", default=Script(text=["spare ", "answer"]))
    routes = ({"name": "main", "backend": "primary", "fallbacks": [{"backend": "spare"}]},)
    with agent_gateway(db, {"primary": primary, "spare": spare}, routes=routes) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            chat = await client.post(
                "/api/chat",
                json={
                    "model": "main",
                    "stream": False,
                    "messages": [{"role": "user", "content": "Hi"}],
                },
            )
            assert chat.status_code == 200 and chat.json()["message"]["content"] == "spare answer"
            assert chat.headers["x-llmbridge-fallback"] == "spare/main"
            session_id = await session_of(client)
            turn = await client.post(
                f"/agent/sessions/{session_id}/messages",
                json={"input": "Hi", "model": "main", "stream": stream},
            )
            assert turn.status_code == 200, turn.text
            if stream:
                done = [data for name, data in sse_events(turn.text) if name == "done"]
                assert done and done[0]["reply"] == "spare answer"
            else:
                assert turn.json()["reply"] == "spare answer"
            stored = await messages_of(client, session_id)
            assert [m["role"] for m in stored] == ["user", "assistant"]
            assert stored[-1]["content"] == "spare answer"
