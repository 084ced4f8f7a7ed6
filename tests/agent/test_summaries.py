"""Summaries by default, and domain context sized by the model.

- The runtime summarises long sessions with no configuration, with the session's own
  model; ``agent.summaries: false`` turns it off; ``summary_model`` overrides it.
- A background summary never delays a reply: on a backend that serves one generation
  at a time (as the embedded model does), a turn that arrives while a summary is
  being written cancels it, and the summary is written once the turn is over. The
  test asserts the order of what the backend saw, not timings.
- A failed summary is retried, and no message is lost in the meantime.
- ``POST /agent/sessions/{id}/summaries`` writes one now.
- The eldercare block is sized from the model's context window (the backend's report
  or the route's ``context_length``): a small window gets a small block, a large one
  the whole record.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmbridge.agent.config import AgentConfig
from llmbridge.agent.context_providers import (
    DEFAULT_CONTEXT_BUDGET,
    MAX_CONTEXT_BUDGET,
    MIN_CONTEXT_BUDGET,
    context_budget,
)
from llmbridge.agent.memory import (
    SUMMARIES_PREFIX,
    SUMMARY_SYSTEM_PROMPT,
    MemoryBuilder,
    Summariser,
    SummariserConfig,
)
from llmbridge.agent.runtime import AgentRuntime
from llmbridge.agent.service import AgentRequest
from llmbridge.agent.store import AgentStore
from llmbridge.agent.tools import ToolRegistry
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.features.token_count import count_text_tokens
from llmbridge.gateway.config import GatewayConfig
from llmbridge.serving.models import Models
from tests.agent.factories import EldercareFactory
from tests.agent.serving import agent_gateway
from tests.waiting import scaled

SUMMARY_TEXT = "They counted turns."
# Seconds: a hang fails the test instead of stalling the run (not a timing check).
GUARD = scaled(60)


def _is_summary(request: ChatRequest) -> bool:
    head = SUMMARY_SYSTEM_PROMPT.split("{", 1)[0]
    return bool(request.messages) and request.messages[0].text.startswith(head)


class Writer(ScriptedBackend):
    """Answers turns with ``ok`` and summary requests with ``SUMMARY_TEXT``."""

    def __init__(self, name: str, **options: Any) -> None:
        super().__init__(name, default=Script(text=["ok"]), **options)

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if _is_summary(request):
            self.enqueue(Script(text=[SUMMARY_TEXT]))
        async for event in super().chat(request):
            yield event


class OneAtATime(Writer):
    """A backend that serves one generation at a time, like the embedded model (one
    KV cache behind a lock), and logs what it serves. Until ``release`` is set, a
    summary request never finishes on its own: only a cancellation ends it."""

    def __init__(self, name: str) -> None:
        super().__init__(name)
        self.lock = asyncio.Lock()
        self.log: list[str] = []
        self.release = asyncio.Event()
        self.summary_started = asyncio.Event()

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        kind = "summary" if _is_summary(request) else "turn"
        async with self.lock:
            self.log.append(f"{kind} start")
            try:
                if kind == "summary":
                    self.summary_started.set()
                    await self.release.wait()
                async for event in super().chat(request):
                    yield event
            except (asyncio.CancelledError, GeneratorExit):
                self.log.append(f"{kind} cancelled")
                raise
            self.log.append(f"{kind} end")


async def _runtime(
    backend: ScriptedBackend,
    database: Path,
    routes: tuple[dict[str, Any], ...] = (),
    **agent: Any,
) -> AgentRuntime:
    """The agent as the gateway opens it, over ``backend`` (the default backend)."""
    config = GatewayConfig.model_validate(
        {
            "backends": {backend.name: {"type": "scripted"}},
            "default_backend": backend.name,
            "models": list(routes),
            "agent": {"database": str(database), **agent},
        }
    )
    models = Models(config, {backend.name: backend})
    return await AgentRuntime.open(config.agent, models, tools=ToolRegistry())


async def _fill(store: AgentStore, session_id: str, count: int) -> list[int]:
    """``count`` stored messages, alternating user and assistant."""
    ids = []
    for n in range(count):
        role = "user" if n % 2 == 0 else "assistant"
        ids.append((await store.add_message(session_id, role, f"turn {n}", model="m")).id)
    return ids


# -- on by default ---------------------------------------------------------------------


def test_summaries_are_on_by_default_with_the_sessions_model() -> None:
    config = AgentConfig()
    assert config.summaries is True and config.summary_model is None


async def test_a_long_session_is_summarised_with_its_own_model(tmp_path: Path) -> None:
    backend = Writer("local", models=("qwen3",))
    runtime = await _runtime(backend, tmp_path / "agent.db")
    try:
        service, summariser = runtime.service, runtime.summariser
        assert summariser is not None and summariser.model is None
        session = await service.create_session()
        for n in range(15):  # 30 messages: the oldest 20 are summarised, 10 kept
            reply = await service.run_agent(
                AgentRequest(f"count {n}", model="qwen3", session_id=session.id)
            )
            assert reply.text == "ok"
        await summariser.drain()
        (summary,) = await service.summaries(session.id)
        stored = await service.messages(session.id, limit=100)
        assert summary.content == SUMMARY_TEXT and summary.model == "qwen3"
        assert summary.message_ids == tuple(m.id for m in stored[:20])
        assert len(stored) == 30  # summarising keeps every message
        (written,) = [r for r in backend.requests if _is_summary(r)]
        assert written.model == "qwen3"
        assert "USER: count 0" in written.messages[-1].text

        # The next turn carries the summary instead of the messages it covers.
        await service.run_agent(AgentRequest("and?", model="qwen3", session_id=session.id))
        texts = [m.text for m in backend.requests[-1].messages]
        assert any(t.startswith(SUMMARIES_PREFIX) and SUMMARY_TEXT in t for t in texts)
        assert not any("count 0" in t for t in texts)
    finally:
        await runtime.aclose()


async def test_summaries_can_be_turned_off(tmp_path: Path) -> None:
    backend = Writer("local")
    runtime = await _runtime(backend, tmp_path / "agent.db", summaries=False)
    try:
        assert runtime.summariser is None and runtime.service.summariser is None
        session = await runtime.service.create_session()
        for n in range(16):
            await runtime.service.run_agent(
                AgentRequest(f"count {n}", model="scripted", session_id=session.id)
            )
        assert not any(_is_summary(r) for r in backend.requests)
        assert await runtime.service.summaries(session.id) == []
    finally:
        await runtime.aclose()


# -- never delaying a reply --------------------------------------------------------------


async def test_a_reply_is_never_delayed_by_a_summary(tmp_path: Path) -> None:
    backend = OneAtATime("local")
    runtime = await _runtime(backend, tmp_path / "agent.db")
    try:
        service, summariser = runtime.service, runtime.summariser
        assert summariser is not None
        session = await service.create_session()
        ids = await _fill(service.store, session.id, 28)
        await service.run_agent(AgentRequest("first", model="scripted", session_id=session.id))
        # 30 messages: the summary starts once the turn is over, and holds the model.
        await asyncio.wait_for(backend.summary_started.wait(), GUARD)
        assert backend.log == ["turn start", "turn end", "summary start"]

        # A turn now would wait for the summary forever; instead the summary yields.
        second = service.run_agent(AgentRequest("second", model="scripted", session_id=session.id))
        reply = await asyncio.wait_for(second, GUARD)
        assert reply.text == "ok"
        assert backend.log[2:] == ["summary start", "summary cancelled", "turn start", "turn end"]
        assert summariser.deferred == 1
        assert await service.summaries(session.id) == []  # nothing half-written

        # Once the backend is free again the summary is written after all.
        backend.release.set()
        await asyncio.wait_for(summariser.drain(), GUARD)
        assert backend.log[6:] == ["summary start", "summary end"]
        (summary,) = await service.summaries(session.id)
        assert summary.message_ids == tuple(ids[:20]) and summary.content == SUMMARY_TEXT
        assert len(await service.messages(session.id, limit=100)) == 32
    finally:
        await runtime.aclose()


# -- failures ------------------------------------------------------------------------------


async def test_every_summary_request_opens_with_the_same_bytes(store: AgentStore) -> None:
    """The summary prompt is the same system message for every excerpt; the word limit,
    which follows the excerpt's length, comes after the excerpt (a local model's prefix
    cache keeps the system prompt across summaries)."""
    backend = ScriptedBackend(default=Script(text=[SUMMARY_TEXT]))
    summariser = Summariser(store, backend.chat, "m")
    for words in (1, 40):
        session = await store.create_session()
        for n in range(4):
            text = f"turn {n} " + " ".join(f"w{n}x{j}" for j in range(words))
            await store.add_message(session.id, "user" if n % 2 == 0 else "assistant", text)
        assert await summariser.summarise_once(session.id, force=True) is not None
    first, second = backend.requests
    assert first.messages[0] == second.messages[0]
    assert first.messages[0].text == SUMMARY_SYSTEM_PROMPT
    assert not any(ch.isdigit() for ch in SUMMARY_SYSTEM_PROMPT)
    for request in (first, second):
        (_, excerpt) = request.messages
        assert excerpt.text.startswith("Conversation excerpt:\n\nUSER: turn 0")
        assert excerpt.text.rsplit("\n\n", 1)[1].startswith("Summarise it in at most ")
    assert first.messages[1].text.rsplit(" ", 2)[1] != second.messages[1].text.rsplit(" ", 2)[1]


async def test_a_failed_summary_is_retried_and_no_message_is_lost(store: AgentStore) -> None:
    session = await store.create_session()
    ids = await _fill(store, session.id, 30)
    backend = ScriptedBackend(default=Script(text=[SUMMARY_TEXT]))
    backend.enqueue(Script(fail_before=BackendError("model down")))
    config = SummariserConfig(retry_delays=(0.0,), facts=False)
    summariser = Summariser(store, backend.chat, config=config)
    assert await summariser.schedule(session.id, "m") == 1
    assert summariser.failures == 1 and len(backend.requests) == 2
    (summary,) = await store.last_summaries(session.id, 5)
    assert summary.message_ids == tuple(ids[:20])
    assert len(await store.first_messages(session.id, 100)) == 30


async def test_a_summary_that_keeps_failing_waits_for_the_next_turn(store: AgentStore) -> None:
    session = await store.create_session()
    ids = await _fill(store, session.id, 30)
    backend = ScriptedBackend(default=Script(text=[SUMMARY_TEXT]))
    backend.enqueue(*[Script(fail_before=BackendError("model down"))] * 3)
    config = SummariserConfig(retry_delays=(0.0, 0.0), facts=False)
    summariser = Summariser(store, backend.chat, config=config)
    assert await summariser.schedule(session.id, "m") == 0
    assert summariser.failures == 3
    # Nothing was lost: the newest messages are still in the next turn's context.
    assert await store.last_summaries(session.id, 5) == []
    assert len(await store.first_messages(session.id, 100)) == 30
    context = await MemoryBuilder(store).build(session.id)
    assert context.recent_ids == tuple(ids[-2:])
    # The next turn schedules it again, and this time it is written.
    assert await summariser.schedule(session.id, "m") == 1
    (summary,) = await store.last_summaries(session.id, 5)
    assert summary.message_ids == tuple(ids[:20])


async def test_the_configured_summary_model_overrides_the_sessions(store: AgentStore) -> None:
    session = await store.create_session()
    await _fill(store, session.id, 30)
    backend = ScriptedBackend(default=Script(text=[SUMMARY_TEXT]))
    summariser = Summariser(store, backend.chat, "writer")
    assert await summariser.schedule(session.id, "session-model") == 1
    # The summary, then the facts of the user's statements: both with the writer.
    assert {r.model for r in backend.requests} == {"writer"}


# -- forcing one over HTTP -------------------------------------------------------------------


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


async def test_post_forces_a_summary(db: str) -> None:
    chat = Writer("chat", models=("scripted", "other"))
    with agent_gateway(db, {"chat": chat}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            created = await client.post("/agent/sessions", json={})
            session_id = created.json()["id"]
            url = f"/agent/sessions/{session_id}/summaries"
            nothing = await client.post(url)  # no messages yet
            assert (nothing.status_code, nothing.json()) == (200, {"summary": None})
            for n in range(3):
                turn = await client.post(
                    f"/agent/sessions/{session_id}/messages",
                    json={"input": f"count {n}", "model": "other"},
                )
                assert turn.status_code == 200, turn.text
            listed = await client.get(f"/agent/sessions/{session_id}/messages")
            ids = [m["id"] for m in listed.json()["messages"]]

            forced = await client.post(url)  # far below the threshold: forced anyway
            assert forced.status_code == 201, forced.text
            summary = forced.json()["summary"]
            assert summary["content"] == SUMMARY_TEXT
            assert summary["message_ids"] == ids[:4]  # all but the last exchange
            assert summary["model"] == "other"  # the session's own model
            assert (await client.get(url)).json()["summaries"] == [summary]

            again = await client.post(url, json={"model": "scripted"})
            assert (again.status_code, again.json()) == (200, {"summary": None})

            unknown = await client.post(url, json={"colour": "red"})
            assert unknown.status_code == 400 and unknown.json()["error"]["param"] == "colour"
            missing = await client.post("/agent/sessions/nope/summaries")
            assert missing.status_code == 404
    assert [r.model for r in chat.requests if _is_summary(r)] == ["other"]


async def test_post_names_the_model_and_reports_its_failure(db: str) -> None:
    chat = Writer("chat", models=("scripted", "writer"))
    with agent_gateway(db, {"chat": chat}) as server:
        async with httpx.AsyncClient(base_url=server.url, timeout=30) as client:
            session_id = (await client.post("/agent/sessions", json={})).json()["id"]
            for n in range(3):
                await client.post(f"/agent/sessions/{session_id}/messages", json={"input": f"{n}"})
            url = f"/agent/sessions/{session_id}/summaries"
            # The try and the serving layer's one retry both fail.
            chat.enqueue(*[Script(fail_before=BackendError("model down"))] * 2)
            failed = await client.post(url, json={"model": "writer"})
            assert failed.status_code >= 500 and "model down" in failed.json()["error"]["message"]
            assert (await client.get(url)).json()["summaries"] == []
            listed = await client.get(f"/agent/sessions/{session_id}/messages")
            assert len(listed.json()["messages"]) == 6  # nothing lost
            written = await client.post(url, json={"model": "writer"})
            assert written.status_code == 201 and written.json()["summary"]["model"] == "writer"


# -- the eldercare context follows the model's window ---------------------------------------


def test_the_context_budget_follows_the_window() -> None:
    assert context_budget(None) == DEFAULT_CONTEXT_BUDGET == 800
    assert context_budget(8192) == 819
    assert context_budget(2048) == 204
    assert context_budget(512) == MIN_CONTEXT_BUDGET
    assert context_budget(131072) == MAX_CONTEXT_BUDGET


async def _patient_with_many_medications(store: AgentStore) -> int:
    records = EldercareFactory(store)
    mary = await records.add_patient("Mary Smith", conditions=["Hypertension"])
    for n in range(45):  # ~25 tokens a line: far more than a small model can take
        await records.add_medication(
            mary,
            f"Medication{n}",
            dosage=f"{n + 1}0mg",
            frequency="Once daily",
            purpose=f"condition number {n} of the heart, the kidneys and the lungs",
        )
    return mary


def _eldercare_block(request: ChatRequest, question: str) -> str:
    """The eldercare block of a turn (in its last message, before the question)."""
    turn = request.messages[-1].text
    return turn[turn.index("Patient Information:") : turn.rindex(question)].strip()


QUESTION = "Which medications does she take?"


@pytest.mark.parametrize(
    ("window", "route_window"),
    [(2048, None), (131072, None), (131072, 2048)],
    ids=["small-window", "large-window", "route-says-small"],
)
async def test_the_eldercare_context_is_sized_by_the_models_window(
    tmp_path: Path, window: int, route_window: int | None
) -> None:
    backend = Writer("local", context_length=window)
    routes: tuple[dict[str, Any], ...] = ()
    if route_window is not None:
        routes = ({"name": "m", "backend": "local", "context_length": route_window},)
    runtime = await _runtime(backend, tmp_path / "agent.db", routes)
    try:
        mary = await _patient_with_many_medications(runtime.store)
        session = await runtime.service.create_session(subject_id=mary)
        await runtime.service.run_agent(AgentRequest(QUESTION, model="m", session_id=session.id))
    finally:
        await runtime.aclose()
    block = _eldercare_block(backend.requests[-1], QUESTION)
    effective = route_window or window
    assert block.startswith("Patient Information:\n- Name: Mary Smith")
    assert count_text_tokens(block) <= context_budget(effective)
    if effective == 2048:  # a small window: the block is cut, whole lines kept
        assert "Medication0 10mg" in block and "Medication44" not in block
    else:  # a large window: every medication, more than the old fixed 800 tokens
        assert "Medication44 450mg" in block
        assert count_text_tokens(block) > DEFAULT_CONTEXT_BUDGET
