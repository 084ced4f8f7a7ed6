"""Stateful interactions, the wire side: a body continued from a stored interaction,
and the request marked as stored. No I/O: the gateway loads and saves
(``gateway.stored_responses``, the rows of ``INTERACTIONS``).

A continued body's ``input`` is the stored conversation (every input step of the
chain), then the stored interaction's ``steps`` (what the model did, as a client sends
it back), then the new input; ``previous_interaction_id`` is taken out, so the body
then decodes as one that carried the whole conversation. Only the conversation is
carried: ``system_instruction``, ``tools`` and ``generation_config`` belong to each
interaction and are sent again with each one, as Google's API wants them.

An interaction id the client sends is echoed back (``previous_interaction_id`` in the
reply, the id in a 404's message): ``check_interaction_id`` refuses one longer than any
stored id can be with a 400 naming the field, before it is looked up or echoed.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.interactions.response import PREVIOUS_INTERACTION_ID, STORED
from llmbridge.dialects.interactions.types import PROVIDER

__all__ = [
    "MAX_INTERACTION_ID_CHARS",
    "PREVIOUS_INTERACTION_ID",
    "check_interaction_id",
    "continued_body",
    "input_bytes",
    "input_items",
    "marked",
]

MAX_INTERACTION_ID_CHARS = 200
"""The longest interaction id: the stored replies' id column (``ResponseRow.id``)."""

_CONTENT_TYPES = frozenset({"text", "image", "audio", "video", "document"})


def input_items(value: object) -> list[Any]:
    """A body's ``input`` as a list of steps and contents (a string, or one content,
    is the user's turn)."""
    if isinstance(value, str):
        return [{"type": "user_input", "content": [{"type": "text", "text": value}]}]
    if isinstance(value, dict):
        # A type that is not a string (a fuzzer's {}) is no content: the decoder names it.
        kind = value.get("type")
        if isinstance(kind, str) and kind in _CONTENT_TYPES:
            return [{"type": "user_input", "content": [value]}]
        return [value]
    return list(value) if isinstance(value, list) else []


def check_interaction_id(value: str, field: str) -> None:
    """A 400 naming ``field`` when ``value`` is longer than ``MAX_INTERACTION_ID_CHARS``."""
    if len(value) > MAX_INTERACTION_ID_CHARS:
        raise InvalidRequestError(
            f"{field}: an interaction id has at most {MAX_INTERACTION_ID_CHARS} characters "
            f"(got {len(value)})",
            param=field,
        )


def input_bytes(value: object) -> int:
    """The bytes a body's ``input`` takes stored: its items as compact JSON."""
    return len(dumps(input_items(value)))


def continued_body(body: dict[str, Any], input: list[Any], output: list[Any]) -> dict[str, Any]:
    """``body`` with the stored conversation (``input``) and steps (``output``) before
    its own input, and without ``previous_interaction_id``."""
    rest = {key: value for key, value in body.items() if key != PREVIOUS_INTERACTION_ID}
    rest["input"] = [*input, *output, *input_items(body.get("input"))]
    return rest


def marked(
    request: ChatRequest, *, stored: bool, previous_interaction_id: str | None
) -> ChatRequest:
    """``request`` whose reply echoes ``previous_interaction_id``."""
    details = dict((request.provider_details or {}).get(PROVIDER) or {})
    details[STORED] = stored
    details[PREVIOUS_INTERACTION_ID] = previous_interaction_id
    provider_details = {**(request.provider_details or {}), PROVIDER: details}
    return replace(request, provider_details=provider_details)
