"""Reading request bodies within the configured limits, as JSON, off the event loop
when they are large.

The body size is checked twice: against ``Content-Length`` before reading anything,
and against the bytes actually received (chunked uploads carry no length). Then the
raw bytes are scanned (``scan_json``) before anything is parsed: nesting depth and the
number of JSON items are bounded there, because parsing (``orjson.loads``) is one call
that holds the interpreter for as long as it takes, ~100 ns per item, and its result's
memory grows with the items too (900k tiny messages took 1 GB).

Bodies over ``offload_bytes`` are scanned, parsed and decoded in a worker thread
(``asyncio.to_thread``): the scan and the decoders are Python code, which lets the
event loop have the interpreter every few milliseconds, and the parse is bounded by
the item limit and, above 256 KiB, done a slice at a time (``json_slices``), so
``/health`` and other requests keep being answered while one large request is read
(``bench/health_under_load.py``).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from starlette.requests import ClientDisconnect, Request

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_limits import (
    DEFAULT_LIMITS,
    RequestLimits,
    check_encodable,
    depth_error,
    size_error,
)
from llmbridge.web.json_slices import loads_in_slices, string_end

__all__ = ["parse_json", "read_body", "read_chat", "read_json", "scan_json"]

T = TypeVar("T")

_BRACKETS = b"[]{}"
_NOT_BRACKETS = bytes(b for b in range(256) if b not in _BRACKETS)
_OPENERS = frozenset(b"[{")
_FALLBACK_PARSE_BYTES = 1024 * 1024
"""Bodies up to this size that orjson refuses for an infinite number are parsed again
with the standard library (which reads ``1e999`` as infinity) to name the field."""


_SLICED_PARSE_BYTES = 256 * 1024
"""Bodies larger than this are parsed a member and a chunk of array elements at a
time (``json_slices``): one ``orjson.loads`` of 32 MB, or of 500k items, holds the
interpreter 54-64 ms even in a worker thread; a slice holds it well under 1 ms."""


async def read_body(request: Request, limit: int) -> bytes | bytearray:
    """The raw body, or a 413 naming ``server.max_body_bytes``.

    A body that arrives in one piece is that piece. A longer one is gathered into a
    ``bytearray`` as it arrives, not joined at the end: joining 32 MB is one call that
    held the event loop 20-100 ms (a fresh allocation, then a copy), where each append
    takes microseconds (``bench/health_under_load.py`` measured it)."""
    declared = request.headers.get("content-length")
    # isascii(): str.isdigit() is true for superscript digits, which int() refuses.
    if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
        raise size_error("request body", int(declared), limit, "server.max_body_bytes")
    first = b""
    gathered: bytearray | None = None
    size = 0
    # ``receive`` read directly, not through ``Request.stream()``: an async generator
    # per request (and the loop's hook registering it) for a body that almost always
    # arrives in one message.
    receive = request.receive
    while True:
        message = await receive()
        if message["type"] != "http.request":  # the client left before its body was in
            raise ClientDisconnect()
        chunk = message.get("body", b"")
        more = message.get("more_body", False)
        if not chunk:
            if more:
                continue
            break
        size += len(chunk)
        if size > limit:
            raise size_error("request body", None, limit, "server.max_body_bytes")
        if gathered is not None:
            gathered += chunk
        elif first:
            gathered = bytearray(first)
            gathered += chunk
        else:
            first = chunk
        if not more:
            break
    return first if gathered is None else gathered


async def read_json(request: Request, limits: RequestLimits) -> Any:
    """The request body decoded as JSON, or a 400/413 ``LLMBridgeError``."""
    return await read_chat(request, limits, _as_parsed)


def _as_parsed(body: Any, limits: RequestLimits) -> Any:
    return body


async def read_chat(
    request: Request, limits: RequestLimits, decode: Callable[[Any, RequestLimits], T]
) -> T:
    """The request body parsed and passed through ``decode`` (a dialect's
    ``decode_*_request``), in a worker thread when the body is large."""
    raw = await read_body(request, limits.max_body_bytes)
    if len(raw) > limits.offload_bytes:
        return await asyncio.to_thread(_parse_and_decode, raw, limits, decode)
    return _parse_and_decode(raw, limits, decode)


async def read_relayable_chat(
    request: Request,
    limits: RequestLimits,
    decode: Callable[[Any, RequestLimits], ChatRequest],
    dialect: str,
) -> ChatRequest:
    """``read_chat``, the body kept beside the decoded request for the pass-through
    path (core/relay.py ``RelayBody``; serving drops it where it does not apply)."""
    raw = await read_body(request, limits.max_body_bytes)
    if len(raw) > limits.offload_bytes:
        return await asyncio.to_thread(_relayable, raw, limits, decode, dialect)
    return _relayable(raw, limits, decode, dialect)


def _relayable(
    raw: bytes | bytearray,
    limits: RequestLimits,
    decode: Callable[[Any, RequestLimits], ChatRequest],
    dialect: str,
) -> ChatRequest:
    body = parse_json(raw, limits)
    chat = decode(body, limits)
    if not isinstance(body, dict):
        return chat  # decode refused anything else already
    # Set on the request decode just made, which nothing else holds yet: a
    # ``dataclasses.replace`` of its sixteen fields was 2% of a relayed request's CPU.
    object.__setattr__(chat, "relay", RelayBody(dialect, body, bytes(raw)))
    return chat


def _parse_and_decode(
    raw: bytes | bytearray, limits: RequestLimits, decode: Callable[[Any, RequestLimits], T]
) -> T:
    return decode(parse_json(raw, limits), limits)


def parse_json(raw: bytes | bytearray, limits: RequestLimits = DEFAULT_LIMITS) -> Any:
    """``raw`` parsed, after ``scan_json``; a 400 for what is not JSON, naming the
    field where a number is infinite (``1e999``)."""
    if not raw or raw.isspace():  # not raw.strip(), which copies a bytearray whole
        raise InvalidRequestError("request body is empty; expected a JSON object")
    scan_json(raw, limits)
    try:
        if len(raw) > _SLICED_PARSE_BYTES:
            return loads_in_slices(raw)
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        if "infinity" in str(exc) and len(raw) <= _FALLBACK_PARSE_BYTES:
            _name_the_infinite_number(raw, limits)
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from exc


def _name_the_infinite_number(raw: bytes | bytearray, limits: RequestLimits) -> None:
    """Raise the 400 that names where ``raw`` holds a number too large for a double."""
    try:
        # The standard library reads 1e999 as inf and 10**400 as an int: both are
        # then found, with their path, by the same check pass-through data gets.
        value = json.loads(raw)
    except (ValueError, RecursionError):
        return
    check_encodable(value, "", limits.max_json_depth)


def scan_json(raw: bytes | bytearray, limits: RequestLimits = DEFAULT_LIMITS) -> None:
    """Check the nesting depth and the number of items of the JSON text ``raw``
    before it is parsed: a 400 naming ``max_json_depth`` or ``max_json_items``.

    Items are counted as the separators outside strings that introduce one (``,``
    ``:`` ``[`` ``{``) plus the root value: every value, key and container. Only the
    text between strings is looked at, one ``bytes.find`` per string, so the cost grows
    with the number of strings, not with their length. Malformed text is left for the
    parser to report.
    """
    max_depth, max_items = limits.max_json_depth, limits.max_json_items
    if len(raw) <= max_items and raw.count(b"[") + raw.count(b"{") <= max_depth:
        return  # small and shallow: neither limit can be reached (the common case)
    depth = 0
    items = 1
    pos = 0
    end = len(raw)
    find = raw.find
    key = ""  # the top-level key being read, to name the field a depth error is in
    candidate: tuple[int, int] | None = None
    while pos < end:
        quote = find(b'"', pos)
        stop = end if quote < 0 else quote
        if stop > pos:
            between = raw[pos:stop]
            if candidate is not None and between.lstrip().startswith(b":"):
                key = raw[candidate[0] : candidate[1]].decode("utf-8", "replace")
            brackets = between.translate(None, _NOT_BRACKETS)
            items += between.count(b",") + between.count(b":")
            for byte in brackets:
                if byte in _OPENERS:
                    items += 1
                    depth += 1
                    if depth > max_depth:
                        raise _deep(raw, key, limits)
                else:
                    depth -= 1
            if items > max_items:
                raise _items_error(max_items)
        if quote < 0:
            return
        pos = string_end(raw, quote + 1)
        if pos < 0:
            return  # an unterminated string: the parser says so
        candidate = (quote + 1, pos - 1) if depth == 1 else None


def _deep(raw: bytes | bytearray, key: str, limits: RequestLimits) -> InvalidRequestError:
    """The depth error, naming the deep field's whole path where the body is small
    enough to parse for it (orjson reads up to 1024 levels), else its top-level key."""
    if len(raw) <= _FALLBACK_PARSE_BYTES:
        try:
            check_encodable(orjson.loads(raw), "", limits.max_json_depth)
        except InvalidRequestError as exc:
            return exc
        except orjson.JSONDecodeError:
            pass
    return depth_error(key, limits.max_json_depth)


def _items_error(limit: int) -> InvalidRequestError:
    return InvalidRequestError(
        f"request body holds more than {limit} JSON values "
        "(llmbridge setting server.limits.max_json_items)",
        code="array_above_max_length",
    )
