"""Parsing a large JSON body in slices, so no single parse call holds the interpreter
for long.

``orjson.loads`` is one call into compiled code that keeps the GIL until it returns:
54-64 ms for a 32 MB chat body or a body of 500k items on this project's 2-core
machine, during which the event loop cannot answer ``/health`` even though the parse
runs in a worker thread. A chat body is one object whose weight sits in a
few arrays (``messages``, ``tools``, ``contents``, ``input``), so it is parsed here
member by member, and the elements of a large array in chunks of about
``CHUNK_BYTES``; between two calls the interpreter can switch to the event loop.

The layout (where each member's key and value are, and where the elements of large
array values split) is found the way ``bodies.scan_json`` counts items: one
``bytes.find`` per string, and a regular expression over the text between strings
only, so the cost grows with the number of strings, not their length.

The result is exactly ``orjson.loads(raw)``: every slice is parsed by orjson itself,
and the skeleton between the slices is checked here. Anything unexpected (a root that
is not an object, text outside it, a misplaced ``:`` or ``,``, a slice orjson
refuses) ends the slicing, and the whole body is parsed in one call, which then
reports the error in orjson's words or returns the value.
"""

from __future__ import annotations

import re
from typing import Any

import orjson

__all__ = ["CHUNK_BYTES", "loads_in_slices", "string_end"]

CHUNK_BYTES = 64 * 1024
"""Array elements are parsed together up to about this many bytes (well under a
millisecond a call); a larger array value is sliced, a smaller one parsed whole."""

_STRUCTURE = re.compile(rb"[\[\]{},:]")
_WHITESPACE = re.compile(rb"[ \t\r\n]*")
_OPEN_OBJECT, _OPEN_ARRAY = ord("{"), ord("[")
_CLOSE_OBJECT, _CLOSE_ARRAY = ord("}"), ord("]")
_COLON, _COMMA = ord(":"), ord(",")
_BACKSLASH = 0x5C

Span = tuple[int, int]


class _Irregular(Exception):
    """The layout is not the simple one slicing handles: parse the body whole."""


class _Member:
    __slots__ = ("array_end", "elements", "key", "value")

    def __init__(self, key: Span) -> None:
        self.key = key
        self.value: Span = (-1, -1)
        self.elements: list[Span] | None = None
        """Spans of the elements when the value is an array (``None`` otherwise)."""
        self.array_end = -1
        """Where that array's ``]`` is: only whitespace may follow it in the value."""


def loads_in_slices(raw: bytes | bytearray) -> Any:
    """``orjson.loads(raw)``, parsed a slice at a time when ``raw`` is an object."""
    try:
        members = _layout(raw)
        return {orjson.loads(raw[k0:k1]): _value(raw, m) for m in members for k0, k1 in (m.key,)}
    except (_Irregular, orjson.JSONDecodeError):
        return orjson.loads(raw)


def _value(raw: bytes | bytearray, member: _Member) -> Any:
    start, end = member.value
    elements = member.elements
    if elements is None or end - start <= CHUNK_BYTES:
        return orjson.loads(raw[start:end])
    if not _blank(raw, member.array_end + 1, end):
        raise _Irregular  # "[1] 2": the whole parse names the error
    if len(elements) == 1 and _blank(raw, *elements[0]):
        return []  # "[ ]": one empty span between the brackets
    values: list[Any] = []
    first = 0
    while first < len(elements):
        last = first
        # Extend the chunk while it stays within CHUNK_BYTES (always at least one).
        while (
            last + 1 < len(elements) and elements[last + 1][1] - elements[first][0] <= CHUNK_BYTES
        ):
            last += 1
        if first == last and _blank(raw, *elements[first]):
            raise _Irregular  # "[1,,2]" or "[1,]": alone, a missing element reads as "[]"
        chunk = raw[elements[first][0] : elements[last][1]]
        values.extend(orjson.loads(b"[" + chunk + b"]"))
        first = last + 1
    return values


def _layout(raw: bytes | bytearray) -> list[_Member]:
    """The members of the root object, with the element spans of array values."""
    match = _WHITESPACE.match(raw)
    begin = match.end() if match else 0
    if begin >= len(raw) or raw[begin] != _OPEN_OBJECT:
        raise _Irregular
    scanner = _Scanner(raw, begin)
    pos, end = begin, len(raw)
    find = raw.find
    while pos < end:
        quote = find(b'"', pos)
        for found in _STRUCTURE.finditer(raw, pos, end if quote < 0 else quote):
            if scanner.structure(found.start()):
                _expect_only_whitespace(raw, found.start() + 1)
                return scanner.members
        if quote < 0:
            break
        pos = string_end(raw, quote + 1)
        if pos < 0:
            raise _Irregular  # unterminated: the whole parse reports it
        scanner.string((quote, pos))
    raise _Irregular  # the root object never closed


class _Scanner:
    """The skeleton of the root object, fed its strings and structural bytes in order."""

    __slots__ = ("after", "begin", "current", "depth", "element_start", "members", "raw")

    def __init__(self, raw: bytes | bytearray, begin: int) -> None:
        self.raw, self.begin = raw, begin
        self.after = begin + 1
        """Just after the root's last ``{`` or ``,``: only whitespace until the next key."""
        self.members: list[_Member] = []
        self.current: _Member | None = None
        self.depth = 0
        self.element_start = -1

    def string(self, span: Span) -> None:
        current = self.current
        if self.depth == 1 and (current is None or current.value[0] < 0):
            if current is not None or not _blank(self.raw, self.after, span[0]):
                raise _Irregular  # two keys in a row, or text before a key
            self.current = _Member(span)

    def structure(self, at: int) -> bool:
        """Take the structural byte at ``at``; true when it closed the root object."""
        byte = self.raw[at]
        if byte in (_OPEN_OBJECT, _OPEN_ARRAY):
            self._open(at, byte)
        elif byte in (_CLOSE_OBJECT, _CLOSE_ARRAY):
            return self._close(at, byte)
        elif self.depth == 1:
            self._member_separator(at, byte)
        elif byte == _COMMA and self.depth == 2:
            current = self.current
            if current is not None and current.elements is not None and current.array_end < 0:
                current.elements.append((self.element_start, at))
                self.element_start = at + 1
        return False

    def _open(self, at: int, byte: int) -> None:
        self.depth += 1
        if self.depth == 1 and at != self.begin:
            raise _Irregular  # a second root value
        current = self.current
        if self.depth == 2 and current is not None:
            if current.elements is not None or current.value[0] < 0:
                raise _Irregular  # a second container in one value, or no ":"
            if byte == _OPEN_ARRAY and _blank(self.raw, current.value[0], at):
                current.elements = []
                self.element_start = at + 1

    def _close(self, at: int, byte: int) -> bool:
        # The two closers no slice contains, so orjson never sees them: they must match.
        current = self.current
        if self.depth == 1 and byte != _CLOSE_OBJECT:
            raise _Irregular  # "{]"
        if self.depth == 2 and current is not None and current.elements is not None:
            if byte != _CLOSE_ARRAY:
                raise _Irregular  # '{"a": [1}'
            current.elements.append((self.element_start, at))
            current.array_end = at
        self.depth -= 1
        if self.depth < 0:
            raise _Irregular
        if self.depth == 0:
            if current is not None:
                self._end_member(current, at)
            elif self.members or not _blank(self.raw, self.after, at):
                raise _Irregular  # a trailing comma ('{"a": 1,}'), or text ("{1}")
            return True
        return False

    def _member_separator(self, at: int, byte: int) -> None:
        current = self.current
        if current is None:
            raise _Irregular  # "{," or ",," or a ":" without a key
        if byte == _COLON:
            if current.value[0] >= 0 or not _blank(self.raw, current.key[1], at):
                raise _Irregular  # a second ":", or text between a key and its ":"
            current.value = (at + 1, -1)
        else:
            self._end_member(current, at)
            self.current = None
            self.after = at + 1

    def _end_member(self, current: _Member, at: int) -> None:
        if current.value[0] < 0:
            raise _Irregular  # a key without a value
        current.value = (current.value[0], at)
        self.members.append(current)


def _blank(raw: bytes | bytearray, start: int, end: int) -> bool:
    """Only JSON whitespace (space, tab, CR, LF) in ``raw[start:end]``."""
    return _WHITESPACE.fullmatch(raw, start, end) is not None


def _expect_only_whitespace(raw: bytes | bytearray, pos: int) -> None:
    match = _WHITESPACE.match(raw, pos)
    if match is None or match.end() != len(raw):
        raise _Irregular


def string_end(raw: bytes | bytearray, pos: int) -> int:
    """The index after the closing quote of the string whose text starts at ``pos``."""
    find = raw.find
    while True:
        close = find(b'"', pos)
        if close < 0:
            return -1
        back = close - 1
        while raw[back] == _BACKSLASH:
            back -= 1
        if (close - 1 - back) % 2 == 0:  # an even run of backslashes escapes nothing
            return close + 1
        pos = close + 1
