"""Durable facts: what the person said about themselves and their world (names,
numbers, codes, allergies, appointments, preferences), kept in every context of the
session like pins the user did not have to make.

Extraction reads the session's user messages after its cursor (``memory_cursors``),
splits them into sentences and keeps the candidates: statements (not questions) of
at least ``min_words`` words, newest ``max_candidates`` of a batch. Each candidate is
then put to the model on its own, as one yes-or-no question (``FACTS_SYSTEM_PROMPT``,
``fact_messages``): does it tell a lasting fact about the person's life? The answer is
constrained by a JSON schema (``FACT_SCHEMA``: ``{"label": "yes" | "no"}``; a backend
that holds a reply to a schema, the embedded model's grammar or Ollama's ``format``,
can write nothing else; others are asked for it and their reply is checked).

Why one statement per call, with worked examples as earlier turns of the
conversation: SmolLM2-135M, the embedded default, labelling a batch of statements in
one reply labelled nearly everything ``fact`` or nearly nothing (16 of the benchmark's 20
facts, with 5 of 7 small-talk lines kept); asked one question at a time after worked
examples, it separates them (``bench/agent_memory.py`` and docs/AGENT.md give the
figures, on its statements and on a held-out set). The examples and the
system prompt are the same for every call, so a backend with a prompt cache (the
embedded model's KV cache, Ollama's, llama.cpp's) evaluates only the statement.

A small model's answers move with its examples, so the question is asked in
``readings`` (``READINGS``): the same question after a different set of examples. A
statement any reading answers ``yes`` to is kept: a fact lost costs more than a remark
kept, which costs a few tokens of the facts' share and can be deleted through the API.

What is stored is the sentence the person wrote, never the model's words: a model
cannot invent a fact this way, only choose. A fact is stored with the id of the
message it came from, and with the session's subject when the session has one (a
patient, for eldercare), so every session about that subject shows it
(``MemoryRows.facts``). The same
sentence is never stored twice in a session.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from llmbridge.agent.store import StoredMessage
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams, ResponseFormat

__all__ = [
    "ANSWERS",
    "EXAMPLES",
    "FACTS_SYSTEM_PROMPT",
    "FACT_QUESTION",
    "FACT_SCHEMA",
    "READINGS",
    "Candidate",
    "candidates",
    "fact_messages",
    "fact_request",
    "parse_answer",
]

FACTS_SYSTEM_PROMPT = (
    "Answer whether the statement tells a lasting fact about the user's life (people, "
    "places, numbers, health, routines, preferences) that is still true next month. "
    "Reply with JSON only."
)
FACT_QUESTION = 'Statement: "{statement}" Still true next month?'
ANSWERS = ("yes", "no")
FACT_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"label": {"type": "string", "enum": list(ANSWERS)}},
    "required": ["label"],
    "additionalProperties": False,
}
"""The reply: ``{"label": "yes"}`` or ``{"label": "no"}``."""

EXAMPLES: tuple[tuple[str, bool], ...] = (
    ("My brother is called Tom.", True),
    ("Thanks, that is kind.", False),
    ("The door code is 2580.", True),
    ("It is raining again today.", False),
    ("I am allergic to nuts.", True),
    ("I just had a cup of tea.", False),
    ("My doctor is Dr. Patel.", True),
    ("That film was fun.", False),
    ("My bus pass number is 88213.", True),
    ("I feel sleepy now.", False),
    ("I go swimming on Fridays.", True),
    ("Good evening to you.", False),
    ("I can't have sugar.", True),
    ("I am a bit cold right now.", False),
    ("My email is jo.reed@example.com.", True),
    ("We had soup for lunch.", False),
)
"""Worked examples, shown as earlier turns: statements and whether each is a lasting
fact. None of them is one of ``bench/agent_memory.py``'s statements or its held-out
set's."""

READINGS: tuple[int, ...] = (12, 16)
"""Each reading asks after the first N ``EXAMPLES``: the second adds a rule phrased as
a negation, a contact detail and two more remarks about the moment. Measured on the
embedded model, either reading alone misses two of the benchmark's 20 facts, and not the
same two."""

_SENTENCE = re.compile(r"(?<=[.!?])\s+")
_ABBREVIATIONS = frozenset({"dr.", "mr.", "mrs.", "ms.", "st.", "prof.", "mt.", "no."})
"""Words after which a full stop does not end the sentence ("Dr. Okafor")."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """A sentence of a user message that may state a fact."""

    text: str
    message_id: int


def candidates(
    messages: Sequence[StoredMessage], *, min_words: int = 3, limit: int = 24
) -> list[Candidate]:
    """The statements of the user messages (sentences that are not questions, of at
    least ``min_words`` words), at most ``limit`` of them (the newest), in order,
    without repeats."""
    found: list[Candidate] = []
    seen: set[str] = set()
    for message in messages:
        if message.role != "user":
            continue
        for sentence in _sentences(message.content):
            text = " ".join(sentence.split())
            if not text or text.endswith("?") or len(text.split()) < min_words:
                continue
            key = text.casefold()
            if key in seen:
                continue
            seen.add(key)
            found.append(Candidate(text, message.id))
    return found[-limit:] if limit else []


def _sentences(text: str) -> list[str]:
    pieces: list[str] = []
    for piece in _SENTENCE.split(text.strip()):
        if pieces and pieces[-1].split()[-1].casefold() in _ABBREVIATIONS:
            pieces[-1] = f"{pieces[-1]} {piece}"
        else:
            pieces.append(piece)
    return pieces


def _answer(is_fact: bool) -> str:
    # json.dumps' spacing (``{"label": "yes"}``), as the examples were measured with.
    return json.dumps({"label": ANSWERS[0] if is_fact else ANSWERS[1]})


def fact_messages(statement: str, examples: int) -> tuple[Message, ...]:
    """The conversation that asks about ``statement``: the system prompt, the first
    ``examples`` worked examples as question-and-answer turns, then the question."""
    turns = [Message("system", (TextPart(FACTS_SYSTEM_PROMPT),))]
    for text, is_fact in EXAMPLES[:examples]:
        turns.append(Message("user", (TextPart(FACT_QUESTION.format(statement=text)),)))
        turns.append(Message("assistant", (TextPart(_answer(is_fact)),)))
    turns.append(Message("user", (TextPart(FACT_QUESTION.format(statement=statement)),)))
    return tuple(turns)


def fact_request(statement: str, examples: int, model: str) -> ChatRequest:
    """The call that asks ``model`` about ``statement`` after ``examples`` worked
    examples: at temperature 0, its reply held to ``FACT_SCHEMA``."""
    return ChatRequest(
        model=model,
        messages=fact_messages(statement, examples),
        params=GenerationParams(max_tokens=16, temperature=0.0),
        response_format=ResponseFormat(type="json_schema", schema=FACT_SCHEMA, name="fact"),
    )


def parse_answer(reply: str) -> bool:
    """Whether the reply says ``yes``. A reply that is not a JSON object with a
    ``label`` of ``yes`` or ``no`` is a ``ValueError`` (a backend that ignores the
    schema answered in prose)."""
    text = reply.strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the fact extractor's reply holds no JSON object")
    try:
        value = orjson.loads(text[start : end + 1])
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the fact extractor's reply is not JSON: {exc}") from exc
    label = value.get("label") if isinstance(value, dict) else None
    answer = str(label).strip().casefold() if label is not None else ""
    if answer not in ANSWERS:
        raise ValueError(f"the fact extractor's reply has no yes/no label: {text[:80]!r}")
    return answer == ANSWERS[0]
