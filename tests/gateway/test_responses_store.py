"""Stateful Responses: ``store``, ``previous_response_id``, ``GET`` and
``DELETE /v1/responses/{id}``, through the official ``openai`` SDK against a gateway
whose agent store is on (SQLite, then PostgreSQL on loopback, as tests/agent does) over
a scripted backend, which shows exactly what a continued request sent the model."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.request import ChatRequest
from tests.agent.serving import agent_gateway
from tests.conftest import RunningServer, openai_client, running_gateway

KEYS = ("key-a", "key-b")


@pytest.fixture
def database(db_url: str) -> str:
    """The agent database: a SQLite file, then a PostgreSQL database
    (``tests/servers.py``' ``db_url``)."""
    return db_url


@pytest.fixture
def backend() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",))


@pytest.fixture
def server(database: str, backend: ScriptedBackend) -> Iterator[RunningServer]:
    with agent_gateway(database, {"scripted": backend}, keys=KEYS) as running:
        yield running


def said(request: ChatRequest) -> list[tuple[str, str]]:
    return [(message.role, message.text) for message in request.messages]


def test_a_stored_response_is_continued_retrieved_and_deleted(
    server: RunningServer, backend: ScriptedBackend
) -> None:
    client = openai_client(server.url, KEYS[0])
    backend.enqueue(Script(text=["first ", "answer"]))
    first = client.responses.create(
        model="scripted", input="question one", instructions="Be brief."
    )
    assert first.store is True
    assert first.previous_response_id is None

    backend.enqueue(Script(text=["second answer"]))
    second = client.responses.create(
        model="scripted", previous_response_id=first.id, input="question two"
    )
    assert second.previous_response_id == first.id
    # The earlier turn's input and output, then the new input; the earlier
    # instructions are not carried over (as OpenAI's API does).
    assert said(backend.requests[-1]) == [
        ("user", "question one"),
        ("assistant", "first answer"),
        ("user", "question two"),
    ]

    backend.enqueue(Script(text=["third answer"]))
    client.responses.create(
        model="scripted",
        previous_response_id=second.id,
        instructions="Be kind.",
        input=[{"role": "user", "content": "question three"}],
    )
    assert said(backend.requests[-1]) == [
        ("system", "Be kind."),
        ("user", "question one"),
        ("assistant", "first answer"),
        ("user", "question two"),
        ("assistant", "second answer"),
        ("user", "question three"),
    ]

    assert client.responses.retrieve(first.id).model_dump() == first.model_dump()
    assert client.responses.retrieve(second.id).model_dump() == second.model_dump()

    assert client.responses.delete(first.id) is None
    with pytest.raises(openai.NotFoundError) as missing:
        client.responses.retrieve(first.id)
    assert first.id in missing.value.message
    with pytest.raises(openai.NotFoundError) as gone:
        client.responses.create(model="scripted", previous_response_id=first.id, input="more")
    assert gone.value.param == "previous_response_id"
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(first.id)
    # Each stored response holds its whole conversation: the second one goes on.
    backend.enqueue(Script(text=["fourth answer"]))
    fourth = client.responses.create(
        model="scripted", previous_response_id=second.id, input="question four"
    )
    assert fourth.output_text == "fourth answer"
    assert said(backend.requests[-1])[0] == ("user", "question one")


def test_another_key_cannot_see_continue_or_delete_a_response(
    server: RunningServer, backend: ScriptedBackend
) -> None:
    owner = openai_client(server.url, KEYS[0])
    other = openai_client(server.url, KEYS[1])
    backend.enqueue(Script(text=["private"]))
    kept = owner.responses.create(model="scripted", input="mine")
    absent = "resp_" + "0" * 24

    def refusal(client: Any, response_id: str, action: str) -> tuple[str | None, str]:
        with pytest.raises(openai.NotFoundError) as caught:
            if action == "retrieve":
                client.responses.retrieve(response_id)
            elif action == "delete":
                client.responses.delete(response_id)
            else:
                client.responses.create(
                    model="scripted", previous_response_id=response_id, input="x"
                )
        assert caught.value.status_code == 404
        return caught.value.param, caught.value.message.replace(response_id, "ID")

    for action in ("retrieve", "delete", "continue"):
        # Exactly the answer for an id that does not exist: nothing leaks.
        assert refusal(other, kept.id, action) == refusal(other, absent, action)
    assert refusal(other, kept.id, "continue")[0] == "previous_response_id"
    assert len(backend.requests) == 1  # no refused continuation reached the model
    assert owner.responses.retrieve(kept.id).output_text == "private"


def test_a_streamed_response_is_stored_before_it_completes(
    server: RunningServer, backend: ScriptedBackend
) -> None:
    client = openai_client(server.url, KEYS[0])
    backend.enqueue(Script(text=["streamed ", "answer"]))
    retrieved = None
    completed = None
    for event in client.responses.create(model="scripted", input="hi", stream=True):
        if event.type == "response.completed":
            completed = event.response
            # The stream is still open: the response is already retrievable.
            retrieved = client.responses.retrieve(completed.id)
    assert completed is not None and retrieved is not None
    assert completed.store is True
    assert retrieved.model_dump() == completed.model_dump()
    assert retrieved.output_text == "streamed answer"

    backend.enqueue(Script(text=["next"]))
    with client.responses.stream(
        model="scripted", previous_response_id=completed.id, input="again"
    ) as stream:
        final = stream.get_final_response()
    assert final.previous_response_id == completed.id
    assert said(backend.requests[-1]) == [
        ("user", "hi"),
        ("assistant", "streamed answer"),
        ("user", "again"),
    ]


def test_input_tokens_counts_the_continued_conversation(
    server: RunningServer, backend: ScriptedBackend
) -> None:
    client = openai_client(server.url, KEYS[0])
    backend.enqueue(Script(text=["a long answer " * 20]))
    first = client.responses.create(model="scripted", input="question " * 20)
    alone = client.responses.input_tokens.count(model="scripted", input="next")
    continued = client.responses.input_tokens.count(
        model="scripted", input="next", previous_response_id=first.id
    )
    assert alone.input_tokens < continued.input_tokens
    with pytest.raises(openai.NotFoundError) as caught:
        openai_client(server.url, KEYS[1]).responses.input_tokens.count(
            model="scripted", input="next", previous_response_id=first.id
        )
    assert caught.value.param == "previous_response_id"


def test_store_false_keeps_nothing(server: RunningServer, backend: ScriptedBackend) -> None:
    client = openai_client(server.url, KEYS[0])
    backend.enqueue(Script(text=["not kept"]), Script(text=["not kept either"]))
    reply = client.responses.create(model="scripted", input="hi", store=False)
    assert reply.store is False
    streamed = list(client.responses.create(model="scripted", input="hi", store=False, stream=True))
    assert streamed[-1].type == "response.completed"
    for response_id in (reply.id, streamed[-1].response.id):
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(response_id)


def test_stored_responses_work_with_the_agent_off(tmp_path: Path, backend: ScriptedBackend) -> None:
    """They are opened on the database at the gateway's start, not by the agent's."""
    database = tmp_path / "no-agent.db"
    with running_gateway(
        {"scripted": backend}, database={"url": f"sqlite:///{database}"}, agent={"enabled": False}
    ) as server:
        assert httpx.get(server.url + "/agent/sessions").status_code == 404  # no agent
        client = openai_client(server.url)
        backend.enqueue(Script(text=["first"]), Script(text=["second"]))
        first = client.responses.create(model="scripted", input="one")
        assert first.store is True
        second = client.responses.create(
            model="scripted", input="two", previous_response_id=first.id
        )
        assert said(backend.requests[-1]) == [
            ("user", "one"),
            ("assistant", "first"),
            ("user", "two"),
        ]
        assert client.responses.retrieve(second.id).output_text == "second"
    with sqlite3.connect(database) as db:
        (kept,) = db.execute("SELECT count(*) FROM responses").fetchone()
    assert kept == 2


def test_without_stored_responses_previous_response_id_is_a_400(
    tmp_path: Path, backend: ScriptedBackend
) -> None:
    """Neither the agent nor stored responses: the gateway is stateless, and opens no
    database for them."""
    database = tmp_path / "never.db"
    with running_gateway(
        {"scripted": backend},
        database={"url": str(database)},
        agent={"enabled": False, "store_responses": "off"},
    ) as server:
        client = openai_client(server.url)
        backend.enqueue(Script(text=["stateless"]))
        reply = client.responses.create(model="scripted", input="hi")
        assert reply.store is False
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="scripted", input="hi", previous_response_id=reply.id)
        assert refused.value.param == "previous_response_id"
        assert "stateless" in refused.value.message
        with pytest.raises(openai.NotFoundError) as missing:
            client.responses.retrieve(reply.id)
        assert "agent.store_responses: off" in missing.value.message
        with pytest.raises(openai.NotFoundError):
            client.responses.delete(reply.id)
    assert not database.exists()


def test_a_failed_save_still_delivers_the_answer(
    tmp_path: Path, backend: ScriptedBackend, caplog: pytest.LogCaptureFixture
) -> None:
    database = tmp_path / "agent.db"
    with agent_gateway(str(database), {"scripted": backend}) as server:
        # The table goes away under the running gateway: every save now fails.
        with sqlite3.connect(database) as db:
            db.execute("DROP TABLE responses")
        client = openai_client(server.url)
        backend.enqueue(Script(text=["still here"]), Script(text=["streamed, still here"]))
        with caplog.at_level("ERROR", logger="llmbridge.gateway"):
            reply = client.responses.create(model="scripted", input="hi")
            events = list(client.responses.create(model="scripted", input="hi", stream=True))
        assert reply.output_text == "still here"
        assert events[-1].type == "response.completed"
        assert events[-1].response.output_text == "streamed, still here"
        failures = [r for r in caplog.records if "was not stored" in r.getMessage()]
        assert len(failures) == 2


@pytest.mark.parametrize("mode", ["explicit", "off"])
def test_the_operator_chooses_which_responses_are_kept(
    tmp_path: Path, backend: ScriptedBackend, mode: str
) -> None:
    """``agent.store_responses``: ``explicit`` keeps only ``"store": true`` replies (the
    Agents SDK leaves ``store`` out: its turns are then not written), ``off`` none."""
    database = str(tmp_path / "agent.db")
    with agent_gateway(database, {"scripted": backend}, store_responses=mode) as server:
        client = openai_client(server.url)
        backend.enqueue(Script(text=["unasked"]), Script(text=["asked"]))
        unasked = client.responses.create(model="scripted", input="hi")
        asked = client.responses.create(model="scripted", input="hi", store=True)
        assert unasked.store is False
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(unasked.id)
        if mode == "explicit":
            assert asked.store is True
            assert client.responses.retrieve(asked.id).output_text == "asked"
        else:
            assert asked.store is False
            with pytest.raises(openai.NotFoundError):
                client.responses.retrieve(asked.id)
