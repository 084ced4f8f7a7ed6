"""Memory without gaps, and compaction instead of forgetting.

Every message is in the context verbatim or inside a summary that is in it, from some
point of the conversation on (what is shown is its newest part, contiguous); when the
whole memory fits the budget, all of it is shown. The gap defect (messages between
the newest summary and the recent window left out because summaries were placed
first) has its own test, and the property runs ``MemoryBuilder`` itself, its reads
included, over random conversation lengths, budgets, windows and summary timings on
an in-memory store that answers its queries as the database does.
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.agent.memory import (
    SUMMARIES_PREFIX,
    MemoryBuilder,
    MemoryConfig,
    MemoryContext,
    Summariser,
    SummariserConfig,
)
from llmbridge.agent.store import (
    AgentStore,
    FactRecord,
    LongSummaryRecord,
    PinRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.features.token_count import count_message_tokens

NOW = datetime(2026, 1, 1, tzinfo=UTC)


def represented(
    context: MemoryContext,
    summaries: Sequence[SummaryRecord],
    long: LongSummaryRecord | None,
    messages: Sequence[StoredMessage],
) -> set[int]:
    """The ids of the messages the context shows, verbatim or inside a summary."""
    shown = set(context.older_ids) | set(context.recent_ids)
    by_id = {s.id: s for s in summaries}
    for summary_id in context.summary_ids:
        shown |= set(by_id[summary_id].message_ids)
    if long is not None and context.long_summary_id == long.id:
        shown |= {m.id for m in messages if m.id <= long.last_message_id}
    return shown


def assert_no_gap(shown: set[int], messages: Sequence[StoredMessage]) -> None:
    if shown:
        oldest = min(shown)
        assert shown == {m.id for m in messages if m.id >= oldest}


# -- the gap defect ---------------------------------------------------------------------


async def test_messages_between_the_newest_summary_and_the_recent_window_are_shown(
    store: AgentStore,
) -> None:
    """The gap defect: 19 summaries cover messages 1-380, 18 messages after them
    are unsummarised, the 399th is the current input. The summaries fill the budget;
    before the fix they were placed first and messages 381-396 fell out while the
    summaries stayed. Now a summary is shown only when every message after it is."""
    session = await store.create_session()
    messages = [
        await store.add_message(session.id, "user" if n % 2 == 0 else "assistant", f"msg {n}")
        for n in range(399)
    ]
    for run in range(19):
        ids = [m.id for m in messages[run * 20 : run * 20 + 20]]
        await store.add_summary(session.id, f"summary {run}: " + "detail " * 150, ids)
    context = await MemoryBuilder(store).build(session.id, before_id=messages[-1].id)
    assert context.tokens <= 3000
    summaries = await store.last_summaries(session.id, 100)
    shown = represented(context, summaries, None, messages[:-1])
    assert {m.id for m in messages[380:398]} <= shown  # the unsummarised tail, whole
    assert_no_gap(shown, messages[:-1])
    assert context.summary_ids  # and as many summaries as still fit


# -- the property -----------------------------------------------------------------------


@dataclass
class MemoryTables:
    """``AgentStore.memory``'s reads, over lists (the queries' semantics)."""

    summaries: list[SummaryRecord]
    longs: list[LongSummaryRecord]
    facts_list: list[FactRecord] = field(default_factory=list)

    async def session_subject(self, session_id: str, **_: Any) -> int | None:
        return None

    async def facts(self, session_id: str, limit: int = 1000, **_: Any) -> list[FactRecord]:
        return self.facts_list[-limit:]

    async def long_summary(self, session_id: str, **_: Any) -> LongSummaryRecord | None:
        return self.longs[-1] if self.longs else None

    async def summaries_after(
        self, session_id: str, after_id: int | None, limit: int, **_: Any
    ) -> list[SummaryRecord]:
        after = [s for s in self.summaries if after_id is None or s.first_message_id > after_id]
        return after[-limit:]


@dataclass
class ListStore:
    """The ``AgentStore`` reads ``MemoryBuilder`` makes, over lists."""

    messages: list[StoredMessage]
    memory: MemoryTables
    pin_list: list[PinRecord] = field(default_factory=list)

    @asynccontextmanager
    async def reader(self) -> AsyncIterator[None]:
        yield None

    async def pins(self, session_id: str, limit: int, **_: Any) -> list[PinRecord]:
        return self.pin_list[-limit:]

    async def last_messages(
        self,
        session_id: str,
        limit: int,
        *,
        before_id: int | None = None,
        after_id: int | None = None,
        **_: Any,
    ) -> list[StoredMessage]:
        rows = [
            m
            for m in self.messages
            if (before_id is None or m.id < before_id) and (after_id is None or m.id > after_id)
        ]
        return rows[-limit:] if limit else []


def _conversation(sizes: Sequence[int]) -> list[StoredMessage]:
    return [
        StoredMessage(n + 1, "s", "user" if n % 2 == 0 else "assistant", "w " * size, NOW)
        for n, size in enumerate(sizes)
    ]


def _summaries(
    messages: Sequence[StoredMessage], runs: Sequence[int], sizes: Sequence[int]
) -> list[SummaryRecord]:
    """Summaries of consecutive runs from the first message on (as the summariser
    writes them), ``runs`` long each, until the conversation's last message."""
    out: list[SummaryRecord] = []
    start = 0
    for n, length in enumerate(runs):
        run = messages[start : start + length]
        if not run or start + length >= len(messages):
            break
        ids = tuple(m.id for m in run)
        text = "s " * sizes[n % len(sizes)]
        out.append(SummaryRecord(n + 1, "s", text, ids[0], ids[-1], len(ids), NOW, ids))
        start += length
    return out


@settings(max_examples=250, deadline=None)
@given(
    sizes=st.lists(st.integers(min_value=1, max_value=120), min_size=1, max_size=160),
    runs=st.lists(st.integers(min_value=1, max_value=25), max_size=20),
    summary_sizes=st.lists(st.integers(min_value=1, max_value=200), min_size=1, max_size=5),
    folded=st.integers(min_value=0, max_value=20),
    long_size=st.integers(min_value=1, max_value=500),
    budget=st.integers(min_value=0, max_value=6000),
    recent=st.integers(min_value=0, max_value=6),
    window=st.integers(min_value=0, max_value=80),
    max_summaries=st.integers(min_value=1, max_value=16),
    facts=st.integers(min_value=0, max_value=12),
)
async def test_no_gaps_ever(
    sizes: list[int],
    runs: list[int],
    summary_sizes: list[int],
    folded: int,
    long_size: int,
    budget: int,
    recent: int,
    window: int,
    max_summaries: int,
    facts: int,
) -> None:
    """Whatever the conversation, the budget and when summaries and compactions ran:
    the context is within the budget, shows a contiguous newest part of the
    conversation, and shows all of it when everything fits."""
    messages = _conversation(sizes)
    summaries = _summaries(messages, runs, summary_sizes)
    folded = min(folded, len(summaries))
    longs = []
    if folded:
        first, last = summaries[0], summaries[folded - 1]
        longs.append(
            LongSummaryRecord(
                1, "s", "l " * long_size, first.first_message_id, last.last_message_id, 0, 0, NOW
            )
        )
    fact_rows = [FactRecord(n + 1, "s", f"fact {n} " * 3, 6, NOW, NOW) for n in range(facts)]
    store = ListStore(messages, MemoryTables(summaries, longs, fact_rows))
    config = MemoryConfig(
        budget=budget, recent_messages=recent, window=window, max_summaries=max_summaries
    )
    builder = MemoryBuilder(cast(AgentStore, store), config)
    current = messages[-1].id + 1
    context = await builder.build("s", before_id=current)
    assert not context.fallback
    assert context.tokens == sum(count_message_tokens(m) for m in context.messages)
    assert context.tokens <= budget
    long = longs[-1] if longs else None
    shown = represented(context, summaries, long, messages)
    assert_no_gap(shown, messages)
    # When everything fits, nothing is left out.
    unlimited = await builder.build("s", before_id=current, budget=10**9)
    if unlimited.tokens <= budget:
        assert context == unlimited
    unfolded = len(summaries) - folded
    covered = summaries[-1].last_message_id if summaries else 0
    tail = sum(1 for m in messages if m.id > covered)
    if unfolded <= max_summaries and tail <= recent + window:
        # Everything was read: with room for it, the whole conversation is there.
        assert represented(unlimited, summaries, long, messages) == {m.id for m in messages}


# -- compaction -------------------------------------------------------------------------


KEY = "MARKER"
KEPT = re.compile(KEY + r" number \d+ is kept")


class Keeper(ScriptedBackend):
    """Summaries and compactions that keep every sentence holding ``KEY``."""

    def __init__(self) -> None:
        super().__init__("keeper", default=Script(text=["ok"]))

    async def chat(self, request: Any) -> Any:
        kept = re.findall(KEPT, request.messages[-1].text)
        self.enqueue(Script(text=[". ".join(kept) + "." if kept else "Small talk."]))
        async for event in super().chat(request):
            yield event


async def test_compaction_keeps_the_whole_session_within_the_budget(store: AgentStore) -> None:
    """600 messages, a marked statement every 50: summaries are folded into the
    long-range summary as they pile up, and the context still reaches back to the
    first message, holding every marked statement, within its budget."""
    session = await store.create_session()
    messages = []
    summariser = Summariser(
        store,
        Keeper().chat,
        "keeper",
        SummariserConfig(facts=False, max_recent_summaries=3, recent_summary_tokens=200),
    )
    builder = MemoryBuilder(store, MemoryConfig(budget=1500))
    for n in range(600):
        text = f"{KEY} number {n} is kept" if n % 50 == 0 else f"ordinary message {n} " * 3
        messages.append(
            await store.add_message(session.id, "user" if n % 2 == 0 else "assistant", text)
        )
        if n % 10 == 9:
            await summariser.summarise_pending(session.id)
    long = await store.memory.long_summary(session.id)
    assert long is not None and long.folded > 0
    assert summariser.usage.calls["compaction"] >= 2
    context = await builder.build(session.id)
    assert context.tokens <= 1500 and context.long_summary_id == long.id
    summaries = await store.last_summaries(session.id, 1000)
    shown = represented(context, summaries, long, messages)
    assert shown == {m.id for m in messages}
    background = next(m.text for m in context.messages if m.text.startswith(SUMMARIES_PREFIX))
    text = "\n".join(m.text for m in context.messages)
    for n in range(0, 600, 50):
        assert f"{KEY} number {n} is kept" in text, n
    assert background.count(KEY) >= 10
