"""The ``agent_memory`` scenario: does a long agent session remember what matters?

This file owns the measurement of the agent's memory over a long conversation:
20 user messages each state one distinct fact (a sister's name, a gate code, an
allergy, ...), never pinned, then 180 ordinary exchanges (questions and small talk),
then one last question. Every turn goes through the real agent service
(``AgentRuntime``: memory, the background summariser, compaction and fact extraction,
the ledger-less path of ``llmbridge agent``) on a SQLite database; the chat model is
scripted (``Recorder``: it answers ``Noted.`` and keeps every prompt it is sent, so
each assembled prompt can be read). After each turn the background memory work is
drained, as a user typing at human speed would let it finish.

The figure: how many of the 20 facts are present (their key word, case-insensitive)
in the prompt of the last turn. Memory's model calls are counted by kind, and every
history context is checked against the budget (``MemoryContext.tokens``).

Memory's model (``--memory``):

- ``scripted``: a scripted summariser and extractor that keeps every fact (it knows
  the 20 key words: summaries, compactions and fact choices keep exactly the
  sentences holding one). The structure's figure: must be 20/20 on every run
  (``tests/agent/test_memory_bench.py`` runs it too). ``--no-facts`` runs it with
  fact extraction off: summaries and compaction alone.
- ``embedded``: the embedded model (SmolLM2-135M through llama.cpp) writes the
  summaries and compactions and chooses the facts (``agent.summary_model:
  smollm2``), as a gateway with no configuration does.
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from llmbridge.agent.memory import (
    COMPACTION_SYSTEM_PROMPT,
    FACTS_SYSTEM_PROMPT,
    SUMMARY_SYSTEM_PROMPT,
    MemoryContext,
    SummariserConfig,
)
from llmbridge.agent.runtime import AgentRuntime
from llmbridge.agent.service import AgentRequest
from llmbridge.agent.tools import ToolRegistry
from llmbridge.backends.base import Backend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.gateway.config import GatewayConfig
from llmbridge.serving.build import build_backends
from llmbridge.serving.models import Models

CHAT_MODEL = "scripted"
EMBEDDED_MODEL = "smollm2"

FACTS: tuple[tuple[str, str], ...] = (
    ("My sister's name is Margaret.", "Margaret"),
    ("The gate code at my house is 4417.", "4417"),
    ("I am allergic to penicillin.", "penicillin"),
    ("My dog is called Biscuit.", "Biscuit"),
    ("My cardiologist is Dr. Okafor.", "Okafor"),
    ("I take Lisinopril every morning at 8am.", "Lisinopril"),
    ("My son Daniel lives in Leeds.", "Leeds"),
    ("My wifi password is bluefinch22.", "bluefinch22"),
    ("My next dentist appointment is on March 14th.", "March 14"),
    ("I like my tea with oat milk.", "oat milk"),
    ("My late husband was named Harold.", "Harold"),
    ("My blood type is O negative.", "O negative"),
    ("I was born in Galway.", "Galway"),
    ("My neighbour Priya keeps a spare key.", "Priya"),
    ("I cannot eat shellfish.", "shellfish"),
    ("My granddaughter Chloe turns seven in June.", "Chloe"),
    ("My hearing aid battery size is 312.", "312"),
    ("My pharmacy is Boots on King Street.", "King Street"),
    ("I play bridge every Thursday afternoon.", "bridge"),
    ("My phone number is 555-0142.", "555-0142"),
)
"""Each stated once, in its own user message; the key word is what is looked for."""

ORDINARY = (
    "What would be a nice idea for lunch today?",
    "Tell me a short joke, please.",
    "It was sunny this morning.",
    "Thanks, that was helpful.",
    "How do I boil an egg properly?",
    "I watched the news earlier.",
    "Can you suggest a good book?",
    "The garden looks lovely today.",
    "What is the capital of Portugal?",
    "I feel a bit tired this afternoon.",
    "How many cups are in a litre?",
    "That made me smile.",
)
LAST_QUESTION = "What do you remember about me and my family?"
REPLY = "Noted."


def conversation(exchanges: int = 180) -> list[str]:
    """The user's messages: the 20 facts, then ``exchanges`` ordinary ones."""
    ordinary = [
        f"{ORDINARY[n % len(ORDINARY)]} (chat {n + 1})" if n >= len(ORDINARY) else ORDINARY[n]
        for n in range(exchanges)
    ]
    return [text for text, _ in FACTS] + ordinary


def facts_present(prompt: str) -> list[str]:
    """The key words of the facts present in ``prompt``."""
    lowered = prompt.casefold()
    return [key for _, key in FACTS if key.casefold() in lowered]


def _kind(request: ChatRequest) -> str:
    first = request.messages[0].text if request.messages else ""
    for prompt, kind in (
        (SUMMARY_SYSTEM_PROMPT, "summary"),
        (COMPACTION_SYSTEM_PROMPT, "compaction"),
        (FACTS_SYSTEM_PROMPT, "facts"),
    ):
        if first == prompt:
            return kind
    return "turn"


def _keeping_reply(request: ChatRequest) -> str:
    """The scripted memory model that keeps every fact: the sentences holding a key."""
    source = request.messages[-1].text
    if _kind(request) == "facts":  # one statement, the last message's question
        return json.dumps({"label": "yes" if facts_present(source) else "no"})
    kept = [text for text, key in FACTS if key.casefold() in source.casefold()]
    return " ".join(kept) if kept else "Small talk."


class Recorder(ScriptedBackend):
    """The chat model: ``Noted.`` to every turn, each turn's prompt kept; with
    ``keeping``, it also answers memory's requests (``_keeping_reply``)."""

    def __init__(self, name: str, *, keeping: bool) -> None:
        super().__init__(name, default=Script(text=[REPLY]), models=(CHAT_MODEL,))
        self.keeping = keeping
        self.turns: list[ChatRequest] = []
        self.memory_calls: dict[str, int] = {}

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        kind = _kind(request)
        if kind == "turn":
            self.turns.append(request)
        else:
            self.memory_calls[kind] = self.memory_calls.get(kind, 0) + 1
            if self.keeping:
                self.enqueue(Script(text=[_keeping_reply(request)]))
        async for event in super().chat(request):
            yield event


@dataclass
class Outcome:
    memory: str
    facts_extraction: bool
    exchanges: int
    budget: int
    facts_kept: int
    facts_missing: list[str]
    memory_calls: dict[str, int]
    memory_failures: dict[str, int]
    memory_tokens: dict[str, int]
    final_history_tokens: int
    max_history_tokens: int
    over_budget: int
    stored_facts: int
    long_summary_tokens: int
    summaries: int
    build_ms_p50: float
    seconds: float
    contexts: int = 0
    final_prompt: list[dict[str, str]] = field(default_factory=list)


def _config(database: Path, *, embedded: bool, budget: int) -> GatewayConfig:
    backends: dict[str, Any] = {"chat": {"type": "scripted"}}
    agent: dict[str, Any] = {"database": str(database), "history_budget": budget}
    if embedded:
        backends["local"] = {"type": "embedded"}
        agent["summary_model"] = EMBEDDED_MODEL
    routes = [{"name": EMBEDDED_MODEL, "backend": "local"}] if embedded else []
    return GatewayConfig.model_validate(
        {"backends": backends, "default_backend": "chat", "models": routes, "agent": agent}
    )


async def run(
    *,
    memory: str = "scripted",
    exchanges: int = 180,
    budget: int = 3000,
    facts: bool = True,
    directory: Path | None = None,
) -> Outcome:
    """The conversation through the agent; see the module docstring."""
    embedded = memory == "embedded"
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(dir=directory) as tmp:
        config = _config(Path(tmp) / "agent.db", embedded=embedded, budget=budget)
        recorder = Recorder("chat", keeping=not embedded)
        backends: dict[str, Backend] = {"chat": recorder}
        if embedded:
            built = build_backends(config)
            backends["local"] = built["local"]
            for name, backend in built.items():
                if name != "local":
                    await backend.aclose()
        models = Models(config, backends)
        runtime = await AgentRuntime.open(config.agent, models, tools=ToolRegistry())
        try:
            return await _converse(runtime, recorder, memory, exchanges, budget, facts, started)
        finally:
            await runtime.aclose()
            for backend in backends.values():
                await backend.aclose()


async def _converse(
    runtime: AgentRuntime,
    recorder: Recorder,
    memory: str,
    exchanges: int,
    budget: int,
    facts: bool,
    started: float,
) -> Outcome:
    summariser = runtime.summariser
    assert summariser is not None, "memory's background work is on by default"
    if not facts:
        summariser.config = SummariserConfig(facts=False)
    contexts: list[MemoryContext] = []
    build_ms: list[float] = []
    builder = runtime.service.memory
    build = builder.build

    async def recording_build(
        session_id: str, *, before_id: int | None = None, budget: int | None = None
    ) -> MemoryContext:
        began = time.perf_counter()
        context = await build(session_id, before_id=before_id, budget=budget)
        build_ms.append((time.perf_counter() - began) * 1000)
        contexts.append(context)
        return context

    builder.build = recording_build  # type: ignore[method-assign]
    session_id: str | None = None
    for text in [*conversation(exchanges), LAST_QUESTION]:
        reply = await runtime.service.run_agent(
            AgentRequest(input=text, model=CHAT_MODEL, session_id=session_id, tools=False)
        )
        session_id = reply.session_id
        await summariser.drain()
    assert session_id is not None
    final = recorder.turns[-1]
    history = "\n".join(m.text for m in final.messages[:-1])
    present = facts_present(history)
    store = runtime.store
    long = await store.memory.long_summary(session_id)
    usage = summariser.usage
    calls = dict(usage.calls)
    return Outcome(
        memory=memory,
        facts_extraction=facts,
        exchanges=exchanges,
        budget=budget,
        facts_kept=len(present),
        facts_missing=[key for _, key in FACTS if key not in present],
        memory_calls=calls,
        memory_failures=dict(usage.failures),
        memory_tokens={"input": usage.input_tokens, "output": usage.output_tokens},
        final_history_tokens=contexts[-1].tokens,
        max_history_tokens=max(c.tokens for c in contexts),
        over_budget=sum(1 for c in contexts if c.tokens > budget),
        stored_facts=len(await store.memory.facts(session_id)),
        long_summary_tokens=long.token_count if long is not None else 0,
        summaries=len(await store.last_summaries(session_id, 10_000)),
        build_ms_p50=sorted(build_ms)[len(build_ms) // 2],
        seconds=time.perf_counter() - started,
        contexts=len(contexts),
        final_prompt=[{"role": m.role, "text": m.text} for m in final.messages],
    )


def _report(outcome: Outcome) -> str:
    calls = ", ".join(f"{k} {v}" for k, v in sorted(outcome.memory_calls.items())) or "none"
    failures = ", ".join(f"{k} {v}" for k, v in sorted(outcome.memory_failures.items()))
    lines = [
        f"memory model: {outcome.memory}"
        + ("" if outcome.facts_extraction else " (fact extraction off)"),
        f"conversation: 20 facts + {outcome.exchanges} ordinary exchanges + 1 question",
        f"facts in the final prompt: {outcome.facts_kept}/20"
        + (f" (missing: {', '.join(outcome.facts_missing)})" if outcome.facts_missing else ""),
        f"memory's model calls: {outcome.memory_calls and sum(outcome.memory_calls.values())}"
        f" ({calls})" + (f"; unusable/failed: {failures}" if failures else ""),
        f"memory's tokens (backend-reported): in {outcome.memory_tokens['input']}, "
        f"out {outcome.memory_tokens['output']}",
        f"history context: final {outcome.final_history_tokens} / max "
        f"{outcome.max_history_tokens} tokens of a {outcome.budget} budget; over budget: "
        f"{outcome.over_budget} of {outcome.contexts} contexts",
        f"stored: {outcome.summaries} summaries, long-range summary "
        f"{outcome.long_summary_tokens} tokens, {outcome.stored_facts} facts",
        f"context build p50: {outcome.build_ms_p50:.2f} ms; run: {outcome.seconds:.1f} s",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    # bench's modules import each other as top-level modules (``python -m bench`` puts
    # bench/ on the path); the tests import this one as ``bench.agent_memory``.
    from harness import arguments, results_header, save_results, start_run

    parser = arguments(__doc__)
    parser.add_argument("--memory", choices=("scripted", "embedded"), default="scripted")
    parser.add_argument("--exchanges", type=int, default=180)
    parser.add_argument("--budget", type=int, default=3000)
    parser.add_argument("--no-facts", action="store_true", help="fact extraction off")
    args = parser.parse_args(argv)
    started = start_run("agent_memory", argv)
    settings = {"memory": args.memory, "exchanges": args.exchanges, "budget": args.budget}
    outcome = asyncio.run(run(**settings, facts=not args.no_facts))
    print(_report(outcome))
    save_results(
        "agent_memory", results_header(started, args) | asdict(outcome), started.started, args
    )
    return 0


if __name__ == "__main__":
    from harness import entry_point

    entry_point(main)
