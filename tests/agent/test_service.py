"""The agent service over the gateway's real pipeline and scripted backends: turns,
personas, history, the tool loop (native and emulated tools), and persistence when
a stream breaks."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import pytest

from llmbridge.agent.api import usage_view
from llmbridge.agent.documents import DocumentStore
from llmbridge.agent.domains.eldercare.provider import EldercareProvider
from llmbridge.agent.memory import RECENT_PREFIX, Summariser, SummariserConfig
from llmbridge.agent.persona_settings import AgentSettings
from llmbridge.agent.prompt import FOCUS_INSTRUCTIONS
from llmbridge.agent.service import (
    FINAL_ROUND_NOTE,
    AgentDelta,
    AgentDone,
    AgentRequest,
    AgentService,
    AgentStart,
    AgentToolResult,
)
from llmbridge.agent.store import AgentStore
from llmbridge.agent.tools import (
    SEARCHING_ONLINE,
    SearchResult,
    Tool,
    ToolRegistry,
    web_search_tool,
)
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError, ModelNotFoundError, NotFoundError
from llmbridge.core.messages import ToolResultPart
from llmbridge.core.response import Usage
from llmbridge.gateway.config import GatewayConfig
from llmbridge.serving.models import Models
from tests.agent.factories import EldercareFactory
from tests.waiting import HANG_S, scaled

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _models(native: ScriptedBackend, plain: ScriptedBackend | None = None) -> Models:
    backends: dict[str, Any] = {native.name: native}
    routes = []
    if plain is not None:
        backends[plain.name] = plain
        routes.append({"name": "toolless", "backend": plain.name})
    config = GatewayConfig.model_validate(
        {
            "backends": {name: {"type": "scripted"} for name in backends},
            "default_backend": native.name,
            "models": routes,
            "restrict_models": False,
        }
    )
    return Models(config, backends)


@pytest.fixture
def native() -> ScriptedBackend:
    return ScriptedBackend("native")


@pytest.fixture
def service(store: AgentStore, native: ScriptedBackend) -> AgentService:
    return AgentService(store, _models(native))


async def _events(service: AgentService, request: AgentRequest) -> list[Any]:
    async with aclosing(service.run_agent_stream(request)) as stream:
        return [event async for event in stream]


# -- a turn ------------------------------------------------------------------------------


async def test_a_turn_is_streamed_and_stored(
    service: AgentService, store: AgentStore, native: ScriptedBackend
) -> None:
    native.enqueue(Script(text=["Hello", " there", "."]))
    events = await _events(service, AgentRequest("  Hi!  ", model="scripted"))
    start, *deltas, done = events
    assert isinstance(start, AgentStart) and isinstance(done, AgentDone)
    assert [d.text for d in deltas] == ["Hello", " there", "."]
    assert done.text == "Hello there." and done.rounds == 1
    assert done.usage.output_tokens and done.usage.input_tokens
    assert done.total_tokens == done.usage.input_tokens + done.usage.output_tokens
    stored = await store.last_messages(start.session_id, 10)
    assert [(m.role, m.content, m.status) for m in stored] == [
        ("user", "Hi!", "complete"),
        ("assistant", "Hello there.", "complete"),
    ]
    assert stored[0].id == start.user_message_id and stored[1].id == done.message_id
    assert stored[1].output_tokens == done.usage.output_tokens
    (session,) = await service.list_sessions()
    assert session.id == start.session_id and session.name == "Hi!"
    # The request the backend saw: the focus instructions, then the input.
    (request,) = native.requests
    assert [m.role for m in request.messages] == ["system", "user"]
    assert request.messages[0].text == FOCUS_INSTRUCTIONS
    assert request.messages[1].text == "Hi!"


async def test_persona_settings_and_prompt(
    service: AgentService, store: AgentStore, native: ScriptedBackend
) -> None:
    await store.put_persona(
        "nurse",
        name="Nurse",
        prompt="You are a compassionate eldercare nurse.",
        settings=AgentSettings(temperature=0.7, max_tokens=200, repeat_penalty=1.1).set_values(),
    )
    reply = await service.run_agent(
        AgentRequest(
            "Hello",
            model="scripted",
            persona_id="nurse",
            system_prompt="Be brief.",
            settings=AgentSettings(temperature=0.1),
        )
    )
    (request,) = native.requests
    params = request.params
    assert (params.temperature, params.max_tokens, params.repeat_penalty) == (0.1, 200, 1.1)
    assert request.messages[0].text == (
        f"You are a compassionate eldercare nurse.\n\nBe brief.\n\n{FOCUS_INSTRUCTIONS}"
    )
    session = await store.find_session(reply.session_id)
    assert session is not None and session.persona_id == "nurse"
    # The session remembers its persona.
    await service.run_agent(AgentRequest("Again", model="scripted", session_id=session.id))
    assert native.requests[1].messages[0].text.startswith("You are a compassionate")


async def test_unknown_models_and_personas_store_nothing(store: AgentStore) -> None:
    native = ScriptedBackend("native")
    config = GatewayConfig.model_validate(
        {"backends": {"native": {"type": "scripted"}}, "restrict_models": True}
    )
    strict = AgentService(store, Models(config, {"native": native}))
    with pytest.raises(ModelNotFoundError):
        await strict.run_agent(AgentRequest("hi", model="no-such-model"))
    loose = AgentService(store, _models(native))
    with pytest.raises(NotFoundError, match="no persona 'ghost'"):
        await loose.run_agent(AgentRequest("hi", model="scripted", persona_id="ghost"))
    for session in await store.list_sessions():
        assert await store.last_messages(session.id, 10) == []


async def test_the_history_reaches_the_next_turn(
    service: AgentService, native: ScriptedBackend
) -> None:
    first = await service.run_agent(AgentRequest("My name is Ada.", model="scripted"))
    await service.run_agent(
        AgentRequest("What is my name?", model="scripted", session_id=first.session_id)
    )
    texts = [m.text for m in native.requests[1].messages]
    assert f"{RECENT_PREFIX}My name is Ada." in texts[-3]
    assert texts[-2].startswith(f"{RECENT_PREFIX}Hello from llmbridge.")
    assert texts[-1] == "What is my name?"


async def test_documents_and_domain_context_come_with_the_input_after_the_stable_prompt(
    store: AgentStore, native: ScriptedBackend
) -> None:
    documents = DocumentStore(store)
    await documents.add("Metformin leaflet", "Metformin is taken with meals to limit nausea.")
    records = EldercareFactory(store)
    mary = await records.add_patient("Mary Smith", conditions=["Diabetes"])
    await records.add_medication(mary, "Metformin", dosage="500mg", side_effects=["Nausea"])
    await store.put_persona("nurse", name="Nurse", prompt="You are a nurse.")
    service = AgentService(
        store, _models(native), documents=documents, providers=[EldercareProvider(store)]
    )
    question = "Should Mary take metformin with meals?"
    await service.run_agent(
        AgentRequest(
            question, model="scripted", persona_id="nurse", system_prompt="Answer in one line."
        )
    )
    system, turn = native.requests[0].messages
    assert system.text == f"You are a nurse.\n\nAnswer in one line.\n\n{FOCUS_INSTRUCTIONS}"
    assert turn.role == "user"
    # The seed's order within the turn's context, then the input.
    order = [
        turn.text.index("[Metformin leaflet]"),
        turn.text.index("Patient Information:\n- Name: Mary Smith"),
        turn.text.index(question),
    ]
    assert order == sorted(order) and turn.text.endswith(question)


# -- tools ---------------------------------------------------------------------------


async def test_the_tool_loop_runs_a_round_in_parallel(
    store: AgentStore, native: ScriptedBackend
) -> None:
    started: list[str] = []
    both = asyncio.Event()

    async def weather(arguments: dict[str, Any]) -> str:
        started.append(arguments["city"])
        if len(started) == 2:
            both.set()
        # Only returns if both run at once (run one after the other, the first never does).
        await asyncio.wait_for(both.wait(), scaled(30))
        return f"{arguments['city']}: sunny"

    tools = ToolRegistry([Tool("weather", "Weather by city", CITY, weather)])
    service = AgentService(store, _models(native), tools=tools)
    native.enqueue(
        Script(text=[], tool_calls=[("weather", {"city": "Paris"}), ("weather", {"city": "Oslo"})]),
        Script(text=["Both ", "sunny."]),
    )
    events = await _events(service, AgentRequest("Weather in Paris and Oslo?", model="scripted"))
    kinds = [type(e).__name__ for e in events]
    assert kinds == [
        "AgentStart",
        "AgentToolCall",
        "AgentToolCall",
        "AgentToolResult",
        "AgentToolResult",
        "AgentDelta",
        "AgentDelta",
        "AgentDone",
    ]
    results = [e for e in events if isinstance(e, AgentToolResult)]
    assert [r.content for r in results] == ["Paris: sunny", "Oslo: sunny"]
    done = events[-1]
    assert done.text == "Both sunny." and done.rounds == 2
    first, second = native.requests
    assert [t.name for t in first.tools] == ["weather"] and second.tools
    answered = second.messages[-1]
    assert answered.role == "tool"
    assert [p.content for p in answered.parts if isinstance(p, ToolResultPart)] == [
        "Paris: sunny",
        "Oslo: sunny",
    ]
    stored = (await store.last_messages(done.session_id, 1))[0]
    assert stored.content == "Both sunny."
    assert stored.tool_data is not None
    assert [c["arguments"]["city"] for c in stored.tool_data["calls"]] == ["Paris", "Oslo"]
    assert [r["content"] for r in stored.tool_data["results"]] == ["Paris: sunny", "Oslo: sunny"]


async def test_the_loop_is_bounded(store: AgentStore) -> None:
    looping = ScriptedBackend("native", default=Script(text=[], tool_calls=[("weather", {})]))

    async def weather(arguments: dict[str, Any]) -> str:
        return "rain"

    tools = ToolRegistry([Tool("weather", "Weather", {"type": "object"}, weather)])
    service = AgentService(store, _models(looping), tools=tools, max_rounds=2)
    looping.enqueue(Script(text=["x"], tool_calls=[("weather", {})]))
    looping.enqueue(Script(text=[], tool_calls=[("weather", {})]))
    looping.enqueue(Script(text=["Rain all day."]))
    reply = await service.run_agent(AgentRequest("Weather?", model="scripted"))
    assert reply.rounds == 3 and len(reply.tool_calls) == 2
    assert reply.text == "xRain all day."
    final = looping.requests[-1]
    assert final.tools == ()  # the seed's last generation runs without tools
    notes = [m.text for m in final.messages if m.role == "system"]
    assert any(n.startswith(FINAL_ROUND_NOTE) and "[weather] rain" in n for n in notes)
    assert all(m.role != "tool" and not m.tool_calls for m in final.messages)


async def test_web_search_shows_the_seed_marker(store: AgentStore, native: ScriptedBackend) -> None:
    class Fake:
        name = "fake"

        async def search(self, query: str, max_results: int) -> list[SearchResult]:
            return [SearchResult("Price", "https://p.example", "43,250 USD")]

    service = AgentService(store, _models(native), tools=ToolRegistry([web_search_tool(Fake())]))
    native.enqueue(
        Script(text=[], tool_calls=[("web_search", {"query": "bitcoin price"})]),
        Script(text=["It is ", "$43,250."]),
    )
    events = await _events(service, AgentRequest("Bitcoin price?", model="scripted"))
    deltas = [e.text for e in events if isinstance(e, AgentDelta)]
    assert deltas == [f"{SEARCHING_ONLINE}\n\n", "It is ", "$43,250."]
    assert isinstance(events[1], AgentDelta)  # the marker comes before the search runs
    done = events[-1]
    assert done.text == f"{SEARCHING_ONLINE}\n\nIt is $43,250."
    stored = await store.last_messages(done.session_id, 1)
    assert stored[0].content == "It is $43,250."  # markers never come back as history


async def test_tools_are_emulated_on_a_model_without_them(store: AgentStore) -> None:
    native = ScriptedBackend("native")
    plain = ScriptedBackend("plain", capabilities=frozenset({"completion"}))

    async def weather(arguments: dict[str, Any]) -> str:
        return f"{arguments['city']}: 21 C"

    service = AgentService(
        store,
        _models(native, plain),
        tools=ToolRegistry([Tool("get_weather", "Weather by city", CITY, weather)]),
    )
    plain.enqueue(
        Script(
            text=[
                '{"action": "tool_call", "tool_name": "get_weather", '
                '"arguments": {"city": "Paris"}}'
            ]
        ),
        Script(text=['{"action": "answer", "content": "21 C in Paris."}']),
    )
    reply = await service.run_agent(AgentRequest("Weather in Paris?", model="toolless"))
    assert [c.name for c in reply.tool_calls] == ["get_weather"]
    assert [r.content for r in reply.tool_results] == ["Paris: 21 C"]
    assert reply.text == "21 C in Paris."
    assert len(plain.requests) == 2 and native.requests == []
    assert all(r.tools == () for r in plain.requests)  # the tools went in the prompt


# -- persistence when a stream breaks ------------------------------------------------


async def test_a_stream_cut_mid_answer_loses_no_message(any_store: AgentStore) -> None:
    backend = ScriptedBackend("native")
    service = AgentService(any_store, _models(backend))
    backend.enqueue(Script(text=["The ", "answer ", "is ", "42."], fail_after=2))
    received: list[Any] = []
    with pytest.raises(BackendError, match="scripted failure mid-stream"):
        async with aclosing(service.run_agent_stream(AgentRequest("Q?", model="m"))) as stream:
            async for event in stream:
                received.append(event)
    assert [e.text for e in received if isinstance(e, AgentDelta)] == ["The ", "answer "]
    session = received[0].session_id
    stored = await any_store.last_messages(session, 10)
    assert [(m.role, m.content, m.status) for m in stored] == [
        ("user", "Q?", "complete"),
        ("assistant", "The answer ", "incomplete"),
    ]


async def test_a_consumer_that_stops_cancels_the_backend(
    service: AgentService, store: AgentStore, native: ScriptedBackend
) -> None:
    native.enqueue(Script(text=["one ", "two ", "three ", "four"]))
    async with aclosing(service.run_agent_stream(AgentRequest("count", model="m"))) as stream:
        async for event in stream:
            if isinstance(event, AgentStart):
                session = event.session_id
            if isinstance(event, AgentDelta) and event.text == "two ":
                break
    assert native.cancelled == 1
    stored = await store.last_messages(session, 10)
    assert [(m.content, m.status) for m in stored] == [
        ("count", "complete"),
        ("one two ", "incomplete"),
    ]


async def test_a_cancelled_turn_keeps_its_partial_answer(
    service: AgentService, store: AgentStore, native: ScriptedBackend
) -> None:
    native.enqueue(Script(text=["slow ", "words ", "here"], chunk_delay=0.05))
    seen: list[Any] = []
    answering = asyncio.Event()

    async def consume() -> None:
        async with aclosing(service.run_agent_stream(AgentRequest("go", model="m"))) as stream:
            async for event in stream:
                seen.append(event)
                if isinstance(event, AgentDelta):
                    answering.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(answering.wait(), scaled(HANG_S))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    stored = await store.last_messages(seen[0].session_id, 10)
    assert stored[-1].status == "incomplete" and stored[-1].content.startswith("slow ")


async def test_a_failure_before_any_output_keeps_only_the_question(
    service: AgentService, store: AgentStore, native: ScriptedBackend
) -> None:
    # Transient: the serving layer retries once (resilience.retries), so fail both.
    native.enqueue(*[Script(fail_before=BackendError("backend down"))] * 2)
    with pytest.raises(BackendError):
        await service.run_agent(AgentRequest("hello?", model="m", session_id="s1"))
    stored = await store.last_messages("s1", 10)
    assert [(m.role, m.content) for m in stored] == [("user", "hello?")]


async def test_concurrent_turns_on_one_session(any_store: AgentStore) -> None:
    backend = ScriptedBackend("native", default=Script(text=["ok"], chunk_delay=0.005))
    service = AgentService(any_store, _models(backend))
    replies = await asyncio.gather(
        *(
            service.run_agent(AgentRequest(f"question {n}", model="m", session_id="shared"))
            for n in range(6)
        )
    )
    assert {r.session_id for r in replies} == {"shared"}
    stored = await any_store.last_messages("shared", 100)
    assert len(stored) == 12
    for reply in replies:
        assert reply.user_message_id < reply.message_id
    assert sorted(m.content for m in stored if m.role == "user") == [
        f"question {n}" for n in range(6)
    ]


async def test_the_summariser_runs_after_turns(store: AgentStore, native: ScriptedBackend) -> None:
    summary_model = ScriptedBackend("summary", default=Script(text=["They said hello."]))
    summariser = Summariser(
        store, summary_model.chat, "summary", SummariserConfig(threshold=4, keep_recent=2)
    )
    service = AgentService(store, _models(native), summariser=summariser)
    session = None
    for n in range(4):
        reply = await service.run_agent(AgentRequest(f"hello {n}", model="m", session_id=session))
        session = reply.session_id
    await summariser.drain()
    assert session is not None
    (summary,) = await store.last_summaries(session, 10)
    assert summary.content == "They said hello." and len(summary.message_ids) == 4


async def test_a_turns_usage_sums_the_cached_input_tokens_of_its_rounds(
    store: AgentStore, native: ScriptedBackend
) -> None:
    """What the backend's prompt cache served, over every round of a turn."""

    async def weather(arguments: dict[str, Any]) -> str:
        return f"{arguments['city']}: sunny"

    tools = ToolRegistry([Tool("weather", "Weather by city", CITY, weather)])
    service = AgentService(store, _models(native), tools=tools)
    native.enqueue(
        Script(
            text=[],
            tool_calls=[("weather", {"city": "Paris"})],
            usage=Usage(input_tokens=100, output_tokens=5, cache_read_input_tokens=60),
        ),
        Script(
            text=["Sunny."],
            usage=Usage(input_tokens=120, output_tokens=2, cache_read_input_tokens=105),
        ),
    )
    reply = await service.run_agent(AgentRequest("Weather in Paris?", model="scripted"))
    assert reply.usage == Usage(input_tokens=220, output_tokens=7, cache_read_input_tokens=165)
    assert usage_view(reply.usage) == {
        "input_tokens": 220,
        "output_tokens": 7,
        "cached_input_tokens": 165,
    }
