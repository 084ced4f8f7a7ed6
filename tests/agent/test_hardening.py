"""The agent service under bad input: values the databases refuse are 400s naming the field,
a model's answer holding U+0000 is stored, turns of one session run one at a time,
and documents are bounded in size and indexed off the event loop.

Everything goes through httpx against a real gateway on a loopback port over the
scripted backend, on SQLite and on a real PostgreSQL wherever the issue names
PostgreSQL (``db_url``)."""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncGenerator, AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

import llmbridge.agent.documents as documents_module
from llmbridge.agent.documents import DocumentStore, PreparedIndex, prepare_index
from llmbridge.agent.store import AgentStore
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.store.values import MAX_ID
from tests.agent.serving import agent_gateway, sse_events
from tests.conftest import RunningServer

BEYOND = MAX_ID + 1  # 2**63: one past what SQLite's INTEGER and PostgreSQL's BIGINT hold


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend("scripted")


@pytest.fixture
def server(db_url: str, backend: ScriptedBackend) -> Iterator[RunningServer]:
    with agent_gateway(db_url, {"scripted": backend}) as running:
        yield running


@pytest.fixture
async def client(server: RunningServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=server.url, timeout=60) as http:
        yield http


def _refused(response: httpx.Response, param: str, status: int = 400) -> str:
    """The error's message, after checking the status, the shape and the field named."""
    assert response.status_code == status, response.text
    error: dict[str, Any] = response.json()["error"]
    assert error["param"] == param, error
    assert error["message"].startswith(f"{param}: "), error
    assert "Traceback" not in response.text
    message: str = error["message"]
    return message


async def _created(client: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    response = await client.post(path, json=body)
    assert response.status_code == 201, response.text
    created: dict[str, Any] = response.json()
    return created


# -- ids beyond 64 bits, query integers -------------------------------------------------


async def test_ids_beyond_64_bits_are_400s_naming_the_field(client: httpx.AsyncClient) -> None:
    patient = await _created(client, "/agent/patients", {"name": "Mary"})
    session = await _created(client, "/agent/sessions", {})
    pid, sid = patient["id"], session["id"]
    # In paths: every int route parameter.
    for method, path, param in [
        ("GET", f"/agent/documents/{BEYOND}", "document_id"),
        ("DELETE", f"/agent/documents/{BEYOND}", "document_id"),
        ("GET", f"/agent/patients/{BEYOND}", "patient_id"),
        ("GET", f"/agent/patients/{BEYOND}/vitals", "patient_id"),
        ("GET", f"/agent/patients/{pid}/vitals/{BEYOND}", "record_id"),
        ("DELETE", f"/agent/patients/{pid}/medications/{10**30}", "record_id"),
        ("DELETE", f"/agent/sessions/{sid}/pins/{BEYOND}", "pin_id"),
    ]:
        _refused(await client.request(method, path), param)
    # The largest id the databases hold is simply not there.
    for path in [f"/agent/documents/{MAX_ID}", f"/agent/patients/{pid}/vitals/{MAX_ID}"]:
        assert (await client.get(path)).status_code == 404
    # In bodies and queries.
    for method, path, body, param in [
        ("POST", "/agent/sessions", {"patient_id": BEYOND}, "patient_id"),
        ("PATCH", f"/agent/sessions/{sid}", {"patient_id": BEYOND}, "patient_id"),
        (
            "POST",
            f"/agent/sessions/{sid}/pins",
            {"content": "x", "message_id": BEYOND},
            "message_id",
        ),
        (
            "POST",
            f"/agent/sessions/{sid}/messages",
            {"input": "hi", "document_ids": [1, BEYOND]},
            "document_ids.1",
        ),
    ]:
        _refused(await client.request(method, path, json=body), param)
    _refused(await client.get(f"/agent/sessions/{sid}/messages?after={BEYOND}"), "after")
    assert (await client.get(f"/agent/sessions/{sid}/messages?after={MAX_ID}")).json() == {
        "messages": []
    }


@pytest.mark.parametrize("value", ["²", "¹⁰", "١٢", "１", "-1", " 5", "+5", "1" * 20, "5.0"])
async def test_query_integers_are_plain_ascii_digits(
    tmp_path: Path, backend: ScriptedBackend, value: str
) -> None:
    with agent_gateway(str(tmp_path / "agent.db"), {"scripted": backend}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            patient = await _created(client, "/agent/patients", {"name": "Mary"})
            sid = (await _created(client, "/agent/sessions", {}))["id"]
            for path, param in [
                ("/agent/sessions", "limit"),
                ("/agent/documents", "offset"),
                (f"/agent/sessions/{sid}/messages", "after"),
                (f"/agent/sessions/{sid}/pins", "limit"),
                (f"/agent/sessions/{sid}/summaries", "limit"),
                (f"/agent/patients/{patient['id']}/vitals", "limit"),
            ]:
                _refused(await client.get(path, params={param: value}), param)
            ok = await client.get(f"/agent/sessions/{sid}/messages", params={"limit": "7"})
            assert ok.status_code == 200


# -- non-finite floats, timestamps ------------------------------------------------------


async def test_non_finite_floats_are_400s_naming_the_field(client: httpx.AsyncClient) -> None:
    pid = (await _created(client, "/agent/patients", {"name": "Mary"}))["id"]
    vitals = f"/agent/patients/{pid}/vitals"
    for value in ["nan", "NaN", "inf", "-Infinity", "1e999"]:
        _refused(await client.post(vitals, json={"kind": "weight", "value": value}), "value")
        body = {"kind": "blood_pressure", "value": 120, "secondary_value": value}
        _refused(await client.post(vitals, json=body), "secondary_value")
    vital = await _created(client, vitals, {"kind": "weight", "value": "71.5", "unit": "kg"})
    assert vital["value"] == 71.5
    _refused(await client.patch(f"{vitals}/{vital['id']}", json={"value": "nan"}), "value")
    # Persona settings (PostgreSQL's json refuses Infinity) and a turn's settings.
    for name in ["mirostat_tau", "mirostat_eta"]:
        body = {"name": "P", "settings": {name: "inf"}}
        _refused(await client.post("/agent/personas", json=body), f"settings.{name}")
    persona = await _created(client, "/agent/personas", {"name": "P", "settings": {"seed": 1}})
    patch = {"settings": {"mirostat_tau": "Infinity"}}
    _refused(
        await client.patch(f"/agent/personas/{persona['id']}", json=patch), "settings.mirostat_tau"
    )
    sid = (await _created(client, "/agent/sessions", {}))["id"]
    turn = {"input": "hi", "settings": {"mirostat_eta": "nan"}}
    _refused(
        await client.post(f"/agent/sessions/{sid}/messages", json=turn), "settings.mirostat_eta"
    )
    # NaN as a JSON literal is not JSON at all.
    raw = await client.post(
        vitals,
        content=b'{"kind": "weight", "value": NaN}',
        headers={"content-type": "application/json"},
    )
    assert raw.status_code == 400 and "not valid JSON" in raw.json()["error"]["message"]
    assert [v["value"] for v in (await client.get(vitals)).json()["vitals"]] == [71.5]


async def test_timestamps_must_fall_within_years_1_to_9999_in_utc(
    client: httpx.AsyncClient,
) -> None:
    pid = (await _created(client, "/agent/patients", {"name": "Mary"}))["id"]
    vitals, visits = f"/agent/patients/{pid}/vitals", f"/agent/patients/{pid}/appointments"
    for when in ["0001-01-01T00:00:00+01:00", "9999-12-31T23:30:00-01:00"]:
        body = {"kind": "weight", "value": 70, "measured_at": when}
        message = _refused(await client.post(vitals, json=body), "measured_at")
        assert "years 1-9999" in message
        body = {"provider": "Dr. J", "scheduled_at": when}
        _refused(await client.post(visits, json=body), "scheduled_at")
    # The edges themselves are stored and read back on both databases.
    first = {"kind": "weight", "value": 70, "measured_at": "0001-01-01T00:00:00Z"}
    last = {"kind": "weight", "value": 71, "measured_at": "9999-12-31T23:59:59.999999+00:00"}
    assert (await _created(client, vitals, first))["measured_at"].startswith("0001-01-01T00:00:00")
    assert (await _created(client, vitals, last))["measured_at"].startswith("9999-12-31T23:59:59")
    # Naive means UTC; an offset is converted.
    visit = await _created(
        client, visits, {"provider": "Dr. J", "scheduled_at": "2030-05-01T09:00"}
    )
    later = {"scheduled_at": "2030-05-01T09:00:00-05:00"}
    assert (await client.patch(f"{visits}/{visit['id']}", json=later)).json()["scheduled_at"] == (
        "2030-05-01T14:00:00+00:00"
    )
    late = {"scheduled_at": "9999-12-31T23:00:00-05:00"}
    _refused(await client.patch(f"{visits}/{visit['id']}", json=late), "scheduled_at")


# -- U+0000 -------------------------------------------------------------------------------


async def test_nul_is_a_400_in_every_text_field_path_and_query(client: httpx.AsyncClient) -> None:
    pid = (await _created(client, "/agent/patients", {"name": "Mary"}))["id"]
    sid = (await _created(client, "/agent/sessions", {}))["id"]
    nul = "a\x00b"
    for path, body, param in [
        ("/agent/personas", {"name": nul}, "name"),
        ("/agent/personas", {"name": "P", "prompt": nul}, "prompt"),
        ("/agent/personas", {"name": "P", "settings": {"stop": ["x", nul]}}, "settings.stop.1"),
        ("/agent/personas", {"name": "P", "na\x00me": "x"}, "na\x00me"),
        ("/agent/sessions", {"title": nul}, "title"),
        (f"/agent/sessions/{sid}/messages", {"input": nul}, "input"),
        (f"/agent/sessions/{sid}/messages", {"input": "hi", "model": nul}, "model"),
        (f"/agent/sessions/{sid}/messages", {"input": "hi", "system_prompt": nul}, "system_prompt"),
        (f"/agent/sessions/{sid}/pins", {"content": nul}, "content"),
        ("/agent/documents", {"title": nul, "content": "text"}, "title"),
        ("/agent/documents", {"title": "T", "content": nul}, "content"),
        ("/agent/documents", {"title": "T", "content": "text", "source": nul}, "source"),
        ("/agent/patients", {"name": "M", "conditions": ["diabetes", nul]}, "conditions.1"),
        ("/agent/patients", {"name": "M", "notes": nul}, "notes"),
        (f"/agent/patients/{pid}/caregivers", {"name": nul}, "name"),
        (f"/agent/patients/{pid}/vitals", {"kind": "weight", "value": 1, "note": nul}, "note"),
        (
            f"/agent/patients/{pid}/appointments",
            {"provider": nul, "scheduled_at": "2030-01-01"},
            "provider",
        ),
    ]:
        message = _refused(await client.post(path, json=body), param)
        assert "U+0000" in message
    for method, path, body, param in [
        ("PATCH", f"/agent/sessions/{sid}", {"title": nul}, "title"),
        ("PATCH", f"/agent/patients/{pid}", {"notes": nul}, "notes"),
    ]:
        _refused(await client.request(method, path, json=body), param)
    # In paths and queries.
    for method, path, param in [
        ("GET", "/agent/sessions/a%00b", "session_id"),
        ("DELETE", "/agent/sessions/a%00b", "session_id"),
        ("GET", "/agent/sessions/a%00b/messages", "session_id"),
        ("GET", "/agent/personas/p%00", "persona_id"),
        ("GET", f"/agent/patients/{pid}/vit%00als", "kind"),
        ("GET", "/agent/documents/search?q=a%00b", "q"),
        ("GET", "/agent/sessions?limit=1%00", "limit"),
    ]:
        _refused(await client.request(method, path), param)
    turn = await client.post("/agent/sessions/a%00b/messages", json={"input": "hi"})
    _refused(turn, "session_id")
    # Nothing was stored half way, and the database still answers.
    assert (await client.get("/agent/personas")).json() == {"personas": []}
    assert (await client.get(f"/agent/sessions/{sid}/messages")).json() == {"messages": []}


async def test_a_model_answer_holding_nul_is_stored_not_lost(
    client: httpx.AsyncClient, backend: ScriptedBackend
) -> None:
    sid = (await _created(client, "/agent/sessions", {}))["id"]
    backend.enqueue(Script(text=["before\x00", "after"]))
    reply = await client.post(f"/agent/sessions/{sid}/messages", json={"input": "one"})
    assert reply.status_code == 200, reply.text
    assert reply.json()["reply"] == "before\x00after"  # the client gets what the model said
    backend.enqueue(Script(text=["streamed\x00", "answer"]))
    streamed = await client.post(
        f"/agent/sessions/{sid}/messages", json={"input": "two", "stream": True}
    )
    assert [name for name, _ in sse_events(streamed.text)][-1] == "done"
    backend.enqueue(Script(text=["cut\x00", "off", "here"], fail_after=1))
    broken = await client.post(
        f"/agent/sessions/{sid}/messages", json={"input": "three", "stream": True}
    )
    assert [name for name, _ in sse_events(broken.text)][-1] == "error"
    stored = (await client.get(f"/agent/sessions/{sid}/messages")).json()["messages"]
    assert [(m["role"], m["content"], m["status"]) for m in stored] == [
        ("user", "one", "complete"),
        ("assistant", "before\ufffdafter", "complete"),
        ("user", "two", "complete"),
        ("assistant", "streamed\ufffdanswer", "complete"),
        ("user", "three", "complete"),
        ("assistant", "cut\ufffd", "incomplete"),
    ]
    assert stored[1]["id"] == reply.json()["message_id"]


async def test_the_store_keeps_text_it_cannot_hold_as_replacement_characters(
    any_store: AgentStore,
) -> None:
    session = await any_store.create_session()
    message = await any_store.add_message(
        session.id,
        "assistant",
        "x\x00y\ud800z",
        tool_data={
            "calls": [{"name": "f\x00", "arguments": {"k\x00": "v\udfff"}}],
            "n": float("nan"),
        },
        model="m\x00",
    )
    (read,) = await any_store.last_messages(session.id, 10)
    assert read.id == message.id and read.content == "x\ufffdy\ufffdz"
    assert read.tool_data == {
        "calls": [{"name": "f\ufffd", "arguments": {"k\ufffd": "v\ufffd"}}],
        "n": None,
    }
    assert read.model == "m\ufffd"
    summary = await any_store.add_summary(session.id, "sum\x00mary", [message.id])
    assert summary is not None
    assert [s.content for s in await any_store.last_summaries(session.id, 5)] == ["sum\ufffdmary"]
    await any_store.add_pin(session.id, "pin\x00")
    assert [p.content for p in await any_store.pins(session.id)] == ["pin\ufffd"]
    documents = DocumentStore(any_store)
    document_id = await documents.add("ti\x00tle", "body\x00text about insulin", source="s\x00")
    document = await documents.get(document_id)
    assert (document.title, document.content, document.source) == (
        "ti\ufffdtle",
        "body\ufffdtext about insulin",
        "s\ufffd",
    )
    assert [h.document_id for h in await documents.search("insulin")] == [document_id]


async def test_a_value_the_database_refuses_is_an_invalid_request(
    any_store: AgentStore,
) -> None:
    """The safety net under the HTTP checks: one exception for both drivers' refusals,
    a 400 (``store/errors.py``)."""
    session = await any_store.create_session()
    with pytest.raises(InvalidRequestError) as refused:
        await any_store.find_message(session.id, BEYOND)
    assert refused.value.status_code == 400
    with pytest.raises(InvalidRequestError):
        await DocumentStore(any_store).find(BEYOND)
    with pytest.raises(InvalidRequestError):
        await any_store.add_pin(session.id, "fact", message_id=BEYOND)
    assert await any_store.find_message(session.id, MAX_ID) is None


# -- one turn at a time per session ------------------------------------------------------


class AnsweringBackend(ScriptedBackend):
    """Answers ``question N`` with ``answer to question N``, in a few chunks."""

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        question = request.messages[-1].text
        # Queued and taken in the same step (no await between): no other turn's script.
        self.enqueue(Script(text=["answer ", "to ", question], chunk_delay=0.001))
        async for event in super().chat(request):
            yield event


_QUESTION = re.compile(r"(?<!answer to )question (\d+)")
_ANSWER = re.compile(r"answer to question (\d+)")


async def test_concurrent_turns_on_one_session_run_one_at_a_time(tmp_path: Path) -> None:
    """The lock is in the process, whatever the database: SQLite is enough."""
    backend = AnsweringBackend("scripted")
    turns = 200
    with agent_gateway(str(tmp_path / "agent.db"), {"scripted": backend}) as server:
        limits = httpx.Limits(max_connections=turns, max_keepalive_connections=turns)
        async with httpx.AsyncClient(base_url=server.url, timeout=300, limits=limits) as client:
            sid = (await _created(client, "/agent/sessions", {}))["id"]
            responses = await asyncio.gather(
                *(
                    client.post(f"/agent/sessions/{sid}/messages", json={"input": f"question {n}"})
                    for n in range(turns)
                )
            )
            assert [r.status_code for r in responses] == [200] * turns
            stored = (
                await client.get(f"/agent/sessions/{sid}/messages", params={"limit": 1000})
            ).json()["messages"]
    # Each stored answer follows its own question.
    assert len(stored) == 2 * turns
    for question, answer in zip(stored[::2], stored[1::2], strict=True):
        assert (question["role"], answer["role"]) == ("user", "assistant")
        assert answer["content"] == f"answer to {question['content']}"
    for response in responses:
        body = response.json()
        assert body["reply"] == f"answer to {_question_of(stored, body['user_message_id'])}"
        assert body["message_id"] == _next_id(stored, body["user_message_id"])
    # Each turn's history holds only answered questions: none in flight.
    chats = [r for r in backend.requests if r.messages[-1].text.startswith("question ")]
    assert len(chats) == turns
    for number, chat in enumerate(chats):
        history = "\n".join(m.text for m in chat.messages[:-1])
        asked = set(_QUESTION.findall(history))
        assert asked <= set(_ANSWER.findall(history)), chat.messages[-1].text
        if number:  # the turn before it is over: its answer is in the history
            assert f"answer to {chats[number - 1].messages[-1].text}" in history


def _question_of(stored: list[dict[str, Any]], message_id: int) -> str:
    return next(str(m["content"]) for m in stored if m["id"] == message_id)


def _next_id(stored: list[dict[str, Any]], message_id: int) -> int:
    index = next(i for i, m in enumerate(stored) if m["id"] == message_id)
    return int(stored[index + 1]["id"])


# -- documents: a size limit, indexing off the event loop ---------------------------------


async def test_a_document_over_the_limit_is_a_413_naming_it(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    with agent_gateway(
        str(tmp_path / "agent.db"), {"scripted": backend}, max_document_bytes=1000
    ) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            for content in ["a" * 1001, "é" * 501]:  # é is two bytes in UTF-8
                response = await client.post(
                    "/agent/documents", json={"title": "T", "content": content}
                )
                message = _refused(response, "content", 413)
                assert "agent.max_document_bytes" in message and "1000 bytes" in message
            document = await _created(
                client, "/agent/documents", {"title": "T", "content": "é" * 500}
            )
            patched = await client.patch(
                f"/agent/documents/{document['id']}", json={"content": "word " * 201}
            )
            _refused(patched, "content", 413)
            kept = (await client.get(f"/agent/documents/{document['id']}")).json()
            assert kept["content"] == "é" * 500


async def test_a_document_of_many_insert_batches_is_indexed_whole(
    any_store: AgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(documents_module, "INSERT_BATCH", 7)
    content = _legal_document(300)
    documents = DocumentStore(any_store)
    document_id = await documents.add("Lease", content)
    prepared = prepare_index(content)
    assert len(prepared.passages) > 7
    last_clause = "indemnitor299"
    hits = await documents.search(last_clause)
    assert [(h.document_id, h.ordinal) for h in hits] == [(document_id, len(prepared.passages) - 1)]
    # Re-indexing replaces every row.
    await documents.update(document_id, content=_legal_document(20))
    assert await documents.search(last_clause) == []
    assert [h.document_id for h in await documents.search("indemnitor19")] == [document_id]


async def test_health_answers_while_a_large_legal_document_is_indexed(
    tmp_path: Path, backend: ScriptedBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ordering, not timing: the splitting and counting is held at a gate in its
    worker thread until ``/health`` has answered (on the event loop it would block the
    loop, and ``/health`` would never answer); then ``/health`` answers again while
    the rows are being written, before that finishes."""
    preparing, release = threading.Event(), threading.Event()
    writing, written = threading.Event(), threading.Event()

    def gated_prepare(content: str, chunk_tokens: int) -> PreparedIndex:
        preparing.set()
        assert release.wait(60), "the test never opened the gate"
        return prepare_index(content, chunk_tokens)

    original_index = documents_module._index

    async def watched_index(*args: Any) -> None:
        writing.set()
        try:
            await original_index(*args)
        finally:
            written.set()

    monkeypatch.setattr(documents_module, "prepare_index", gated_prepare)
    monkeypatch.setattr(documents_module, "_index", watched_index)
    content = _legal_document(5000)  # 1.65 MB, 55,000 distinct words
    assert len(content.encode()) < documents_module.MAX_DOCUMENT_BYTES
    with agent_gateway(str(tmp_path / "agent.db"), {"scripted": backend}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=60) as client:
            upload = asyncio.create_task(
                client.post("/agent/documents", json={"title": "Master lease", "content": content})
            )
            assert await asyncio.to_thread(preparing.wait, 60)
            assert (await client.get("/health")).status_code == 200
            assert not upload.done() and not writing.is_set()
            release.set()
            assert await asyncio.to_thread(writing.wait, 60)
            assert (await client.get("/health")).status_code == 200
            assert not written.is_set()  # answered while the rows were being written
            response = await upload
            assert response.status_code == 201, response.text
            hits = await client.get("/agent/documents/search", params={"q": "indemnitor4999"})
            assert [h["document_id"] for h in hits.json()["hits"]] == [response.json()["id"]]


def _legal_document(clauses: int) -> str:
    """A long contract whose every clause brings its own words (the worst case for the
    index: one posting per word)."""
    return "\n\n".join(
        f"Section {n}. Indemnification. The indemnitor{n} shall defend, indemnify and hold "
        f"harmless the indemnitee{n}, its lessor{n} and assignee{n}, from and against all "
        f"claims{n}, damages{n} and liabilities{n} arising under subsection{n} of the master "
        f"lease{n}, save where caused by the gross negligence{n} of the licensee{n}."
        for n in range(clauses)
    )
