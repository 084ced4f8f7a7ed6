"""One request's row in the usage ledger, and what makes it storable.

``UsageRecord`` is the ``usage`` table's row (store/tables.py ``UsageRow``).
``storable_record`` cleans what a client could put in one before it is queued, the
same on SQLite and PostgreSQL (one NUL in a model name stopped the
PostgreSQL ledger): NULs and lone surrogates replaced, text cut to its column,
integers clamped to the columns' 32 bits, non-finite floats NULL. ``refused`` tells a
write the database refused for its values (split the batch, set the row aside) from a
database that is unreachable (keep the batch, retry), by exception class and
SQLSTATE, never by wording.
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import operator
from collections.abc import Iterable
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from typing import Any

import orjson
from sqlalchemy import Boolean, Float, Integer, String, Table
from sqlalchemy.exc import DataError, DBAPIError, IntegrityError, StatementError

from llmbridge.core.frozen import faster_frozen_init
from llmbridge.store.tables import FACTS_LENGTH, UsageRow
from llmbridge.store.values import storable_text

__all__ = [
    "COLUMNS",
    "CREATED_AT",
    "ROW",
    "UsageRecord",
    "facts_of",
    "refused",
    "storable_record",
    "with_fact",
]

USAGE: Table = UsageRow.__table__  # type: ignore[assignment]


def _now() -> datetime:
    return datetime.now(UTC)


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class UsageRecord:
    """One request, as the ``usage`` table keeps it (store/tables.py ``UsageRow``)."""

    request_id: str
    """Unique: the second write of the same request is ignored."""
    model: str
    """The public model name the caller asked for."""
    status: int
    """The HTTP status; 499 when the client left; an in-stream error's own status."""
    created_at: datetime = field(default_factory=_now)
    key_id: str | None = None
    """``api_keys.id`` of a database key; ``None`` for a static key or no auth."""
    key_name: str | None = None
    backend: str | None = None
    """The serving backend's kind (``ollama``, ``openai``...)."""
    deployment: str | None = None
    """The configured backend that served it, after fallbacks and balancing."""
    endpoint: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    """Reasoning tokens included, as in the core's ``Usage``."""
    reasoning_tokens: int | None = None
    cached_tokens: int | None = None
    """Prompt tokens read from the backend's cache."""
    cost_usd: float | None = None
    """From the price table; ``None`` when the model has no price."""
    latency_ms: float | None = None
    ttft_ms: float | None = None
    streamed: bool | None = None
    replica: str | None = None
    """``hostname:pid`` of the process that served it."""
    session_id: str | None = None
    """The client's session (serving/deployments.py ``client_session``), cut to
    ``SESSION_ID_LENGTH``; ``None`` when the request named none."""
    # The request log (migration 0008): what the operator console shows.
    dialect: str | None = None
    """The API the client spoke (``openai``, ``responses``, ``completions``,
    ``anthropic``, ``gemini``, ``ollama``, ``agent``)."""
    served_model: str | None = None
    """The model name the backend was asked for, after aliases, routes and fallbacks."""
    retries: int | None = None
    """Tries of the same target again before the first event; ``None``: not known
    (no reply came, or the route does not serve chats)."""
    fallbacks: int | None = None
    """Fallback targets tried before the first event (``None`` as for ``retries``)."""
    facts: str | None = None
    """The reply's ``x-llmbridge-*`` headers as a JSON object (what the gateway
    changed); ``None`` when it set none."""
    trace_id: str | None = None
    """The request's OpenTelemetry trace id (32 hex digits) when tracing is on."""
    overhead_ms: float | None = None
    """Time spent in the gateway, the backend excluded (``x-llmbridge-overhead-ms``)."""
    finish_reason: str | None = None
    """The reply's stop reason (``end_turn``, ``max_tokens``, ``tool_use``...)."""
    error: str | None = None
    """A failed request's message, cut to its column (store/tables.py ``ERROR_LENGTH``)."""


COLUMNS = tuple(f.name for f in fields(UsageRecord))
CREATED_AT = COLUMNS.index("created_at")
"""The position of ``created_at`` in ``COLUMNS``."""
ROW = operator.attrgetter(*COLUMNS)
"""A record's values in column order, in one C call."""

INT_MIN, INT_MAX = -(2**31), 2**31 - 1
"""The ``usage`` table's integer columns are 32 bits (PostgreSQL ``integer``)."""


def _column_kinds() -> tuple[
    tuple[tuple[int, str, int, bool], ...], tuple[int, ...], tuple[int, ...], tuple[int, ...]
]:
    """Per kind, the record fields' positions in ``COLUMNS``: text with its column's
    length and whether it may be NULL, integers, floats, booleans."""
    text, ints, floats, bools = [], [], [], []
    for i, name in enumerate(COLUMNS):
        column = USAGE.c[name]
        kind = column.type
        if isinstance(kind, String):
            text.append((i, name, kind.length or 10_000_000, bool(column.nullable)))
        elif isinstance(kind, Integer):
            ints.append(i)
        elif isinstance(kind, Float):
            floats.append(i)
        elif isinstance(kind, Boolean):
            bools.append(i)
    return tuple(text), tuple(ints), tuple(floats), tuple(bools)


_TEXT, _INTS, _FLOATS, _BOOLS = _column_kinds()


def _storable_int(value: object) -> int | None:
    if isinstance(value, float):
        return None if not math.isfinite(value) else max(INT_MIN, min(INT_MAX, int(value)))
    try:
        number: int = int(value)  # type: ignore[call-overload]
    except (TypeError, ValueError, OverflowError):
        return None
    return max(INT_MIN, min(INT_MAX, number))


def _storable_float(value: object) -> float | None:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError, OverflowError):
        return None
    return number if math.isfinite(number) else None


_PER_REQUEST = ("request_id", "session_id", "facts", "trace_id", "error")
"""Text fields that change from request to request, or session to session: checked
each time, never remembered (each would be a new combination in ``_clean_texts``)."""
_REPEATED = tuple(name for _, name, _, _ in _TEXT if name not in _PER_REQUEST)
"""The text fields a gateway repeats from request to request (model, key, backend,
deployment, endpoint, replica): checked once per distinct combination."""
_REPEATED_TEXT = operator.attrgetter(*_REPEATED)
_REPEATED_LIMITS = tuple(
    (length, nullable) for _, name, length, nullable in _TEXT if name in _REPEATED
)
_REQUEST_ID_LENGTH = next(length for _, name, length, _ in _TEXT if name == "request_id")
_OTHERS_PER_REQUEST = tuple(
    (operator.attrgetter(name), length)
    for _, name, length, _ in _TEXT
    if name in _PER_REQUEST and name != "request_id"
)
"""The per-request text fields but the request id, with their columns' lengths."""
_NUMBERS = operator.attrgetter(*(COLUMNS[i] for i in _INTS))
_FLOATS_OF = operator.attrgetter(*(COLUMNS[i] for i in _FLOATS))
_STREAMED = next(COLUMNS[i] for i in _BOOLS)
_clean_texts: set[tuple[str | None, ...]] = set()
"""Combinations of ``_REPEATED`` values seen clean, bounded by ``_CLEAN_TEXTS_MAX``."""
_CLEAN_TEXTS_MAX = 4096


def _clean_text(value: object, length: int) -> bool:
    """Whether a text column takes ``value`` as it is."""
    if value is None:
        return True
    if type(value) is not str or len(value) > length:
        return False
    if value.isascii():
        return "\x00" not in value
    return storable_text(value) is value


def storable_record(record: UsageRecord) -> UsageRecord:
    """``record`` with every value one the ``usage`` table takes, on SQLite and
    PostgreSQL alike (module docstring); ``record`` itself when it already was.

    The common case is a clean record, checked in about a microsecond on the request
    path: the repeated text fields as one set lookup once seen, the request and session
    ids, then a type and range check per number."""
    repeated = _REPEATED_TEXT(record)
    if repeated not in _clean_texts:
        for value, (length, nullable) in zip(repeated, _REPEATED_LIMITS, strict=True):
            if (value is None and not nullable) or not _clean_text(value, length):
                return _storable_copy(record)
        if len(_clean_texts) >= _CLEAN_TEXTS_MAX:
            _clean_texts.clear()
        _clean_texts.add(repeated)
    request_id = record.request_id
    if not (
        type(request_id) is str
        and len(request_id) <= _REQUEST_ID_LENGTH
        and request_id.isascii()
        and "\x00" not in request_id
    ):
        return _storable_copy(record)
    for value_of, length in _OTHERS_PER_REQUEST:
        if not _clean_text(value_of(record), length):
            return _storable_copy(record)
    for number in _NUMBERS(record):
        if number is not None and (type(number) is not int or number > INT_MAX or number < INT_MIN):
            return _storable_copy(record)
    for real in _FLOATS_OF(record):
        # x - x is 0.0 for every finite float, NaN for NaN and the infinities.
        if real is not None and (type(real) is not float or real - real != 0.0):
            return _storable_copy(record)
    streamed = getattr(record, _STREAMED)
    if (streamed is not None and type(streamed) is not bool) or not isinstance(
        record.created_at, datetime
    ):
        return _storable_copy(record)
    return record


def _storable_copy(record: UsageRecord) -> UsageRecord:
    """``record`` with each value the ``usage`` table cannot take replaced."""
    row = ROW(record)
    fixed: dict[str, Any] | None = None
    for i, name, length, nullable in _TEXT:
        value = row[i]
        if type(value) is str and len(value) <= length and value.isascii() and "\x00" not in value:
            continue
        if value is None:
            if nullable:
                continue
            value = ""
        clean = storable_text(value if type(value) is str else str(value))[:length]
        if clean is not value:
            fixed = fixed or {}
            fixed[name] = clean
    for i in _INTS:
        value = row[i]
        if value is None or (type(value) is int and INT_MIN <= value <= INT_MAX):
            continue
        number = _storable_int(value)
        if number is None and not USAGE.c[COLUMNS[i]].nullable:
            number = 0
        fixed = fixed or {}
        fixed[COLUMNS[i]] = number
    for i in _FLOATS:
        value = row[i]
        if value is None or (type(value) is float and math.isfinite(value)):
            continue
        fixed = fixed or {}
        fixed[COLUMNS[i]] = _storable_float(value)
    for i in _BOOLS:
        value = row[i]
        if value is None or type(value) is bool:
            continue
        fixed = fixed or {}
        fixed[COLUMNS[i]] = bool(value)
    if not isinstance(row[CREATED_AT], datetime):
        fixed = fixed or {}
        fixed["created_at"] = _now()
    return record if fixed is None else dataclasses.replace(record, **fixed)


_FACT_PREFIX = b"x-llmbridge-"
_NOT_FACTS = frozenset({b"x-llmbridge-overhead-ms"})
"""Headers with a column of their own (``overhead_ms``), not repeated in ``facts``."""


def facts_of(headers: Iterable[tuple[bytes, bytes]]) -> str | None:
    """A reply's ``x-llmbridge-*`` headers (what the gateway changed: tools emulated,
    thinking dropped, parameters converted, a fallback...) as the ``facts`` column's
    JSON object; ``None`` when there is none. Headers are dropped from the end until
    the object fits its column, so what is stored is always JSON."""
    facts = {
        name.decode("latin-1"): value.decode("latin-1")
        for name, value in headers
        if name.startswith(_FACT_PREFIX) and name not in _NOT_FACTS
    }
    while facts:
        text = orjson.dumps(facts).decode()
        if len(text) <= FACTS_LENGTH:
            return text
        facts.popitem()
    return None


def with_fact(facts: str | None, name: str, value: str) -> str:
    """``facts`` (the ``facts`` column's JSON object, or ``None``) with ``name: value``
    added first: what the gateway did with the request itself (its kept bodies
    dropped: accounts/kept_bodies.py), beside the reply's headers, which are dropped from
    the end until the object fits its column."""
    found = orjson.loads(facts) if facts else {}
    merged = {name: value, **{k: v for k, v in found.items() if k != name}}
    text = orjson.dumps(merged).decode()
    while len(text) > FACTS_LENGTH and len(merged) > 1:
        merged.popitem()
        text = orjson.dumps(merged).decode()
    return text


_REFUSED_SQLSTATE = ("22", "23")
"""PostgreSQL's SQLSTATE classes "data exception" and "integrity constraint
violation": the values, not the database."""


def refused(exc: BaseException) -> bool:
    """Whether a failed write was the database refusing the batch's values (split it,
    set the refused rows aside) rather than the database being unreachable (keep the
    batch, retry later). Told apart by exception class and SQLSTATE, never by a
    message's wording; anything unknown counts as unreachable, so no row is set aside
    for a failure that was not its own."""
    chain: list[BaseException] = []
    todo: list[BaseException | None] = [exc]
    while todo:
        error = todo.pop()
        if error is None or any(error is seen for seen in chain):
            continue
        chain.append(error)
        if isinstance(error, StatementError):
            todo.append(error.orig)
        todo += [error.__cause__, error.__context__]
    for error in chain:
        # A connection lost or refused, a timeout: the database, not the row.
        if isinstance(error, OSError | asyncio.TimeoutError):
            return False
        if isinstance(error, DBAPIError) and error.connection_invalidated:
            return False
    for error in chain:
        if isinstance(error, DataError | IntegrityError):
            return True
        if str(getattr(error, "sqlstate", "") or "")[:2] in _REFUSED_SQLSTATE:
            return True
        # A value the driver cannot send: sqlite3's OverflowError (an int over 64
        # bits), a str it cannot encode (UnicodeEncodeError), asyncpg's own DataError
        # (a ValueError: an int over 32 bits for an integer column).
        if isinstance(error, ValueError | TypeError | ArithmeticError):
            return True
    return False
