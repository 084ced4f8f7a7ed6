"""Hybrid memory: a session's history as context within a token budget (seed 002's
``getConversationHistory``), and the background summariser that feeds it.

What the model sees, in the seed's order and with the seed's labels::

    system  CRITICAL INSTRUCTION: The following is REFERENCE material ...
    system  REFERENCE ONLY - Background context: <summaries> [NOTE: ...]
    system  REFERENCE MATERIAL - Important information: <pin>; <pin> [Use this ...]
    system  HISTORICAL REFERENCE ONLY: USER: ...\\n\\nASSISTANT: ... [NOTE: ...]
    system  --- RECENT CONVERSATION ---
    user    RECENT EXCHANGE: ... [This is from the recent conversation, ...]
    assistant RECENT EXCHANGE: ...

The whole of it, instructions, labels, summaries and pins included, stays within
``MemoryConfig.budget`` tokens (default 3000) as counted by the gateway's own
counter (``features.token_count``): an unbounded summary sitting outside the cap is
the most reported memory bug (langchainjs#2181). The budget is spent in priority
order (``build``'s docstring has the details): the framing, then pins (verbatim,
never summarised), then the last ``recent_messages`` messages individually (at most
``recent_share`` of what is left while older context competes, truncated when one
is huge), then the newest summaries, then the newest unsummarised older messages in
the condensed block. Items are added whole, newest first, until the next one does
not fit. Only a bounded window is read from the database (pins, the newest
summaries, and messages after the newest summary's coverage, each with a ``LIMIT``
on an index), so the cost follows the budget, never the length of the history.

If building fails, the seed's fallback applies: the last 11 messages (the current
one included, then dropped), plain, trimmed to the budget; if that fails too, no
history.

``Summariser``: once a session has ``threshold`` unsummarised messages beyond the
``keep_recent`` newest, the oldest run of them is sent to a model (any
``core.stream.ChatFn``: a backend's ``chat`` or the gateway's pipeline) and the reply is stored
as a summary with the ids of the messages it covers. The model is the summariser's
own when it has one (``agent.summary_model``), else the one each call names: the
session's own model, so summaries need no configuration. ``force`` (the API's
``POST .../summaries``) summarises the oldest unsummarised run whatever the
threshold, leaving only the newest ``force_keep_recent`` messages. Pins are separate
rows and never go to the summariser, so no rewrite of a summary can lose them. A
summary is capped at ``max_summary_tokens`` and never longer than its source (small
local models have been seen to "summarise" 600 tokens into 1,600).

In the background (``schedule``), summarising never delays a reply: with a
``TurnGate`` (``agent.turns``) it waits until no turn is in flight on its model's
backend, and a turn that starts there meanwhile cancels it (the embedded model and
Ollama generate one reply at a time, so a running summary would hold the turn back);
it is tried again once the backend is idle. A failed summary is retried after each
of ``retry_delays`` and again after the session's next turn. Nothing is deleted
when a summary fails or is cancelled: messages stay in the store and in the context
(the newest unsummarised ones) until a summary covering them is stored.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from contextlib import aclosing
from dataclasses import dataclass, field

from llmbridge.agent.store import AgentStore, PinRecord, StoredMessage, SummaryRecord
from llmbridge.agent.turns import TurnGate
from llmbridge.core.accumulate import accumulate
from llmbridge.core.messages import Message, Role, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams
from llmbridge.core.stream import ChatFn
from llmbridge.features.token_count import count_message_tokens, count_text_tokens

__all__ = [
    "FALLBACK_MESSAGES",
    "HISTORY_INSTRUCTION",
    "MemoryBuilder",
    "MemoryConfig",
    "MemoryContext",
    "Summariser",
    "SummariserConfig",
    "assemble_history",
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
    """Most summaries read (the newest ones)."""
    max_pins: int = 500
    """Most pins read. Pins beyond the budget are reported in ``pins_dropped``."""
    recent_share: float = 0.5
    """The share of what is left after pins that recent messages may take while
    summaries or older messages compete for it."""


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


def _system(text: str) -> Message:
    return Message("system", (TextPart(text),))


def _body(message: StoredMessage) -> str:
    text = message.content.strip()
    return text + INTERRUPTED_NOTE if message.status == "incomplete" else text


@dataclass(slots=True)
class _Plan:
    """The budget as it is spent."""

    budget: int
    used: int = 0
    pins: list[PinRecord] = field(default_factory=list)
    summaries: list[SummaryRecord] = field(default_factory=list)
    older: list[StoredMessage] = field(default_factory=list)
    recent: list[tuple[StoredMessage, str]] = field(default_factory=list)
    truncated: list[int] = field(default_factory=list)

    @property
    def left(self) -> int:
        return self.budget - self.used


# The fixed costs of each block. Every label ends or starts with whitespace, so a
# block's count is exactly its label's count plus its items' counts; pins are joined
# with "; ", so each pin is costed with the ";" attached (an upper bound).
_INSTRUCTION_COST = count_text_tokens(HISTORY_INSTRUCTION)
_PINS_COST = count_text_tokens(PINS_PREFIX) + count_text_tokens(PINS_SUFFIX)
_SUMMARIES_COST = count_text_tokens(SUMMARIES_PREFIX) + count_text_tokens(SUMMARIES_SUFFIX)
_OLDER_COST = (
    count_text_tokens(OLDER_PREFIX)
    + count_text_tokens(OLDER_SUFFIX)
    + count_text_tokens(RECENT_SEPARATOR)
)
_RECENT_COST = count_text_tokens(RECENT_PREFIX) + count_text_tokens(RECENT_SUFFIX)


class MemoryBuilder:
    """Builds a session's history context from the store (see the module docstring)."""

    def __init__(self, store: AgentStore, config: MemoryConfig | None = None) -> None:
        self.store = store
        self.config = config or MemoryConfig()

    async def build(
        self, session_id: str, *, before_id: int | None = None, budget: int | None = None
    ) -> MemoryContext:
        """The history of ``session_id`` before message ``before_id`` (the current
        input, already stored), within ``budget`` tokens (default: the config's).

        Spending order: the instruction, pins (newest first if they do not all fit,
        shown oldest first), the recent messages (newest first; each truncated to
        what is left when it alone is too long; capped at ``recent_share`` of the
        rest while summaries or older messages wait), the newest summaries, and the
        newest older messages (condensed), only when every recent message is in:
        the history kept is always the newest part of the conversation, without
        gaps. Anything that does not fit is left out whole, except a recent
        message, which is truncated.
        """
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

    async def _load(
        self, session_id: str, before_id: int | None
    ) -> tuple[list[PinRecord], list[SummaryRecord], list[StoredMessage]]:
        config, store = self.config, self.store
        async with store.reader() as conn:
            pins = await store.pins(session_id, config.max_pins, conn=conn)
            summaries = await store.last_summaries(session_id, config.max_summaries, conn=conn)
            covered = max((s.last_message_id for s in summaries), default=None)
            messages = await store.last_messages(
                session_id,
                config.recent_messages + config.window,
                before_id=before_id,
                after_id=covered,
                conn=conn,
            )
        return pins, summaries, messages

    async def _build(self, session_id: str, before_id: int | None, budget: int) -> MemoryContext:
        pins, summaries, messages = await self._load(session_id, before_id)
        return assemble_history(pins, summaries, messages, budget, self.config)

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
) -> MemoryContext:
    """The history context from what was read (all oldest first): no I/O, so the
    budget rules are testable on their own. See ``MemoryBuilder.build``."""
    config = config or MemoryConfig()
    messages = [m for m in loaded if m.role in HISTORY_ROLES]
    if not (pins or summaries or messages):
        return MemoryContext()
    plan = _Plan(budget)
    if plan.left < _INSTRUCTION_COST:
        return MemoryContext()
    plan.used += _INSTRUCTION_COST
    _plan_pins(plan, pins)
    split = max(0, len(messages) - config.recent_messages)
    older, recent = messages[:split], messages[split:]
    _plan_recent(plan, recent, config.recent_share if summaries or older else 1.0)
    _plan_summaries(plan, summaries)
    if len(plan.recent) == len(recent):
        # Older messages only after every recent one: never an older exchange in the
        # context while a newer message was left out.
        _plan_older(plan, older)
    return _render(plan, dropped=len(pins) - len(plan.pins))


def _plan_pins(plan: _Plan, pins: Sequence[PinRecord]) -> None:
    cost = _PINS_COST
    for pin in reversed(pins):
        item = count_text_tokens(pin.content.strip() + ";")
        if plan.used + cost + item > plan.budget:
            break
        cost += item
        plan.pins.append(pin)
    if plan.pins:
        plan.used += cost
        plan.pins.reverse()


def _plan_recent(plan: _Plan, recent: Sequence[StoredMessage], share: float) -> None:
    allowance = int(plan.left * share)
    spent = 0
    for message in reversed(recent):
        body = _body(message)
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


def _plan_summaries(plan: _Plan, summaries: Sequence[SummaryRecord]) -> None:
    cost = _SUMMARIES_COST
    for summary in reversed(summaries):
        item = count_text_tokens(summary.content)
        if plan.used + cost + item > plan.budget:
            break
        cost += item
        plan.summaries.append(summary)
    if plan.summaries:
        plan.used += cost
        plan.summaries.reverse()


def _plan_older(plan: _Plan, older: Sequence[StoredMessage]) -> None:
    cost = _OLDER_COST
    for message in reversed(older):
        item = count_text_tokens(f"{message.role.upper()}: {_body(message)}")
        if plan.used + cost + item > plan.budget:
            break
        cost += item
        plan.older.append(message)
    if plan.older:
        plan.used += cost
        plan.older.reverse()


def _role(role: str) -> Role:
    return "user" if role == "user" else "assistant" if role == "assistant" else "system"


def _render(plan: _Plan, *, dropped: int) -> MemoryContext:
    out = [_system(HISTORY_INSTRUCTION)]
    if plan.summaries:
        text = "\n\n".join(s.content.strip() for s in plan.summaries)
        out.append(_system(f"{SUMMARIES_PREFIX}{text}{SUMMARIES_SUFFIX}"))
    if plan.pins:
        text = "; ".join(p.content.strip() for p in plan.pins)
        out.append(_system(f"{PINS_PREFIX}{text}{PINS_SUFFIX}"))
    if plan.older:
        text = "\n\n".join(f"{m.role.upper()}: {_body(m)}" for m in plan.older)
        out.append(_system(f"{OLDER_PREFIX}{text}{OLDER_SUFFIX}"))
        out.append(_system(RECENT_SEPARATOR))
    for message, body in plan.recent:
        out.append(
            Message(_role(message.role), (TextPart(f"{RECENT_PREFIX}{body}{RECENT_SUFFIX}"),))
        )
    if len(out) == 1:  # the instruction alone frames nothing
        return MemoryContext(pins_dropped=dropped)
    return MemoryContext(
        messages=tuple(out),
        tokens=sum(count_message_tokens(m) for m in out),
        pin_ids=tuple(p.id for p in plan.pins),
        pins_dropped=dropped,
        summary_ids=tuple(s.id for s in plan.summaries),
        older_ids=tuple(m.id for m in plan.older),
        recent_ids=tuple(m.id for m, _ in plan.recent),
        truncated_ids=tuple(plan.truncated),
    )


# -- the summariser -----------------------------------------------------------------

# The same bytes for every summary request (no per-request number in it), so a local
# model's prefix cache keeps it: what differs per request, the excerpt and the word
# limit taken from its length, comes after it, in the user message.
SUMMARY_SYSTEM_PROMPT = (
    "You summarise conversations for a long-term memory. Write a concise summary of "
    "the conversation excerpt you are given, within the number of words it states. "
    "Carry every durable fact: names, numbers, doses, dates, times, decisions and "
    "preferences. Do not add anything that is not in the excerpt. Reply with the "
    "summary only."
)
SUMMARY_REQUEST = "Conversation excerpt:\n\n{transcript}\n\nSummarise it in at most {words} words."


@dataclass(frozen=True, slots=True)
class SummariserConfig:
    threshold: int = 20
    """Summarise once this many messages beyond ``keep_recent`` are unsummarised; it
    is also the most messages one summary covers."""
    keep_recent: int = 10
    """The newest messages are left for the recent window, never summarised early."""
    force_keep_recent: int = 2
    """A forced summary leaves this many newest messages out (the last exchange)."""
    max_summary_tokens: int = 200
    max_source_tokens: int = 2000
    """The most source tokens one summary request carries."""
    max_message_tokens: int = 400
    """Each message is cut to this many tokens in the summariser's input."""
    temperature: float = 0.2
    retry_delays: tuple[float, ...] = (30.0, 120.0, 600.0)
    """Seconds before each retry of a failed background summary; after the last, the
    session's next turn tries again."""


class Summariser:
    """Writes summaries of older messages, in the background (module docstring)."""

    def __init__(
        self,
        store: AgentStore,
        chat: ChatFn,
        model: str | None = None,
        config: SummariserConfig | None = None,
        *,
        gate: TurnGate | None = None,
    ) -> None:
        self.store = store
        self.chat = chat
        self.model = model
        """The summaries' model; ``None``: the model each call names."""
        self.config = config or SummariserConfig()
        self.gate = gate
        """Turns in flight (``agent.turns``): background summaries yield to them."""
        self._tasks: dict[str, asyncio.Task[int]] = {}
        self.failures = 0
        """Failed attempts (each retry counts)."""
        self.deferred = 0
        """Background summaries cancelled because a turn started on their backend."""

    def model_for(self, session_model: str | None) -> str:
        """The model a background summary is written with: the summariser's own, else
        the session's."""
        chosen = self.model or session_model
        if not chosen:
            raise ValueError("no model to summarise with: configure one or name one")
        return chosen

    async def summarise_once(
        self,
        session_id: str,
        *,
        model: str | None = None,
        force: bool = False,
        chat: ChatFn | None = None,
    ) -> SummaryRecord | None:
        """Summarise the oldest unsummarised run if the threshold is reached (with
        ``force``, whatever the threshold, leaving ``force_keep_recent`` messages),
        with ``model``, else the summariser's own, called through ``chat`` (default:
        the summariser's; the HTTP API's metered one for a key's request). ``None``
        when there is nothing to summarise, or another writer stored it."""
        config = self.config
        chosen = model or self.model_for(None)
        keep = config.force_keep_recent if force else config.keep_recent
        covered = await self.store.summarised_upto(session_id)
        pending = await self.store.first_messages(
            session_id, config.threshold + keep, after_id=covered
        )
        available = len(pending) - keep
        if available <= 0 or (not force and available < config.threshold):
            return None
        run, lines, source = self._select(pending[: min(available, config.threshold)])
        if not lines:  # nothing but tool traffic: record the run as covered
            summary = "(no conversation in this part)"
        else:
            summary = await self._generate("\n\n".join(lines), source, chosen, chat)
        if not summary:
            raise ValueError("the summariser model returned an empty summary")
        return await self.store.add_summary(session_id, summary, [m.id for m in run], model=chosen)

    def _select(self, batch: Sequence[StoredMessage]) -> tuple[list[StoredMessage], list[str], int]:
        run: list[StoredMessage] = []
        lines: list[str] = []
        source = 0
        for message in batch:
            line = ""
            if message.role in ("user", "assistant"):
                body = truncate_to_tokens(_body(message), self.config.max_message_tokens)
                line = f"{message.role.upper()}: {body}"
            cost = count_text_tokens(line)
            if run and source + cost > self.config.max_source_tokens:
                break
            run.append(message)
            if line:
                lines.append(line)
                source += cost
        return run, lines, source

    async def _generate(
        self, transcript: str, source_tokens: int, model: str, chat: ChatFn | None = None
    ) -> str:
        limit = max(1, min(self.config.max_summary_tokens, source_tokens))
        words = max(10, int(limit * 0.75))
        request = ChatRequest(
            model=model,
            messages=(
                _system(SUMMARY_SYSTEM_PROMPT),
                Message(
                    "user",
                    (TextPart(SUMMARY_REQUEST.format(transcript=transcript, words=words)),),
                ),
            ),
            # Model tokens are not the counter's tokens; leave room, then cut below.
            params=GenerationParams(max_tokens=limit * 2, temperature=self.config.temperature),
        )
        # aclosing: a turn that cancels the summary, or an error event, ends the
        # backend's call now (the embedded model's turn is free at once).
        async with aclosing((chat or self.chat)(request)) as events:
            response = await accumulate(events)
        return truncate_to_tokens(response.message.text.strip(), limit)

    async def summarise_pending(
        self, session_id: str, max_runs: int = 100, *, model: str | None = None
    ) -> int:
        """Summarise run after run until the session is under the threshold."""
        written = 0
        for _ in range(max_runs):
            if await self.summarise_once(session_id, model=model) is None:
                break
            written += 1
        return written

    def schedule(self, session_id: str, model: str | None = None) -> asyncio.Task[int]:
        """Summarise ``session_id`` in the background with ``model_for(model)`` (one
        task per session at a time). Failures are logged, counted and retried, never
        raised into a turn; turns on the same backend go first."""
        running = self._tasks.get(session_id)
        if running is not None and not running.done():
            return running
        task = asyncio.create_task(self._background(session_id, self.model_for(model)))
        self._tasks[session_id] = task
        task.add_done_callback(lambda done: self._forget(session_id, done))
        return task

    def _forget(self, session_id: str, task: asyncio.Task[int]) -> None:
        if self._tasks.get(session_id) is task:
            del self._tasks[session_id]

    async def _background(self, session_id: str, model: str, max_runs: int = 100) -> int:
        written = 0
        retries = iter(self.config.retry_delays)
        for _ in range(max_runs):
            try:
                summary = await self._yielding(session_id, model)
            except Exception:  # a failed summary must not fail a turn; it is retried
                self.failures += 1
                log.exception("summarising session %s failed", session_id)
                delay = next(retries, None)
                if delay is None:
                    break  # the session's next turn schedules it again
                await asyncio.sleep(delay)
                continue
            if summary is None:
                break
            written += 1
        return written

    async def _yielding(self, session_id: str, chosen: str) -> SummaryRecord | None:
        """``summarise_once``, started only while no turn is in flight on the model's
        backend and cancelled (then started again) when one begins."""
        gate = self.gate
        if gate is None:
            return await self.summarise_once(session_id, model=chosen)
        while True:
            await gate.wait_idle(chosen)
            turn_started = gate.watch(chosen)
            work = asyncio.ensure_future(self.summarise_once(session_id, model=chosen))
            interrupt = asyncio.ensure_future(turn_started.wait())
            try:
                await asyncio.wait((work, interrupt), return_when=asyncio.FIRST_COMPLETED)
                if work.done():
                    return work.result()
            finally:
                gate.unwatch(chosen, turn_started)
                interrupt.cancel()
                if not work.done():
                    work.cancel()  # closes the model's stream: the backend is free again
                await asyncio.gather(work, interrupt, return_exceptions=True)
            self.deferred += 1
            log.info("summary of session %s deferred: a turn started on its backend", session_id)

    async def drain(self) -> None:
        """Wait for every scheduled summarisation (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()))

    async def aclose(self) -> None:
        """Cancel scheduled summarisations."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
