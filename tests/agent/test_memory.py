"""Hybrid memory: the seed's layout and labels, the token budget over long sessions
(summaries and pins included), pins surviving summarisation, the fallback, and the
summariser against a scripted model."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.agent.memory import (
    HISTORY_INSTRUCTION,
    OLDER_PREFIX,
    PINS_PREFIX,
    RECENT_PREFIX,
    RECENT_SEPARATOR,
    RECENT_SUFFIX,
    SUMMARIES_PREFIX,
    SUMMARY_SYSTEM_PROMPT,
    MemoryBuilder,
    MemoryConfig,
    Summariser,
    SummariserConfig,
    assemble_history,
    truncate_to_tokens,
)
from llmbridge.agent.store import AgentStore, PinRecord, StoredMessage, SummaryRecord
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from llmbridge.core.messages import Message
from llmbridge.features.token_count import count_message_tokens, count_text_tokens

NOW = datetime(2026, 1, 1, tzinfo=UTC)
ALLERGY = "Grandma Mary is allergic to penicillin (rash in 2019)."


def _texts(messages: tuple[Message, ...]) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in messages]


async def _chat(store: AgentStore, session_id: str, turns: int, words: int = 12) -> list[int]:
    ids = []
    for i in range(turns):
        role = "user" if i % 2 == 0 else "assistant"
        text = f"turn {i} " + " ".join(f"word{i}x{j}" for j in range(words))
        ids.append((await store.add_message(session_id, role, text)).id)
    return ids


# -- layout ----------------------------------------------------------------------------


async def test_an_empty_session_has_no_history(store: AgentStore) -> None:
    session = await store.create_session()
    context = await MemoryBuilder(store).build(session.id)
    assert context.messages == () and context.tokens == 0 and not context.fallback


async def test_the_seed_layout_and_labels(store: AgentStore) -> None:
    session = await store.create_session()
    ids = [
        (await store.add_message(session.id, role, text)).id
        for role, text in [
            ("user", "What medications does grandma take?"),
            ("assistant", "She takes Lisinopril."),
            ("user", "When should I give it?"),
            ("assistant", "At 8am."),
            ("user", "And the current question"),
        ]
    ]
    await store.add_summary(session.id, "Earlier: setting up the care plan.", [ids[0]])
    await store.add_pin(session.id, ALLERGY)
    await store.add_pin(session.id, "Lisinopril 10mg daily at 8am")
    context = await MemoryBuilder(store).build(session.id, before_id=ids[-1])
    assert _texts(context.messages) == [
        ("system", HISTORY_INSTRUCTION),
        (
            "system",
            f"{SUMMARIES_PREFIX}Earlier: setting up the care plan. [NOTE: This is background "
            "information only. Do not directly respond to any of these topics unless "
            "explicitly asked in the current question.]",
        ),
        (
            "system",
            f"{PINS_PREFIX}{ALLERGY}; Lisinopril 10mg daily at 8am [Use this information "
            "only if directly relevant to the current question.]",
        ),
        (
            "system",
            f"{OLDER_PREFIX}ASSISTANT: She takes Lisinopril.\n\n[NOTE: These are older "
            "messages provided only for background context. DO NOT respond to any "
            "questions or requests in this historical content.]",
        ),
        ("system", RECENT_SEPARATOR),
        ("user", f"{RECENT_PREFIX}When should I give it?{RECENT_SUFFIX}"),
        ("assistant", f"{RECENT_PREFIX}At 8am.{RECENT_SUFFIX}"),
    ]
    # The summarised first message is not repeated; the current input is excluded.
    assert context.older_ids == (ids[1],) and context.recent_ids == (ids[2], ids[3])
    assert context.tokens == sum(count_message_tokens(m) for m in context.messages)


async def test_tool_messages_are_left_out_and_interrupted_answers_marked(
    store: AgentStore,
) -> None:
    session = await store.create_session()
    await store.add_message(session.id, "user", "search it")
    await store.add_message(session.id, "tool", "raw search results")
    await store.add_message(session.id, "assistant", "The answer is", status="incomplete")
    context = await MemoryBuilder(store).build(session.id)
    joined = " ".join(m.text for m in context.messages)
    assert "raw search results" not in joined
    assert "The answer is [this answer was interrupted]" in joined


# -- the budget ----------------------------------------------------------------------


async def test_hundreds_of_messages_stay_within_budget(store: AgentStore) -> None:
    """500 messages, summaries written as the session grows, a dozen pins: every
    context is within the budget and keeps every pin verbatim. (The budget holds the
    unsummarised tail, up to 29 messages of 30 words: a summary is shown only when
    every message after it is.)"""
    session = await store.create_session()
    backend = ScriptedBackend(default=Script(text=["Summary: " + "detail " * 60]))
    summariser = Summariser(store, backend.chat, "scripted")
    pins = [f"fact {n}: the code word is {'alpha' * (n + 1)}" for n in range(12)]
    for pin in pins:
        await store.add_pin(session.id, pin)
    builder = MemoryBuilder(store, MemoryConfig(budget=3000))
    for _ in range(10):
        await _chat(store, session.id, 50, words=30)
        await summariser.summarise_pending(session.id)
        context = await builder.build(session.id)
        assert context.tokens <= 3000
        assert context.tokens == sum(count_message_tokens(m) for m in context.messages)
        assert context.summary_ids and context.pins_dropped == 0
        pinned = next(m.text for m in context.messages if m.text.startswith(PINS_PREFIX))
        assert all(pin in pinned for pin in pins)
    assert await store.count_messages(session.id) == 500
    # Unsummarised messages stay few: the summariser keeps up as the session grows.
    assert await store.count_messages(
        session.id, after_id=await store.summarised_upto(session.id)
    ) < (SummariserConfig().threshold + SummariserConfig().keep_recent)


async def test_a_huge_recent_message_is_truncated(store: AgentStore) -> None:
    session = await store.create_session()
    await _chat(store, session.id, 6)
    big = (await store.add_message(session.id, "user", "paste " * 5000)).id
    context = await MemoryBuilder(store, MemoryConfig(budget=800)).build(session.id)
    assert context.tokens <= 800
    assert context.truncated_ids == (big,)
    assert context.messages[-1].text.startswith(RECENT_PREFIX + "paste paste")
    assert "[...]" in context.messages[-1].text


async def test_pins_beyond_the_budget_keep_the_newest(store: AgentStore) -> None:
    session = await store.create_session()
    for n in range(100):
        await store.add_pin(session.id, f"pinned fact number {n} " + "blah " * 10)
    context = await MemoryBuilder(store, MemoryConfig(budget=400)).build(session.id)
    assert context.tokens <= 400
    assert context.pins_dropped > 0
    assert len(context.pin_ids) + context.pins_dropped == 100
    assert "pinned fact number 99 " in context.messages[1].text


def _message(i: int, size: int, role: str = "user") -> StoredMessage:
    return StoredMessage(i, "s", role, " ".join(["wordy"] * size), NOW, status="complete")


@settings(max_examples=300, deadline=None)
@given(
    budget=st.integers(min_value=0, max_value=4000),
    message_sizes=st.lists(st.integers(min_value=0, max_value=900), max_size=80),
    pin_sizes=st.lists(st.integers(min_value=0, max_value=300), max_size=20),
    summary_sizes=st.lists(st.integers(min_value=1, max_value=400), max_size=10),
    recent=st.integers(min_value=0, max_value=6),
)
def test_the_budget_always_holds(
    budget: int,
    message_sizes: list[int],
    pin_sizes: list[int],
    summary_sizes: list[int],
    recent: int,
) -> None:
    messages = [
        _message(i, size, "user" if i % 2 else "assistant") for i, size in enumerate(message_sizes)
    ]
    pins = [PinRecord(i, "s", "pin; " * size, size, NOW) for i, size in enumerate(pin_sizes)]
    summaries = [
        SummaryRecord(i, "s", "sum " * size, i, i, size, NOW)
        for i, size in enumerate(summary_sizes)
    ]
    context = assemble_history(
        pins, summaries, messages, budget, MemoryConfig(recent_messages=recent)
    )
    assert context.tokens == sum(count_message_tokens(m) for m in context.messages)
    assert context.tokens <= budget
    # What is kept of the conversation is its newest part, without gaps.
    kept = set(context.older_ids) | set(context.recent_ids)
    if kept:
        oldest = min(kept)
        newer = {m.id for m in messages if m.id >= oldest}
        assert kept == newer


def test_no_older_exchange_while_a_newer_message_is_left_out() -> None:
    """A tight budget: the newest message fits its share, the one before does not.
    The older messages that would still fit must not be shown in its place."""
    messages = [
        _message(0, 1),
        _message(1, 1, "assistant"),
        _message(2, 1),
        _message(3, 50, "assistant"),
        _message(4, 50),
    ]
    context = assemble_history([], [], messages, 215, MemoryConfig(recent_messages=2))
    assert context.recent_ids == (4,)
    assert context.older_ids == ()


def test_truncation_respects_the_limit() -> None:
    assert truncate_to_tokens("short text", 10) == "short text"
    cut = truncate_to_tokens("abcdefgh " * 100, 50)
    assert count_text_tokens(cut) <= 50 and cut.endswith("[...]")
    assert truncate_to_tokens("abcdefghijklmnop", 2) == ""


# -- pins and summaries ----------------------------------------------------------------


async def test_pinned_facts_survive_summarisation(store: AgentStore) -> None:
    """The fact is said once at the start, pinned, and then summarised away by a
    lossy summariser: it is still in every context, word for word."""
    session = await store.create_session()
    said = await store.add_message(session.id, "user", ALLERGY)
    await store.add_pin(session.id, ALLERGY, message_id=said.id)
    await _chat(store, session.id, 299)
    backend = ScriptedBackend(default=Script(text=["They chatted about the weather."]))
    summariser = Summariser(store, backend.chat, "scripted")
    assert await summariser.summarise_pending(session.id) > 5
    context = await MemoryBuilder(store).build(session.id)
    covered = (await store.last_summaries(session.id, 100))[0]
    assert covered.first_message_id == said.id  # the fact's message was summarised
    assert said.id not in context.older_ids + context.recent_ids
    assert sum(m.text.count(ALLERGY) for m in context.messages) == 1
    # The summariser never saw the pins table: only the messages of each run.
    for request in backend.requests[1:]:
        if request.messages[0].text == SUMMARY_SYSTEM_PROMPT:
            assert ALLERGY not in request.messages[-1].text


async def test_the_summariser_threshold_and_coverage(store: AgentStore) -> None:
    session = await store.create_session()
    ids = await _chat(store, session.id, 29)
    backend = ScriptedBackend(default=Script(text=["A short summary."]))
    summariser = Summariser(store, backend.chat, "sum-model")
    assert await summariser.summarise_once(session.id) is None  # 29 < 20 + 10
    ids.append((await store.add_message(session.id, "user", "one more")).id)
    summary = await summariser.summarise_once(session.id)
    assert summary is not None
    assert summary.message_ids == tuple(ids[:20])
    assert summary.content == "A short summary." and summary.model == "sum-model"
    (request,) = backend.requests
    transcript = request.messages[-1].text
    assert "USER: turn 0 " in transcript and "ASSISTANT: turn 19 " in transcript
    assert "turn 20 " not in transcript
    assert await summariser.summarise_once(session.id) is None


async def test_a_summary_is_capped_and_never_longer_than_its_source(store: AgentStore) -> None:
    session = await store.create_session()
    await _chat(store, session.id, 30, words=2)
    backend = ScriptedBackend(default=Script(text=["invented " * 2000]))
    config = SummariserConfig(max_summary_tokens=150)
    summary = await Summariser(store, backend.chat, "m", config).summarise_once(session.id)
    assert summary is not None
    source = sum(count_text_tokens(f"USER: turn {i} word{i}x0 word{i}x1") for i in range(20))
    assert summary.token_count <= min(150, source)


async def test_background_failures_never_reach_the_turn(store: AgentStore) -> None:
    session = await store.create_session()
    await _chat(store, session.id, 40)
    backend = ScriptedBackend(default=Script(fail_before=BackendError("model down")))
    # No retries here (tests/agent/test_summaries.py has them).
    summariser = Summariser(store, backend.chat, "m", SummariserConfig(retry_delays=()))
    task = summariser.schedule(session.id)
    assert summariser.schedule(session.id) is task  # one task per session at a time
    await summariser.drain()
    assert task.result() == 0 and summariser.failures == 1
    assert await store.last_summaries(session.id, 5) == []


async def test_racing_summarisers_store_each_run_once(any_store: AgentStore) -> None:
    session = await any_store.create_session()
    await _chat(any_store, session.id, 60)
    backend = ScriptedBackend(default=Script(text=["s"], chunk_delay=0.01))
    first = Summariser(any_store, backend.chat, "m")
    second = Summariser(any_store, backend.chat, "m")
    await asyncio.gather(first.summarise_pending(session.id), second.summarise_pending(session.id))
    summaries = await any_store.last_summaries(session.id, 10)
    starts = [s.first_message_id for s in summaries]
    assert len(starts) == len(set(starts)) == 2


# -- the fallback ----------------------------------------------------------------------


async def test_the_seed_fallback_when_building_fails(
    store: AgentStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    session = await store.create_session()
    ids = await _chat(store, session.id, 20, words=1)
    builder = MemoryBuilder(store)

    async def broken(*args: object) -> None:
        raise RuntimeError("corrupt summary row")

    monkeypatch.setattr(builder, "_load", broken)
    context = await builder.build(session.id, before_id=ids[-1])
    assert context.fallback
    # The last 11 messages up to the current one, minus the current one, plain.
    assert context.recent_ids == tuple(ids[-11:-1])
    assert [m.text for m in context.messages] == [
        f"turn {i} word{i}x0" for i in range(len(ids) - 11, len(ids) - 1)
    ]

    async def also_broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("database gone")

    monkeypatch.setattr(store, "last_messages", also_broken)
    nothing = await builder.build(session.id)
    assert nothing.fallback and nothing.messages == ()
