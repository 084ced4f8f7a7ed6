"""Durable facts: what the person said about themselves and their world (names,
numbers, codes, allergies, appointments, preferences), kept in every context of the
session like pins the user did not have to make (issue 29).

Extraction reads the session's user messages after its cursor (``memory_cursors``),
splits them into sentences and keeps the candidates: statements (not questions) of
at least ``min_words`` words, newest ``max_candidates`` of a batch. The model is then
asked to label each candidate ``fact`` or ``chat``, in a constrained format: a JSON
schema whose keys are the candidates themselves and whose values are an ``enum`` of
the two labels (a backend that holds a reply to a schema, the embedded model's
grammar or Ollama's ``format``, can write nothing else; others are asked for it and
their reply is checked against the candidates the same way). What is stored is the
sentence the person wrote, never the model's words: a small model cannot invent a
fact this way, only choose; a sentence it wrongly keeps costs a few tokens of the
facts' share, and the API can delete it.

A fact is stored with the id of the message it came from, and with the session's
patient when the session is about one, so every session about that patient shows it
(``MemoryRows.facts``). The same sentence is never stored twice in a session.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson

from llmbridge.agent.store import StoredMessage

__all__ = [
    "FACTS_SYSTEM_PROMPT",
    "LABELS",
    "Candidate",
    "candidates",
    "facts_request_text",
    "facts_schema",
    "parse_facts",
]

FACTS_SYSTEM_PROMPT = (
    'You label statements a user made. Label a statement "fact" when it states a '
    "durable fact about the user or the people in their life: a name, relationship, "
    "number or code, address, allergy, medication, appointment, date, routine or "
    'preference. Label it "chat" when it is small talk, thanks, a greeting or about '
    "the moment. Reply with JSON only.\n\n"
    "Example statements:\n- My brother is called Tom.\n- Thanks, that is kind.\n"
    "- The door code is 2580.\n- It is raining again today.\n- I am allergic to nuts.\n"
    'Example reply: {"My brother is called Tom.": "fact", "Thanks, that is kind.": '
    '"chat", "The door code is 2580.": "fact", "It is raining again today.": '
    '"chat", "I am allergic to nuts.": "fact"}'
)
FACTS_REQUEST = 'Statements:\n{listed}\n\nLabel each statement "fact" or "chat".'
LABELS = ("fact", "chat")

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


def facts_schema(found: Sequence[Candidate]) -> dict[str, Any]:
    """The reply's JSON schema: every statement, as written, a required key whose value
    is ``fact`` or ``chat``. A small model asked for a list of facts answers with an
    empty one (SmolLM2-135M: ``{"facts": []}`` to a batch holding two facts); asked
    for a label per statement, right after the statement itself, it has to decide
    each one."""
    keys = [c.text for c in found]
    return {
        "type": "object",
        "properties": {key: {"type": "string", "enum": list(LABELS)} for key in keys},
        "required": keys,
        "additionalProperties": False,
    }


def facts_request_text(found: Sequence[Candidate]) -> str:
    return FACTS_REQUEST.format(listed="\n".join(f"- {c.text}" for c in found))


def parse_facts(reply: str, found: Sequence[Candidate]) -> list[Candidate]:
    """The candidates the reply labelled ``fact``, in the candidates' order. A reply
    that is not a JSON object is a ``ValueError``; a key that is not a candidate is
    ignored (a backend without grammars may paraphrase)."""
    text = reply.strip()
    start, end = text.find("{"), text.rfind("}")
    if start < 0 or end < start:
        raise ValueError("the fact extractor's reply holds no JSON object")
    try:
        value = orjson.loads(text[start : end + 1])
    except orjson.JSONDecodeError as exc:
        raise ValueError(f"the fact extractor's reply is not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise ValueError("the fact extractor's reply is not a JSON object")
    labelled = {
        " ".join(str(key).split()).casefold()
        for key, label in value.items()
        if str(label).strip().casefold() == "fact"
    }
    return [c for c in found if c.text.casefold() in labelled]
