"""How much one request may hold, and the checks that keep decoded JSON encodable.

``RequestLimits`` bounds the work a single request can make the gateway do (without them,
one 10 MB body of 300k tiny messages stalled every other request for 10 s; one of 900k
took the process from 97 MB to 1 GB). The gateway reads them from ``server.limits``
(``gateway/config.py``); the dialect decoders take them as an argument and default to
the values here, so a decoder run outside the gateway judges a body the same way.

Every count limit is a 400 and every size limit a 413, naming the field, the limit's
setting and its value, so an operator can tell a client's mistake from a limit to raise.

``check_encodable`` guards data that is passed through untouched (tool schemas, tool
call arguments, ``format``, ``options``): orjson, which writes every body llmbridge
sends, refuses nesting deeper than 254 levels and integers outside 64 bits, and writes
NaN and the infinities as ``null``. Checked when the request is decoded, such data is a
400 naming its field instead of a 500 when it is encoded for the backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from llmbridge.core.errors import InvalidRequestError, RequestTooLargeError

__all__ = [
    "DEFAULT_LIMITS",
    "ENCODER_MAX_DEPTH",
    "INT_RANGE",
    "RequestLimits",
    "chain_error",
    "check_conversation_counts",
    "check_count",
    "check_encodable",
    "check_message_parts",
    "count_error",
    "depth_error",
    "message_parts",
    "size_error",
]

ENCODER_MAX_DEPTH = 254
"""orjson's nesting limit when it writes JSON (``orjson.dumps``: "Recursion limit reached")."""

INT_RANGE = (-(2**63), 2**64 - 1)
"""The integers orjson writes: signed and unsigned 64 bits."""


@dataclass(frozen=True, slots=True)
class RequestLimits:
    """Bounds on one request. The defaults leave room for the largest real clients:
    Claude Code sends about 100 tools and histories of a few thousand blocks; Codex
    sends big inputs as few, long strings."""

    max_body_bytes: int = 32 * 1024 * 1024
    """Request body size: Anthropic's own limit for the Messages API (413)."""
    max_messages: int = 10_000
    """Messages in one conversation (400)."""
    max_tools: int = 512
    """Tool definitions in one request (400)."""
    max_parts_per_message: int = 1_000
    """Content parts of one message: blocks, images, tool calls (400)."""
    max_json_depth: int = 128
    """Nesting of objects and arrays anywhere in a body (400). JSON Schemas nest a
    few dozen levels at most; the encoder's own ceiling is 254 and the envelope a
    pass-through value is sent in adds a few."""
    max_json_items: int = 500_000
    """Values, keys and containers in one body, counted before it is parsed (400).
    Parsing is one call that holds the interpreter; at about 100 ns an item on a
    loaded 2-core machine this keeps it under 50 ms, and the parsed body's memory
    under about 100 MB."""
    offload_bytes: int = 32 * 1024
    """Bodies larger than this are scanned, parsed and decoded in a worker thread,
    so ``/health`` and other requests keep being answered meanwhile."""
    max_chain_bytes: int = 64 * 1024 * 1024
    """Bytes (JSON) a chain of stored Responses may hold in the database, its every
    stored response counted (400 on ``previous_response_id`` above it). Each stored
    response holds the whole conversation so far (one lookup to continue it, see
    ``gateway/stored_responses.py``), so a chain's footprint grows with the square of its
    turns (six 4 MB turns took 115 MB); this caps it, and with it the row a
    continuation loads into memory (no more than twice ``max_body_bytes``). A
    conversation that fills a 128k-token context (about 0.5 MB) reaches it after some
    250 turns; past it a client sends the whole conversation (``store: false``)."""
    max_chain_turns: int = 1_000
    """Stored responses in one ``previous_response_id`` chain, the first included
    (400 on ``previous_response_id`` for the one after the last)."""


DEFAULT_LIMITS = RequestLimits()


def count_error(path: str, count: int, limit: int, setting: str, noun: str) -> InvalidRequestError:
    """400: ``count`` of something at ``path`` exceeds the ``server.limits`` setting."""
    return InvalidRequestError(
        f"{path}: {count} {noun} exceed the limit of {limit} "
        f"(llmbridge setting server.limits.{setting})",
        param=path,
        code="array_above_max_length",
    )


def size_error(what: str, size: int | None, limit: int, setting: str) -> RequestTooLargeError:
    """413: ``what`` is larger than the ``setting`` allows (``size`` unknown when streamed)."""
    of = f" of {size} bytes" if size is not None else ""
    return RequestTooLargeError(
        f"{what}{of} exceeds the limit of {limit} bytes (llmbridge setting {setting})",
        code="request_too_large",
    )


def chain_error(field: str, size: int, limit: int, setting: str, noun: str) -> InvalidRequestError:
    """400 naming ``field``: continuing the chain of stored responses it names would
    make the chain hold ``size`` ``noun``, over the ``setting``'s ``limit``."""
    return InvalidRequestError(
        f"Invalid '{field}': the chain of stored responses it continues would hold "
        f"{size} {noun}, over the limit of {limit} (llmbridge setting server.limits.{setting}); "
        "send the whole conversation in 'input' instead (with 'store': false), or start "
        "a new chain",
        param=field,
        code="chain_too_long",
    )


def depth_error(path: str, limit: int) -> InvalidRequestError:
    """400: JSON nested deeper than ``limit`` levels, the deep path cut short."""
    steps = path.split(".")
    where = ".".join(steps[:8]) + (".…" if len(steps) > 8 else "") if path else "request body"
    return InvalidRequestError(
        f"{where}: JSON nested deeper than {limit} levels "
        "(llmbridge setting server.limits.max_json_depth)",
        param=".".join(steps[:8]) or None,
    )


def check_count(items: object, limit: int, *, path: str, setting: str, noun: str) -> None:
    """A 400 when ``items`` is a list longer than ``limit`` (anything else is left to
    the type checks that follow)."""
    if isinstance(items, list) and len(items) > limit:
        raise count_error(path, len(items), limit, setting, noun)


def check_conversation_counts(body: dict[str, Any], limits: RequestLimits) -> list[Any]:
    """The ``messages`` and ``tools`` count limits every chat dialect shares; returns
    the messages (empty when absent or not a list) for the dialect's own part count."""
    messages = body.get("messages")
    check_count(
        messages, limits.max_messages, path="messages", setting="max_messages", noun="messages"
    )
    check_count(
        body.get("tools"), limits.max_tools, path="tools", setting="max_tools", noun="tools"
    )
    return messages if isinstance(messages, list) else []


def message_parts(message: object, part_keys: Sequence[str]) -> int:
    """The parts of a message as sent: the length of each list it holds under
    ``part_keys`` (``images`` and ``tool_calls`` in Ollama's messages)."""
    parts = 0
    if isinstance(message, dict):
        for key in part_keys:
            items = message.get(key)
            if isinstance(items, list):
                parts += len(items)
    return parts


def check_message_parts(
    messages: list[Any], limits: RequestLimits, part_keys: Sequence[str], noun: str
) -> None:
    """A 400 naming the first message with more than ``max_parts_per_message`` parts
    (counted by ``message_parts``; ``noun`` says what they are, ``images and tool calls``)."""
    most = limits.max_parts_per_message
    for index, message in enumerate(messages):
        parts = message_parts(message, part_keys)
        if parts > most:
            raise count_error(f"messages.{index}", parts, most, "max_parts_per_message", noun)


def check_encodable(value: Any, path: str, max_depth: int = DEFAULT_LIMITS.max_json_depth) -> None:
    """A 400 naming the first place in ``value`` that the JSON encoder cannot write
    back faithfully: nesting deeper than ``max_depth``, an integer beyond 64 bits, or
    a float that is not finite."""
    _walk(value, path, 0, max_depth)


def _walk(value: Any, path: str, depth: int, max_depth: int) -> None:
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    elif isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidRequestError(
                f"{path}: {value} is not a finite number (JSON numbers must be finite)",
                param=path,
            )
        return
    elif isinstance(value, int) and not isinstance(value, bool):
        if not INT_RANGE[0] <= value <= INT_RANGE[1]:
            raise InvalidRequestError(
                f"{path}: integer out of range; integers must fit in 64 bits "
                f"({INT_RANGE[0]} to {INT_RANGE[1]})",
                param=path,
            )
        return
    else:
        return
    if depth >= max_depth:
        raise depth_error(path, max_depth)
    for key, child in items:
        _walk(child, f"{path}.{key}" if path else str(key), depth + 1, max_depth)
