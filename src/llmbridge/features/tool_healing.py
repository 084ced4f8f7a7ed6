"""Tool-call healing: turn whatever a model sent as a tool call's arguments into an object.

This module owns the repair of tool-call arguments for every dialect's output, and
their validation against the tool's JSON Schema. Small models send arguments as an
object, as a JSON string, as a JSON string encoded twice, doubly escaped
(``{\\"command\\":\\"ls\\"}``, seed 001's feature 2), or as almost-JSON: trailing
garbage, single quotes, unquoted keys, a missing closing brace. ``core.tool_arguments``
already parses the first three kinds while a part is built; this module goes further
with ``json_repair`` and, what cannot be repaired, keeps as ``{"raw": "<original>"}``
(the seed's fallback) so no call is ever dropped. Every repair is logged at info,
every fallback and failed validation at warning, on ``llmbridge.tool_healing``.

``heal_tool_calls`` applies it to an event stream: it rewrites the ``PartEnd`` of
each tool call, the event every encoder takes a call's arguments from, so streamed
and accumulated replies in every dialect carry the same healed arguments.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import AsyncGenerator, Sequence
from contextlib import aclosing
from dataclasses import dataclass
from typing import Any

import json_repair
import orjson
import referencing
from jsonschema import exceptions as schema_exceptions
from jsonschema.protocols import Validator
from jsonschema.validators import Draft202012Validator, validator_for

from llmbridge.core.events import PartEnd, StreamEvent
from llmbridge.core.messages import ToolCallPart, ToolDefinition
from llmbridge.core.stream import EventStream

__all__ = ["HealResult", "heal_arguments", "heal_tool_calls"]

log = logging.getLogger("llmbridge.tool_healing")

_LOG_CHARS = 200
"""How much of a payload or message a log line shows."""
_MAX_DECODES = 4
"""How many layers of string encoding or escaping are peeled off at most."""


@dataclass(frozen=True, slots=True)
class HealResult:
    """What became of one call's arguments."""

    arguments: dict[str, Any]
    """The healed object; ``{"raw": <original>}`` when nothing could be made of it."""
    repaired: bool
    """The arguments had to be repaired (decoded again, unescaped or fixed) to parse."""
    problem: str | None
    """Why the arguments are ``raw``, or how they fail the tool's schema; else ``None``."""


def heal_arguments(
    raw: str | dict[str, Any] | None,
    schema: dict[str, Any] | None,
    *,
    tool_name: str = "",
) -> HealResult:
    """Heal one call's arguments and validate them against the tool's ``schema``.

    In order: an object is taken as is; ``None`` or blank text is ``{}``; text is
    parsed as JSON, a JSON string or doubly-escaped text is decoded again (at most
    four layers); then ``json_repair`` fixes almost-JSON. What still is not an object
    becomes ``{"raw": raw}``. Arguments that fail ``schema`` are kept (the client may
    still handle them) and the failure is reported in ``problem`` and logged.
    ``tool_name`` is only for the logs.
    """
    if isinstance(raw, dict):
        arguments, repaired, problem = raw, False, None
    else:
        arguments, repaired, problem = _heal_text(raw, tool_name)
        if problem is not None:
            return HealResult(arguments, repaired, problem)
    if schema is not None:
        problem = _validate(arguments, schema, tool_name)
    return HealResult(arguments, repaired, problem)


async def heal_tool_calls(
    events: EventStream, tools: Sequence[ToolDefinition]
) -> AsyncGenerator[StreamEvent, None]:
    """Pass ``events`` through, healing the arguments of each finished tool call.

    Each ``PartEnd`` of a ``ToolCallPart`` is replaced by one whose ``arguments`` are
    healed (from ``raw_arguments`` when the core could not parse them) and validated
    against the matching tool's ``input_schema``; its ``raw_arguments`` is then
    ``None``, so every encoder sends the healed object. Every other event is yielded
    as the same object, after one ``isinstance`` check. Closing this stream closes
    ``events`` (so a client disconnect still reaches the backend).
    """
    schemas: dict[str, dict[str, Any]] | None = None
    async with aclosing(events):
        async for event in events:
            if isinstance(event, PartEnd):
                part = event.part
                if isinstance(part, ToolCallPart):
                    if schemas is None:
                        schemas = {tool.name: tool.input_schema for tool in tools}
                    healed = _heal_part(part, schemas, bool(tools))
                    if healed is not part:
                        event = PartEnd(event.index, healed)
            yield event


def _heal_part(
    part: ToolCallPart, schemas: dict[str, dict[str, Any]], tools_given: bool
) -> ToolCallPart:
    schema = schemas.get(part.name)
    if schema is None and tools_given:
        log.warning("tool call to %r, which is not among the request's tools", part.name)
    raw = part.arguments if part.raw_arguments is None else part.raw_arguments
    try:
        healed = heal_arguments(raw, schema, tool_name=part.name)
    except Exception:  # healing must never cost the client its reply
        log.exception("tool %r: healing its arguments failed; sent as they came", part.name)
        return part
    if healed.arguments is part.arguments and part.raw_arguments is None:
        return part  # an object already: validated, nothing to change
    return ToolCallPart(id=part.id, name=part.name, arguments=healed.arguments)


# -- text -> object -------------------------------------------------------------------


def _heal_text(raw: str | None, tool_name: str) -> tuple[dict[str, Any], bool, str | None]:
    """``(arguments, repaired, problem)`` for arguments sent as text."""
    if raw is None or not raw.strip():
        return {}, False, None
    text = raw
    for layers in range(_MAX_DECODES):
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            # Doubly escaped: the text of a JSON string without its quotes.
            value = _unescape(text)
            if value is None:
                break
        if isinstance(value, dict):
            if layers:
                _log_repair(tool_name, "decoded again", raw)
            return value, layers > 0, None
        if value is None:  # JSON null: a call without arguments
            _log_repair(tool_name, "null as no arguments", raw)
            return {}, True, None
        if not isinstance(value, str):
            break  # a number, a list...: json_repair below may still find an object
        text = value
    repaired = _repair(text)
    if repaired is not None:
        _log_repair(tool_name, "fixed almost-JSON", raw)
        return repaired, True, None
    problem = "the arguments are not a JSON object and could not be repaired into one"
    log.warning("tool %r: %s; kept as raw: %s", tool_name, problem, _clip(raw))
    return {"raw": raw}, False, problem


def _unescape(text: str) -> str | None:
    """``text`` read as the inside of a JSON string literal, if it changes anything."""
    if "\\" not in text:
        return None
    try:
        value = orjson.loads(b'"' + text.encode() + b'"')
    except (orjson.JSONDecodeError, UnicodeEncodeError):  # e.g. a lone surrogate
        return None
    return value if isinstance(value, str) and value != text else None


def _repair(text: str) -> dict[str, Any] | None:
    """``json_repair``'s object for ``text``, when it plausibly was one."""
    # json_repair makes something out of anything (prose becomes ""), so only text
    # with a brace is tried, and only an object that recovers something is taken.
    if "{" not in text:
        return None
    try:
        value = json_repair.loads(text)
    except Exception:  # noqa: BLE001 - a repair library's failure means "not repairable"
        return None
    # Several objects in a row (the first is the call, the rest trailing garbage), or
    # the object wrapped in a one-element array.
    if (
        isinstance(value, list)
        and value
        and isinstance(value[0], dict)
        and (len(value) == 1 or text.lstrip().startswith("{"))
    ):
        value = value[0]
    if not isinstance(value, dict):
        return None
    if not value and any(c.isalnum() for c in text):
        return None  # "use {} here": nothing recovered, keep the original
    return value


def _log_repair(tool_name: str, how: str, raw: str) -> None:
    log.info("tool %r: repaired arguments (%s): %s", tool_name, how, _clip(raw))


def _clip(text: str) -> str:
    if len(text) <= _LOG_CHARS:
        return repr(text)
    return f"{text[:_LOG_CHARS]!r}... ({len(text)} characters)"


# -- validation -------------------------------------------------------------------------


def _validate(arguments: dict[str, Any], schema: dict[str, Any], tool_name: str) -> str | None:
    """How ``arguments`` fail ``schema``, or ``None`` (also when the schema is unusable)."""
    validator = _validator(schema, tool_name)
    if validator is None:
        return None
    try:
        error = schema_exceptions.best_match(validator.iter_errors(arguments))
    except Exception as exc:  # noqa: BLE001 - e.g. an unresolvable $ref: skip validation
        log.warning("tool %r: schema validation failed to run: %s", tool_name, _clip(str(exc)))
        return None
    if error is None:
        return None
    where = error.json_path if error.absolute_path else "arguments"
    problem = f"{where}: {error.message}"
    log.warning("tool %r: arguments do not match its schema: %s", tool_name, _clip(problem))
    return problem


def _validator(schema: dict[str, Any], tool_name: str) -> Validator | None:
    try:
        key = orjson.dumps(schema, option=orjson.OPT_SORT_KEYS)
    except TypeError:
        return _build_validator(schema, tool_name)
    return _cached_validator(key, tool_name)


@functools.lru_cache(maxsize=256)
def _cached_validator(schema_json: bytes, tool_name: str) -> Validator | None:
    # Clients send the same tools every turn; checking a schema costs far more than
    # serializing it, so checked validators are kept by the schema's JSON.
    return _build_validator(orjson.loads(schema_json), tool_name)


def _build_validator(schema: Any, tool_name: str) -> Validator | None:
    if not isinstance(schema, dict):
        log.warning("tool %r: its input schema is not an object; not validated", tool_name)
        return None
    try:
        cls = validator_for(schema, default=Draft202012Validator)
        cls.check_schema(schema)
        # An empty registry: jsonschema's default one fetches remote ``$ref`` URLs,
        # which would let any client make the gateway send requests.
        return cls(schema, registry=referencing.Registry())
    except Exception as exc:  # noqa: BLE001 - a broken schema must not break the reply
        log.warning(
            "tool %r: its input schema is invalid; not validated: %s", tool_name, _clip(str(exc))
        )
        return None
