"""The history context: a session's memory within a token budget (seed 002's
``getConversationHistory``), without gaps.

What the model sees, in the seed's order and with the seed's labels::

    system  CRITICAL INSTRUCTION: The following is REFERENCE material ...
    system  REFERENCE ONLY - Background context: <long-range summary>\\n\\n<summaries> [NOTE: ...]
    system  REFERENCE MATERIAL - Important information: <pin>; <pin> [Use this ...]
    system  KNOWN FACTS - About the user and their world: <fact>; <fact> [Use ...]
    system  HISTORICAL REFERENCE ONLY: USER: ...\\n\\nASSISTANT: ... [NOTE: ...]
    system  --- RECENT CONVERSATION ---
    user    RECENT EXCHANGE: ... [This is from the recent conversation, ...]
    assistant RECENT EXCHANGE: ...

The whole of it stays within ``MemoryConfig.budget`` tokens (default 3000) as counted
by the gateway's own counter (``features.token_count``).

**No gaps.** What the context shows of the conversation is always a contiguous,
newest part of it: every message from some point on is there, verbatim (recent or
condensed) or inside a summary that is there, and nothing older than a left-out
message is shown. The conversation is laid out newest first: the recent messages,
the unsummarised older messages, the summaries (newest first) and the long-range
summary (which covers every message before them); the budget is spent in that order
and stops at the first item that does not fit. When everything fits, everything is
shown: the whole session, through the long-range summary that compaction
(``memory.summariser``) keeps within its share. Summaries used to be
placed first and the messages between the newest summary and the recent window fell
out; a summary or long-range summary is now shown only when every message newer than
it is.

**The budget split.** Pins first (verbatim, newest first if they do not all fit), then
facts (``facts_share`` of the budget at most, newest first), then the conversation as
above, with the recent messages capped at ``recent_share`` of what is left while
older context competes (a huge one truncated). The summaries' and the long-range
summary's sizes are the summariser's (``SummariserConfig``: ``max_summary_tokens``,
``long_range_tokens`` and ``recent_summary_tokens``, where compaction starts), so a
session of any length needs about ``long_range_tokens + recent_summary_tokens`` for its
summarised past plus its unsummarised tail.

Only a bounded window is read from the database (pins, facts, the long-range summary,
the newest summaries after it, and messages after the newest summary's coverage, each
with a ``LIMIT`` on an index), so the cost follows the budget, never the history.

If building fails, the seed's fallback applies: the last 11 messages (the current one
included, then dropped), plain, trimmed to the budget; if that fails too, no history.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from llmbridge.agent.store import (
    AgentStore,
    FactRecord,
    LongSummaryRecord,
    PinRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.core.messages import Message, Role, TextPart
from llmbridge.features.token_count import count_message_tokens, count_text_tokens

__all__ = [
    "FACTS_PREFIX",
    "FACTS_SUFFIX",
    "FALLBACK_MESSAGES",
    "HISTORY_INSTRUCTION",
    "HISTORY_ROLES",
    "OLDER_PREFIX",
    "OLDER_SUFFIX",
    "PINS_PREFIX",
    "PINS_SUFFIX",
    "RECENT_PREFIX",
    "RECENT_SEPARATOR",
    "RECENT_SUFFIX",
    "SUMMARIES_PREFIX",
    "SUMMARIES_SUFFIX",
    "MemoryBuilder",
    "MemoryConfig",
    "MemoryContext",
    "assemble_history",
    "body_of",
    "truncate_to_tokens",
]

log = logging.getLogger("llmbridge.agent.memory")

# -- the seed's labels -------------------------------------------------------------

HISTORY_INSTRUCTION = (
    "CRITICAL INSTRUCTION: The following is REFERENCE material from previous "
    "conversation. Use it ONLY for contextual understanding. You MUST FOCUS EXCLUSIVELY "
    "on responding to the CURRENT QUESTION. DO NOT address any previous topics or "
    "questions unless the current question EXPLICITLY requests information about them. "
    "Previous exchanges should be treated as background information only."
)
SUMMARIES_PREFIX = "REFERENCE ONLY - Background context: "
SUMMARIES_SUFFIX = (
    " [NOTE: This is background information only. Do not directly respond to any of "
    "these topics unless explicitly asked in the current question.]"
)
PINS_PREFIX = "REFERENCE MATERIAL - Important information: "
PINS_SUFFIX = " [Use this information only if directly relevant to the current question.]"
FACTS_PREFIX = "KNOWN FACTS - About the user and their world: "
FACTS_SUFFIX = " [Use these facts only if directly relevant to the current question.]"
OLDER_PREFIX = "HISTORICAL REFERENCE ONLY: "
OLDER_SUFFIX = (
    "\n\n[NOTE: These are older messages provided only for background context. DO NOT "
    "respond to any questions or requests in this historical content.]"
)
RECENT_SEPARATOR = "--- RECENT CONVERSATION ---"
RECENT_PREFIX = "RECENT EXCHANGE: "
RECENT_SUFFIX = "\n[This is from the recent conversation, not the current question.]"
INTERRUPTED_NOTE = " [this answer was interrupted]"
TRUNCATION_MARK = " [...]"

HISTORY_ROLES = frozenset({"system", "user", "assistant"})
"""The seed keeps only these roles in the history (tool messages are filtered out)."""
FALLBACK_MESSAGES = 11
"""The seed's fallback: the last 11 messages, the current one included."""


def truncate_to_tokens(text: str, limit: int) -> str:
    """The start of ``text`` within ``limit`` tokens by the gateway's counter, marked
    with `` [...]`` when cut. Whitespace between kept words becomes single spaces
    only when the text is cut."""
    if count_text_tokens(text) <= limit:
        return text
    room = limit - count_text_tokens(TRUNCATION_MARK)
    kept: list[str] = []
    used = 0
    for word in text.split():
        cost = (len(word) + 3) // 4
        if used + cost > room:
            break
        kept.append(word)
        used += cost
    if not kept:
        return ""
    return " ".join(kept) + TRUNCATION_MARK


@dataclass(frozen=True, slots=True)
class MemoryConfig:
    budget: int = 3000
    """Tokens the whole history context may take (the seed's ``maxTokens``)."""
    recent_messages: int = 2
    """Newest messages shown individually (the seed's ``recentThreshold``)."""
    window: int = 64
    """Most older messages read for the condensed block (bounds the query)."""
    max_summaries: int = 16
    """Most summaries read (the newest ones after the long-range summary)."""
    max_pins: int = 500
    """Most pins read. Pins beyond the budget are reported in ``pins_dropped``."""
    max_facts: int = 200
    """Most facts read (the newest ones)."""
    recent_share: float = 0.5
    """The share of what is left after pins and facts that recent messages may take
    while summaries or older messages compete for it."""
    facts_share: float = 0.25
    """The share of the budget facts may take at most (newest first)."""


@dataclass(frozen=True, slots=True)
class MemoryContext:
    """The history messages and what went into them."""

    messages: tuple[Message, ...] = ()
    tokens: int = 0
    """``messages`` counted with the gateway's counter; never above the budget."""
    pin_ids: tuple[int, ...] = ()
    pins_dropped: int = 0
    summary_ids: tuple[int, ...] = ()
    older_ids: tuple[int, ...] = ()
    recent_ids: tuple[int, ...] = ()
    truncated_ids: tuple[int, ...] = ()
    fallback: bool = False
    """The seed's fallback was used (building failed)."""
    fact_ids: tuple[int, ...] = ()
    facts_dropped: int = 0
    long_summary_id: int | None = None
    """The long-range summary shown (it covers every message up to its
    ``last_message_id``)."""


def _system(text: str) -> Message:
    return Message("system", (TextPart(text),))


def body_of(message: StoredMessage) -> str:
    """A message's text as memory shows it (an interrupted answer marked)."""
    text = message.content.strip()
    return text + INTERRUPTED_NOTE if message.status == "incomplete" else text


@dataclass(slots=True)
class _Plan:
    """The budget as it is spent."""

    budget: int
    used: int = 0
    pins: list[PinRecord] = field(default_factory=list)
    facts: list[FactRecord] = field(default_factory=list)
    long: LongSummaryRecord | None = None
    summaries: list[SummaryRecord] = field(default_factory=list)
    older: list[StoredMessage] = field(default_factory=list)
    recent: list[tuple[StoredMessage, str]] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)

    @property
    def left(self) -> int:
        return self.budget - self.used


# The fixed costs of each block. Every label ends or starts with whitespace, so a
# block's count is exactly its label's count plus its items' counts; pins and facts
# are joined with "; ", so each is costed with the ";" attached (an upper bound).
_INSTRUCTION_COST = count_text_tokens(HISTORY_INSTRUCTION)
_PINS_COST = count_text_tokens(PINS_PREFIX) + count_text_tokens(PINS_SUFFIX)
_FACTS_COST = count_text_tokens(FACTS_PREFIX) + count_text_tokens(FACTS_SUFFIX)
_SUMMARIES_COST = count_text_tokens(SUMMARIES_PREFIX) + count_text_tokens(SUMMARIES_SUFFIX)
_OLDER_COST = (
    count_text_tokens(OLDER_PREFIX)
    + count_text_tokens(OLDER_SUFFIX)
    + count_text_tokens(RECENT_SEPARATOR)
)
_RECENT_COST = count_text_tokens(RECENT_PREFIX) + count_text_tokens(RECENT_SUFFIX)


@dataclass(frozen=True, slots=True)
class _Loaded:
    pins: list[PinRecord]
    facts: list[FactRecord]
    long: LongSummaryRecord | None
    summaries: list[SummaryRecord]
    messages: list[StoredMessage]
    complete: bool


class MemoryBuilder:
    """Builds a session's history context from the store (see the module docstring)."""

    def __init__(self, store: AgentStore, config: MemoryConfig | None = None) -> None:
        self.store = store
        self.config = config or MemoryConfig()

    async def build(
        self, session_id: str, *, before_id: int | None = None, budget: int | None = None
    ) -> MemoryContext:
        """The history of ``session_id`` before message ``before_id`` (the current
        input, already stored), within ``budget`` tokens (default: the config's);
        see ``assemble_history`` for how the budget is spent."""
        limit = self.config.budget if budget is None else budget
        try:
            return await self._build(session_id, before_id, limit)
        except Exception:  # the seed degrades to its simple history
            log.exception(
                "building the memory of session %s failed; using the fallback", session_id
            )
        try:
            return await self._fallback(session_id, before_id, limit)
        except Exception:  # and to no history at all
            log.exception("the fallback history of session %s failed too", session_id)
            return MemoryContext(fallback=True)

    async def _load(self, session_id: str, before_id: int | None) -> _Loaded:
        config, store = self.config, self.store
        rows = store.memory
        async with store.reader() as conn:
            pins = await store.pins(session_id, config.max_pins, conn=conn)
            facts = await rows.facts(session_id, config.max_facts, with_subject=True, conn=conn)
            long = await rows.long_summary(session_id, conn=conn)
            after = long.last_message_id if long is not None else None
            # One more than is used: more than ``max_summaries`` unfolded summaries
            # means the oldest ones are not read, so the long-range summary (older
            # still) would leave a gap and is not shown.
            summaries = await rows.summaries_after(
                session_id, after, config.max_summaries + 1, conn=conn
            )
            if len(summaries) > config.max_summaries:
                summaries, long = summaries[1:], None
            covered = max((s.last_message_id for s in summaries), default=after)
            wanted = config.recent_messages + config.window
            messages = await store.last_messages(
                session_id, wanted + 1, before_id=before_id, after_id=covered, conn=conn
            )
        # More unsummarised messages than the window: the oldest are not read, so no
        # summary (older still) can be shown without a gap.
        complete = len(messages) <= wanted
        return _Loaded(pins, facts, long, summaries, messages[-wanted:] if wanted else [], complete)

    async def _build(self, session_id: str, before_id: int | None, budget: int) -> MemoryContext:
        loaded = await self._load(session_id, before_id)
        return assemble_history(
            loaded.pins,
            loaded.summaries,
            loaded.messages,
            budget,
            self.config,
            facts=loaded.facts,
            long=loaded.long,
            complete=loaded.complete,
        )

    async def _fallback(self, session_id: str, before_id: int | None, budget: int) -> MemoryContext:
        rows = await self.store.last_messages(
            session_id,
            FALLBACK_MESSAGES,
            before_id=None if before_id is None else before_id + 1,
        )
        trimmed = [m for m in rows[:-1] if m.role in HISTORY_ROLES]
        kept: list[Message] = []
        used = 0
        for row in reversed(trimmed):
            cost = count_text_tokens(row.content)
            if used + cost > budget:
                break
            used += cost
            kept.append(Message(_role(row.role), (TextPart(row.content),)))
        kept.reverse()
        return MemoryContext(
            messages=tuple(kept),
            tokens=sum(count_message_tokens(m) for m in kept),
            recent_ids=tuple(m.id for m in trimmed[len(trimmed) - len(kept) :]),
            fallback=True,
        )


def assemble_history(
    pins: Sequence[PinRecord],
    summaries: Sequence[SummaryRecord],
    loaded: Sequence[StoredMessage],
    budget: int,
    config: MemoryConfig | None = None,
    *,
    facts: Sequence[FactRecord] = (),
    long: LongSummaryRecord | None = None,
    complete: bool = True,
) -> MemoryContext:
    """The history context from what was read (all oldest first): no I/O, so the
    budget rules are testable on their own.

    ``summaries`` are the summaries after ``long`` (the long-range summary), oldest
    first, and ``loaded`` the messages after the newest summary's coverage;
    ``complete`` says ``loaded`` reaches back to that coverage (else no summary can
    be shown without a gap). Spending order: the instruction, pins (newest first if
    they do not all fit, shown oldest first), facts (within ``facts_share``), then the
    conversation newest first (module docstring): recent messages (each truncated
    when it alone is too long; capped at ``recent_share`` of the rest while older
    context waits), older messages, summaries, the long-range summary, each only
    when everything newer is in. When the whole of it fits, all of it is shown.
    """
    config = config or MemoryConfig()
    messages = [m for m in loaded if m.role in HISTORY_ROLES]
    if not (pins or facts or summaries or messages or long):
        return MemoryContext()
    plan = _Plan(budget)
    if plan.left < _INSTRUCTION_COST:
        return MemoryContext()
    plan.used += _INSTRUCTION_COST
    split = max(0, len(messages) - config.recent_messages)
    older, recent = messages[:split], messages[split:]
    past: list[SummaryRecord] = list(summaries) if complete else []
    shown_long = long if complete else None
    whole = _items_cost(pins, _PINS_COST) + _items_cost(facts, _FACTS_COST)
    if whole + _whole_cost(older, recent, past, shown_long) <= plan.left:
        # Everything fits: no share applies, nothing is left out.
        _plan_pins(plan, pins)
        _plan_facts(plan, facts, budget)
        _plan_recent(plan, recent, 1.0)
        _plan_older(plan, older)
        _plan_summaries(plan, past, shown_long)
        return _render(plan, pins=len(pins), facts=len(facts))
    _plan_pins(plan, pins)
    _plan_facts(plan, facts, int(budget * config.facts_share))
    _plan_recent(plan, recent, config.recent_share if (older or past or shown_long) else 1.0)
    # Older messages only after every recent one, summaries only after every
    # unsummarised message: never something older while a newer one is out.
    if len(plan.recent) == len(recent) and _plan_older(plan, older):
        _plan_summaries(plan, past, shown_long)
    return _render(plan, pins=len(pins), facts=len(facts))


def _whole_cost(
    older: Sequence[StoredMessage],
    recent: Sequence[StoredMessage],
    summaries: Sequence[SummaryRecord],
    long: LongSummaryRecord | None,
) -> int:
    cost = sum(_RECENT_COST + count_text_tokens(body_of(m)) for m in recent)
    if older:
        cost += _OLDER_COST + sum(_older_cost(m) for m in older)
    items = [s.content for s in summaries] + ([long.content] if long is not None else [])
    if items:
        cost += _SUMMARIES_COST + sum(_summary_cost(text) for text in items)
    return cost


def _items_cost(items: Sequence[PinRecord] | Sequence[FactRecord], label: int) -> int:
    if not items:
        return 0
    return label + sum(count_text_tokens(item.content.strip() + ";") for item in items)


_Listed = TypeVar("_Listed", PinRecord, FactRecord)


def _older_cost(message: StoredMessage) -> int:
    return count_text_tokens(f"{message.role.upper()}: {body_of(message)}")


def _summary_cost(text: str) -> int:
    # Joined with a blank line: the item's count with it attached (an upper bound).
    return count_text_tokens(text.strip() + "\n\n")


def _fit_newest(
    items: Sequence[_Listed], header: int, used: int, limit: int
) -> tuple[list[_Listed], int]:
    """The newest of ``items`` (pins, facts: each listed as ``content;`` after a header
    costing ``header``) that fit under ``limit`` beside ``used`` tokens, oldest first,
    and what they cost with their header (0 when none fits)."""
    cost = header
    kept: list[_Listed] = []
    for item in reversed(items):
        tokens = count_text_tokens(item.content.strip() + ";")
        if used + cost + tokens > limit:
            break
        cost += tokens
        kept.append(item)
    kept.reverse()
    return kept, cost if kept else 0


def _plan_pins(plan: _Plan, pins: Sequence[PinRecord]) -> None:
    kept, cost = _fit_newest(pins, _PINS_COST, plan.used, plan.budget)
    plan.pins.extend(kept)
    plan.used += cost


def _plan_facts(plan: _Plan, facts: Sequence[FactRecord], share: int) -> None:
    limit = min(plan.budget, plan.used + share)
    kept, cost = _fit_newest(facts, _FACTS_COST, plan.used, limit)
    plan.facts.extend(kept)
    plan.used += cost


def _plan_recent(plan: _Plan, recent: Sequence[StoredMessage], share: float) -> None:
    allowance = int(plan.left * share)
    spent = 0
    for message in reversed(recent):
        body = body_of(message)
        room = allowance - spent - _RECENT_COST
        if room <= 0:
            break
        if count_text_tokens(body) > room:
            body = truncate_to_tokens(body, room)
            if not body:
                break
            plan.truncated.append(message.id)
        spent += _RECENT_COST + count_text_tokens(body)
        plan.recent.append((message, body))
    plan.recent.reverse()
    plan.used += spent


def _plan_older(plan: _Plan, older: Sequence[StoredMessage]) -> bool:
    """The newest older messages that fit; whether all of them did."""
    cost = _OLDER_COST
    for message in reversed(older):
        item = _older_cost(message)
        if plan.used + cost + item > plan.budget:
            break
        cost += item
        plan.older.append(message)
    if plan.older:
        plan.used += cost
        plan.older.reverse()
    return len(plan.older) == len(older)


def _plan_summaries(
    plan: _Plan, summaries: Sequence[SummaryRecord], long: LongSummaryRecord | None
) -> None:
    cost = _SUMMARIES_COST
    for summary in reversed(summaries):
        item = _summary_cost(summary.content)
        if plan.used + cost + item > plan.budget:
            break
        cost += item
        plan.summaries.append(summary)
    if long is not None and len(plan.summaries) == len(summaries):
        item = _summary_cost(long.content)
        if plan.used + cost + item <= plan.budget:
            cost += item
            plan.long = long
    if plan.summaries or plan.long is not None:
        plan.used += cost
        plan.summaries.reverse()


def _role(role: str) -> Role:
    return "user" if role == "user" else "assistant" if role == "assistant" else "system"


def _render(plan: _Plan, *, pins: int, facts: int) -> MemoryContext:
    out = [_system(HISTORY_INSTRUCTION)]
    background = ([plan.long.content] if plan.long is not None else []) + [
        s.content for s in plan.summaries
    ]
    if background:
        text = "\n\n".join(item.strip() for item in background)
        out.append(_system(f"{SUMMARIES_PREFIX}{text}{SUMMARIES_SUFFIX}"))
    if plan.pins:
        text = "; ".join(p.content.strip() for p in plan.pins)
        out.append(_system(f"{PINS_PREFIX}{text}{PINS_SUFFIX}"))
    if plan.facts:
        text = "; ".join(f.content.strip() for f in plan.facts)
        out.append(_system(f"{FACTS_PREFIX}{text}{FACTS_SUFFIX}"))
    if plan.older:
        text = "\n\n".join(f"{m.role.upper()}: {body_of(m)}" for m in plan.older)
        out.append(_system(f"{OLDER_PREFIX}{text}{OLDER_SUFFIX}"))
        out.append(_system(RECENT_SEPARATOR))
    for message, body in plan.recent:
        out.append(
            Message(_role(message.role), (TextPart(f"{RECENT_PREFIX}{body}{RECENT_SUFFIX}"),))
        )
    dropped = pins - len(plan.pins)
    facts_dropped = facts - len(plan.facts)
    if len(out) == 1:  # the instruction alone frames nothing
        return MemoryContext(pins_dropped=dropped, facts_dropped=facts_dropped)
    return MemoryContext(
        messages=tuple(out),
        tokens=sum(count_message_tokens(m) for m in out),
        pin_ids=tuple(p.id for p in plan.pins),
        pins_dropped=dropped,
        summary_ids=tuple(s.id for s in plan.summaries),
        older_ids=tuple(m.id for m in plan.older),
        recent_ids=tuple(m.id for m, _ in plan.recent),
        truncated_ids=tuple(plan.truncated),
        fact_ids=tuple(f.id for f in plan.facts),
        facts_dropped=facts_dropped,
        long_summary_id=plan.long.id if plan.long is not None else None,
    )
