"""Memory's background model work: summaries, their compaction, and fact extraction.

``Summariser``: once a session has ``threshold`` unsummarised messages beyond the
``keep_recent`` newest (or they hold ``max_source_tokens``), the oldest run of them is
sent to a model (any ``core.stream.ChatFn``: a backend's ``chat`` or the gateway's
pipeline) and the reply is stored as a summary with the ids of the messages it
covers. The model is the summariser's own when it has one (``agent.summary_model``),
else the one each call names: the session's own model, so memory needs no
configuration. ``force`` (the API's ``POST .../summaries``) summarises the oldest
unsummarised run whatever the threshold, leaving only the newest ``force_keep_recent``
messages. A summary is capped at ``max_summary_tokens`` and never longer than its
source.

**Compaction**: summaries are never dropped for want of room; once the
summaries after the long-range summary pass ``recent_summary_tokens`` (or number more
than ``max_recent_summaries``), the oldest of them (up to ``fold_batch``) are folded,
with the current long-range summary, into a new long-range summary of at most
``long_range_tokens``, which covers every message up to the last one they covered
(a rolling summary: the newest row is the one in use, older rows stay as history).
So the whole session is represented within ``long_range_tokens +
recent_summary_tokens`` of the budget, however long it grows.

**Facts** (``memory.facts``): after the summaries, the user's statements since the
extraction cursor are put to the model one by one, once at least ``facts_every`` user
messages wait (a yes-or-no answer constrained by a JSON schema, in ``fact_readings``
readings), and the ones it keeps (the person's own sentences: it cannot invent one)
are stored as the session's facts.

In the background (``schedule``), this work never delays a reply: with a ``TurnGate``
(``agent.turns``) each call waits until no turn is in flight on its model's backend,
and a turn that starts there meanwhile cancels it; it is tried again once the backend
is idle. A failed call is retried after each of ``retry_delays`` and again after the
session's next turn. Nothing is deleted when a call fails or is cancelled: messages
stay in the store and in the context until a summary covering them is stored.

Every model call memory makes is counted in ``usage`` (calls, failures and tokens per
kind: ``summary``, ``compaction``, ``facts``) and handed to ``on_usage`` when one is
set, the hook a usage ledger listens on.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field
from typing import Literal

from llmbridge.agent.memory.context import body_of, truncate_to_tokens
from llmbridge.agent.memory.facts import (
    READINGS,
    Candidate,
    candidates,
    fact_request,
    parse_answer,
)
from llmbridge.agent.store import (
    AgentStore,
    FactRecord,
    LongSummaryRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.agent.turns import TurnGate
from llmbridge.core.accumulate import accumulate
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams
from llmbridge.core.response import Usage
from llmbridge.core.stream import ChatFn
from llmbridge.features.token_count import count_text_tokens

__all__ = [
    "COMPACTION_SYSTEM_PROMPT",
    "SUMMARY_SYSTEM_PROMPT",
    "MemoryUsage",
    "Summariser",
    "SummariserConfig",
]

log = logging.getLogger("llmbridge.agent.memory")

CallKind = Literal["summary", "compaction", "facts"]

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
COMPACTION_SYSTEM_PROMPT = (
    "You maintain the long-term memory of a long conversation. Merge the earlier "
    "memory and the newer summaries you are given into one summary, within the number "
    "of words stated. Keep every durable fact: names, numbers, doses, dates, times, "
    "decisions and preferences; drop small talk first. Do not add anything that is "
    "not given. Reply with the summary only."
)
COMPACTION_REQUEST = (
    "Earlier memory:\n{long}\n\nNewer summaries:\n{summaries}\n\n"
    "Merge them into one summary of at most {words} words."
)
_NO_CONVERSATION = "(no conversation in this part)"


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
    """The most source tokens one summary request carries; unsummarised messages
    holding this many are summarised before ``threshold`` is reached."""
    max_message_tokens: int = 400
    """Each message is cut to this many tokens in the summariser's input."""
    temperature: float = 0.2
    retry_delays: tuple[float, ...] = (30.0, 120.0, 600.0)
    """Seconds before each retry of a failed background call; after the last, the
    session's next turn tries again."""
    long_range_tokens: int = 500
    """The long-range summary's size: compaction's reply is cut to it."""
    recent_summary_tokens: int = 800
    """The summaries after the long-range summary may take this many tokens; beyond
    it the oldest are folded into the long-range summary."""
    max_recent_summaries: int = 6
    """And at most this many of them."""
    fold_batch: int = 8
    """The most summaries one compaction folds."""
    facts: bool = True
    """Extract facts in the background."""
    facts_every: int = 4
    """Extract once this many user messages wait after the cursor."""
    facts_batch: int = 16
    """The most messages one extraction reads."""
    max_candidates: int = 24
    """The most statements one extraction offers the model."""
    max_fact_tokens: int = 60
    """A statement longer than this is cut before it is stored as a fact."""
    fact_readings: int = 2
    """How many readings (``facts.READINGS``) put each statement to the model: a
    statement any of them answers ``yes`` to is kept. One halves the calls of a
    backend that needs no second opinion."""


@dataclass(slots=True)
class MemoryUsage:
    """Memory's own model calls: how many, how many failed, and their tokens."""

    calls: dict[str, int] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def total_calls(self) -> int:
        return sum(self.calls.values())

    def add(self, kind: str, usage: Usage | None) -> None:
        self.calls[kind] = self.calls.get(kind, 0) + 1
        if usage is not None:
            self.input_tokens += usage.input_tokens or 0
            self.output_tokens += usage.output_tokens or 0

    def fail(self, kind: str) -> None:
        self.failures[kind] = self.failures.get(kind, 0) + 1


UsageHook = Callable[[str, str, Usage | None], None]
"""``(kind, model, usage)`` of each memory call that completed."""


def _system(text: str) -> Message:
    return Message("system", (TextPart(text),))


def _user(text: str) -> Message:
    return Message("user", (TextPart(text),))


class Summariser:
    """Memory's background work: summaries, compaction, facts (module docstring)."""

    def __init__(
        self,
        store: AgentStore,
        chat: ChatFn,
        model: str | None = None,
        config: SummariserConfig | None = None,
        *,
        gate: TurnGate | None = None,
        on_usage: UsageHook | None = None,
    ) -> None:
        self.store = store
        self.chat = chat
        self.model = model
        """The memory calls' model; ``None``: the model each call names."""
        self.config = config or SummariserConfig()
        self.gate = gate
        """Turns in flight (``agent.turns``): background calls yield to them."""
        self.on_usage = on_usage
        self.usage = MemoryUsage()
        self._tasks: dict[str, asyncio.Task[int]] = {}
        self.failures = 0
        """Failed attempts (each retry counts)."""
        self.deferred = 0
        """Background calls cancelled because a turn started on their backend."""

    def model_for(self, session_model: str | None) -> str:
        """The model background memory work uses: the summariser's own, else the
        session's."""
        chosen = self.model or session_model
        if not chosen:
            raise ValueError("no model to summarise with: configure one or name one")
        return chosen

    # -- one call each -------------------------------------------------------------------

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
        if available <= 0:
            return None
        run, lines, source = self._select(pending[: min(available, config.threshold)])
        # Under the threshold, a run is summarised early only when its tokens filled
        # one request (the selection was cut).
        if not force and available < config.threshold and len(run) == available:
            return None
        if not lines:  # nothing but tool traffic: record the run as covered
            summary = _NO_CONVERSATION
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
                body = truncate_to_tokens(body_of(message), self.config.max_message_tokens)
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
        text = SUMMARY_REQUEST.format(transcript=transcript, words=words)
        reply = await self._call(
            "summary",
            ChatRequest(
                model=model,
                messages=(_system(SUMMARY_SYSTEM_PROMPT), _user(text)),
                # Model tokens are not the counter's tokens; leave room, then cut below.
                params=GenerationParams(max_tokens=limit * 2, temperature=self.config.temperature),
            ),
            chat,
        )
        return truncate_to_tokens(reply.strip(), limit)

    async def compact_once(
        self, session_id: str, *, model: str | None = None, chat: ChatFn | None = None
    ) -> LongSummaryRecord | None:
        """Fold the oldest summaries after the long-range summary into a new one, when
        they pass ``recent_summary_tokens`` or ``max_recent_summaries``. ``None`` when
        there is nothing to fold, or another writer stored that fold."""
        config = self.config
        chosen = model or self.model_for(None)
        rows = self.store.memory
        long = await rows.long_summary(session_id)
        after = long.last_message_id if long is not None else None
        read = config.max_recent_summaries + config.fold_batch
        waiting = await rows.summaries_after(session_id, after, read, newest=False)
        folded = _to_fold(waiting, config, complete=len(waiting) < read)
        if not folded:
            return None
        items = [s.content.strip() for s in folded if s.content.strip() != _NO_CONVERSATION]
        earlier = long.content.strip() if long is not None else "(none yet)"
        if items:
            source = count_text_tokens(earlier) + sum(count_text_tokens(i) for i in items)
            limit = max(1, min(config.long_range_tokens, source))
            words = max(10, int(limit * 0.75))
            text = COMPACTION_REQUEST.format(
                long=earlier, summaries="\n\n".join(items), words=words
            )
            reply = await self._call(
                "compaction",
                ChatRequest(
                    model=chosen,
                    messages=(_system(COMPACTION_SYSTEM_PROMPT), _user(text)),
                    params=GenerationParams(max_tokens=limit * 2, temperature=config.temperature),
                ),
                chat,
            )
            content = truncate_to_tokens(reply.strip(), limit)
            if not content:
                raise ValueError("the compaction model returned an empty summary")
        else:
            content = earlier if long is not None else _NO_CONVERSATION
        return await rows.add_long_summary(
            session_id,
            content,
            first_message_id=long.first_message_id
            if long is not None
            else folded[0].first_message_id,
            last_message_id=folded[-1].last_message_id,
            folded=len(folded),
            model=chosen,
        )

    async def extract_facts_once(
        self,
        session_id: str,
        *,
        model: str | None = None,
        force: bool = False,
        chat: ChatFn | None = None,
    ) -> list[FactRecord] | None:
        """Offer the user's statements after the cursor to the model, once
        ``facts_every`` user messages wait (with ``force``, any), and store the facts it
        chooses. ``None`` when there was nothing to read; else the new facts (maybe
        none)."""
        config = self.config
        rows = self.store.memory
        upto = await rows.facts_upto(session_id)
        batch = await self.store.first_messages(session_id, config.facts_batch, after_id=upto)
        users = sum(1 for m in batch if m.role == "user")
        if not batch or users == 0 or (not force and users < config.facts_every):
            return None
        # Statements are cut to what a fact may hold before anything else, so one
        # already stored, or two that are the same once cut, are asked about once.
        known = {f.content.casefold() for f in await rows.facts(session_id)}
        asked: list[Candidate] = []
        for found in candidates(batch, limit=config.max_candidates):
            text = truncate_to_tokens(found.text, config.max_fact_tokens)
            if text.casefold() not in known:
                known.add(text.casefold())
                asked.append(Candidate(text, found.message_id))
        chosen: list[FactRecord] = []
        if asked:
            kept = await self._choose_facts(asked, model or self.model_for(None), chat)
            subject = await rows.session_subject(session_id)
            for candidate in kept:
                chosen.append(
                    await rows.add_fact(
                        session_id,
                        candidate.text,
                        message_id=candidate.message_id,
                        subject_id=subject,
                    )
                )
        await rows.set_facts_upto(session_id, batch[-1].id)
        return chosen

    async def _choose_facts(
        self, asked: Sequence[Candidate], model: str, chat: ChatFn | None
    ) -> list[Candidate]:
        """The statements some reading (``facts.READINGS``) answers ``yes`` to, in
        order. Readings go one after the other, each over every statement not yet
        kept, so a backend's prompt cache holds one reading's examples at a time. An
        unusable reply counts as a failure and as ``no``; a failed call raises (the
        extraction is retried, the cursor unmoved)."""
        kept: set[int] = set()
        for examples in READINGS[: max(1, self.config.fact_readings)]:
            for index, candidate in enumerate(asked):
                if index in kept:
                    continue
                request = fact_request(candidate.text, examples, model)
                reply = await self._call("facts", request, chat)
                try:
                    if parse_answer(reply):
                        kept.add(index)
                except ValueError as exc:
                    # A backend that ignores the schema answered in prose: the call
                    # was made and counted; the statement stays in the summaries.
                    self.usage.fail("facts")
                    log.warning("the fact extractor's reply was unusable: %s", exc)
        return [candidate for index, candidate in enumerate(asked) if index in kept]

    async def _call(self, kind: CallKind, request: ChatRequest, chat: ChatFn | None) -> str:
        """One memory call, counted (``usage``, ``on_usage``) whether it fails or not."""
        # aclosing: a turn that cancels the call, or an error event, ends the backend's
        # call now (the embedded model's turn is free at once).
        try:
            async with aclosing((chat or self.chat)(request)) as events:
                response = await accumulate(events)
        except Exception:
            self.usage.fail(kind)
            raise
        self.usage.add(kind, response.usage)
        if self.on_usage is not None:
            self.on_usage(kind, request.model, response.usage)
        return response.message.text

    # -- in the background --------------------------------------------------------------

    async def summarise_pending(
        self, session_id: str, max_runs: int = 100, *, model: str | None = None
    ) -> int:
        """Summarise run after run until the session is under the threshold, then
        compact and extract facts: what the background does, in the foreground. The
        number of summaries written."""
        written = 0
        for step in self._steps(session_id, model or self.model_for(None)):
            for _ in range(max_runs):
                result = await step()
                if result is None:
                    break
                if isinstance(result, SummaryRecord):
                    written += 1
        return written

    def _steps(self, session_id: str, model: str) -> list[Callable[[], Awaitable[object | None]]]:
        steps: list[Callable[[], Awaitable[object | None]]] = [
            lambda: self.summarise_once(session_id, model=model),
            lambda: self.compact_once(session_id, model=model),
        ]
        if self.config.facts:
            steps.append(lambda: self.extract_facts_once(session_id, model=model))
        return steps

    def schedule(self, session_id: str, model: str | None = None) -> asyncio.Task[int]:
        """Memory's work on ``session_id`` in the background with ``model_for(model)``
        (one task per session at a time). Failures are logged, counted and retried,
        never raised into a turn; turns on the same backend go first."""
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
        """Summaries, then compaction, then facts; the number of summaries written."""
        written = 0
        for step in self._steps(session_id, model):
            retries = iter(self.config.retry_delays)
            runs = 0
            while runs < max_runs:
                try:
                    result = await self._yielding(step, model, session_id)
                except Exception:  # a failed call must not fail a turn; it is retried
                    self.failures += 1
                    log.exception("memory work on session %s failed", session_id)
                    delay = next(retries, None)
                    if delay is None:
                        return written  # the session's next turn schedules it again
                    await asyncio.sleep(delay)
                    continue
                if result is None:
                    break
                runs += 1
                if isinstance(result, SummaryRecord):
                    written += 1
        return written

    async def _yielding(
        self, step: Callable[[], Awaitable[object | None]], chosen: str, session_id: str
    ) -> object | None:
        """``step()``, started only while no turn is in flight on the model's backend
        and cancelled (then started again) when one begins."""
        gate = self.gate
        if gate is None:
            return await step()
        while True:
            await gate.wait_idle(chosen)
            turn_started = gate.watch(chosen)
            work = asyncio.ensure_future(step())
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
            log.info("memory work on session %s deferred: a turn started", session_id)

    async def drain(self) -> None:
        """Wait for every scheduled background task (tests, shutdown)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks.values()))

    async def aclose(self) -> None:
        """Cancel scheduled background work."""
        tasks = list(self._tasks.values())
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


def _to_fold(
    waiting: Sequence[SummaryRecord], config: SummariserConfig, *, complete: bool
) -> list[SummaryRecord]:
    """The oldest of ``waiting`` (all the summaries after the long-range summary,
    oldest first, unless ``complete`` is false) that must be folded: those beyond the
    newest ones that fit ``recent_summary_tokens`` and ``max_recent_summaries``."""
    kept = 0
    tokens = 0
    if complete:
        for summary in reversed(waiting):
            cost = count_text_tokens(summary.content)
            if kept >= config.max_recent_summaries or tokens + cost > config.recent_summary_tokens:
                break
            kept += 1
            tokens += cost
    else:
        kept = config.max_recent_summaries
    foldable = len(waiting) - kept
    return list(waiting[: min(max(foldable, 0), config.fold_batch)])
