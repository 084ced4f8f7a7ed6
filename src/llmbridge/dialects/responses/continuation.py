"""Stateful Responses, the wire side: a body continued from a stored response, and the
request marked as stored. No I/O: the gateway loads and saves (``agent.store``).

A continued body's ``input`` is the stored conversation, then the stored response's
output items (what the model answered, as a client sends them back), then the new
input; ``previous_response_id`` is taken out, so the body then decodes as one that
carried the whole conversation. The stored ``instructions`` are not carried over:
OpenAI's API reference says the same ("the instructions from a previous response will
not be carried over to the next response"), so a client can swap its system message.

A response id the client sends is echoed back (``previous_response_id`` in the reply,
the id in a 404's message, ``DELETE``'s body): ``check_response_id`` refuses one longer
than any stored id can be (``MAX_RESPONSE_ID_CHARS``) with a 400 naming the field, in
OpenAI's words, before it is looked up or echoed (a megabyte echoed in a
header broke the OpenAI SDK).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.responses.request import DETAILS_KEY

__all__ = [
    "MAX_RESPONSE_ID_CHARS",
    "PREVIOUS_RESPONSE_ID",
    "STORED",
    "check_response_id",
    "continued_body",
    "input_bytes",
    "input_items",
    "marked",
]

MAX_RESPONSE_ID_CHARS = 200
"""The longest response id: the stored responses' id column (``ResponseRow.id``), four
times OpenAI's own (``resp_`` and 48 hex digits) and llmbridge's."""

PREVIOUS_RESPONSE_ID = "previous_response_id"
"""The body's field naming the response to continue (and the detail echoing it)."""
STORED = "stored"
"""The detail that says the response will be stored (``"store": true`` in the reply)."""


def input_items(value: object) -> list[Any]:
    """A body's ``input`` as a list of items (a string is one user message)."""
    if isinstance(value, str):
        return [{"type": "message", "role": "user", "content": value}]
    return list(value) if isinstance(value, list) else []


def check_response_id(value: str, field: str) -> None:
    """A 400 naming ``field`` when ``value`` is longer than ``MAX_RESPONSE_ID_CHARS``
    (OpenAI's wording and code for a string too long)."""
    if len(value) > MAX_RESPONSE_ID_CHARS:
        raise InvalidRequestError(
            f"Invalid '{field}': string too long. Expected a string with maximum length "
            f"{MAX_RESPONSE_ID_CHARS}, but got a string with length {len(value)} instead.",
            param=field,
            code="string_above_max_length",
        )


def input_bytes(value: object) -> int:
    """The bytes a body's ``input`` takes stored: its items as compact JSON."""
    return len(dumps(input_items(value)))


def continued_body(body: dict[str, Any], input: list[Any], output: list[Any]) -> dict[str, Any]:
    """``body`` with the stored conversation (``input``) and answer (``output``) before
    its own input, and without ``previous_response_id``."""
    rest = {key: value for key, value in body.items() if key != PREVIOUS_RESPONSE_ID}
    rest["input"] = [*input, *output, *input_items(body.get("input"))]
    return rest


def marked(request: ChatRequest, *, stored: bool, previous_response_id: str | None) -> ChatRequest:
    """``request`` whose reply says ``store`` and echoes ``previous_response_id``."""
    details = dict((request.provider_details or {}).get(DETAILS_KEY) or {})
    details[STORED] = stored
    details[PREVIOUS_RESPONSE_ID] = previous_response_id
    provider_details = {**(request.provider_details or {}), DETAILS_KEY: details}
    return replace(request, provider_details=provider_details)
