"""The agent's prompts keep their prefix from one turn to the next (docs/AGENT.md,
"Prompt order"): a session's turns through the agent service over a scripted backend
that records what it was sent, rendered as a chat template renders them.

What may change from turn N to turn N+1, and nothing before it: turn N's older-messages
block is closed by the seed's note, then come the separator, the recent exchange and
the current turn. At turn N+1 the last exchange joins the older block (the seed
relabels it: ``RECENT EXCHANGE`` becomes ``USER:``/``ASSISTANT:`` in the condensed
block), so turn N's prompt up to the end of its older block's last message is a prefix
of turn N+1's. Before the older block exists (turns 1 and 2), the prefix is the system
prompt and, from turn 2 on, the history's instruction. This turn's context (documents,
eldercare, anything read off the clock) is only ever in the last message.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

from llmbridge.agent.context_providers import ContextRequest
from llmbridge.agent.documents import DocumentStore
from llmbridge.agent.domains.eldercare.provider import EldercareProvider
from llmbridge.agent.memory import HISTORY_INSTRUCTION, OLDER_PREFIX, OLDER_SUFFIX, MemoryConfig
from llmbridge.agent.prompt import FOCUS_INSTRUCTIONS
from llmbridge.agent.service import AgentRequest, AgentService
from llmbridge.agent.store import AgentStore
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.core.messages import Message
from llmbridge.gateway.config import GatewayConfig
from llmbridge.serving.models import Models
from tests.agent.factories import EldercareFactory

PERSONA = "You are a careful eldercare nurse."
CUSTOM = "Answer in one line."
QUESTIONS = [
    "Should Mary take metformin with meals?",
    "What are the side effects of metformin for Mary?",
    "When is Mary's next doctor appointment?",
    "How is Mary's weight this week?",
    "Is Mary's glucose fine?",
]


class Clock:
    """A context provider that reads the clock, as a "current date/time" line would:
    a different stamp on every request."""

    name = "clock"

    def __init__(self) -> None:
        self.stamps: list[str] = []

    async def context(self, request: ContextRequest) -> str:
        stamp = f"Now: {request.now.isoformat()} (request {len(self.stamps)})"
        self.stamps.append(stamp)
        return stamp


def render(messages: Sequence[Message]) -> str:
    """The messages as a ChatML template (SmolLM2's, the embedded model's) renders them:
    the bytes a llama.cpp prefix cache compares."""
    return "".join(f"<|im_start|>{m.role}\n{m.text}<|im_end|>\n" for m in messages)


def must_keep(messages: Sequence[Message]) -> str:
    """What of a turn's rendered prompt the next turn must repeat byte for byte: up
    to the end of the older block's last message, else up to the end of the history's
    instruction, else the system prompt (the module docstring)."""
    rendered = render(messages)
    older = [m for m in messages if m.text.startswith(OLDER_PREFIX)]
    if older:
        return rendered[: rendered.index(OLDER_SUFFIX)]
    if any(m.text == HISTORY_INSTRUCTION for m in messages):
        end = rendered.index(HISTORY_INSTRUCTION) + len(HISTORY_INSTRUCTION)
        return rendered[:end]
    return render(messages[:1])


async def _service(store: AgentStore, backend: ScriptedBackend, clock: Clock) -> AgentService:
    documents = DocumentStore(store)
    await documents.add("Metformin leaflet", "Metformin is taken with meals to limit nausea.")
    records = EldercareFactory(store)
    mary = await records.add_patient("Mary Smith", conditions=["Diabetes"])
    await records.add_medication(mary, "Metformin", dosage="500mg", side_effects=["Nausea"])
    await records.record_vital(mary, "weight", 150, unit="lbs")
    await records.record_vital(mary, "glucose", 110, unit="mg/dL")
    await store.put_persona("nurse", name="Nurse", prompt=PERSONA)
    config = GatewayConfig.model_validate(
        {"backends": {backend.name: {"type": "scripted"}}, "restrict_models": False}
    )
    return AgentService(
        store,
        Models(config, {backend.name: backend}),
        documents=documents,
        providers=[EldercareProvider(store), clock],
        # A budget the whole conversation fits in: what the seed's sliding window
        # does once it is full is the seed's, not the order's.
        memory=MemoryConfig(budget=100_000),
    )


async def _session(store: AgentStore) -> tuple[list[list[Message]], Clock]:
    backend = ScriptedBackend("native")
    clock = Clock()
    service = await _service(store, backend, clock)
    session_id: str | None = None
    for question in QUESTIONS:
        request: dict[str, Any] = {"model": "scripted", "system_prompt": CUSTOM}
        if session_id is None:
            request["persona_id"] = "nurse"
        reply = await service.run_agent(AgentRequest(question, session_id=session_id, **request))
        session_id = reply.session_id
    return [list(r.messages) for r in backend.requests], clock


async def test_each_turn_starts_with_the_whole_kept_part_of_the_turn_before(
    store: AgentStore,
) -> None:
    turns, _ = await _session(store)
    assert len(turns) == len(QUESTIONS)
    # From the third turn on there is an older block: everything before its note is
    # kept, so only the last exchange and the current turn are evaluated again.
    assert [any(m.text.startswith(OLDER_PREFIX) for m in t) for t in turns] == [
        False,
        False,
        True,
        True,
        True,
    ]
    for number, (before, after) in enumerate(itertools.pairwise(turns), start=1):
        kept = must_keep(before)
        assert render(after).startswith(kept), f"turn {number} -> {number + 1}"


async def test_the_system_prompt_is_the_same_bytes_every_turn(store: AgentStore) -> None:
    turns, _ = await _session(store)
    firsts = {(t[0].role, t[0].text) for t in turns}
    assert firsts == {("system", f"{PERSONA}\n\n{CUSTOM}\n\n{FOCUS_INSTRUCTIONS}")}


async def test_per_request_context_never_comes_before_the_stable_part(store: AgentStore) -> None:
    turns, clock = await _session(store)
    assert len(clock.stamps) == len(QUESTIONS)
    for messages, stamp, question in zip(turns, clock.stamps, QUESTIONS, strict=True):
        *earlier, last = messages
        # The timestamp, the documents and the patient's record are this turn's only.
        assert not any(stamp in m.text for m in earlier)
        assert not any("Patient Information:" in m.text for m in earlier)
        assert not any("[Metformin leaflet]" in m.text for m in earlier)
        assert last.role == "user" and stamp in last.text and last.text.endswith(question)
        rendered = render(messages)
        assert rendered.index(stamp) > len(render(earlier))
