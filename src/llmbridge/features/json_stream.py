"""One string field of a JSON object, decoded while the object is still being written.

This module owns reading a model's JSON reply incrementally: ``FieldStreamer`` is fed
the reply's text in whatever pieces it arrives and gives back, piece by piece, the
decoded characters of one top-level string field (tool emulation streams the
``content`` of a ``chat`` or ``answer`` decision this way). Another top-level string
field, the *gate*, decides whether the field is wanted at all; keys may come in any
order, so what is decoded before the gate is known is held back and released once
the gate's value is accepted, or dropped when it is not.

Only the first JSON object in the text is read and anything before its ``{`` is
skipped, so a code fence or prose in front does no harm. Nested values are skipped
without being decoded. JSON escapes are decoded even when split across pieces,
including ``\\uXXXX`` surrogate pairs. The reader is strict about structure: on
anything that is not JSON it stops for good (``failed``) and gives nothing more, and
the caller falls back to a tolerant parse of the whole text.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Collection

__all__ = ["FieldStreamer"]

_RUN = re.compile(r'[^"\\]+')
"""A run of string characters that need no decoding."""

_SIMPLE_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "b": "\b",
    "f": "\f",
    "n": "\n",
    "r": "\r",
    "t": "\t",
}
_HEX = frozenset("0123456789abcdefABCDEF")
_WHITESPACE = " \t\r\n"
_REPLACEMENT = "\ufffd"
"""Stands in for a lone surrogate, which could not be encoded as UTF-8 downstream."""


class _StringDecoder:
    """The body of one JSON string (after its opening quote), decoded as it arrives."""

    __slots__ = ("_escape", "_high", "broken")

    def __init__(self) -> None:
        self._escape: str | None = None  # an escape begun but not finished, without "\"
        self._high: int | None = None  # a high surrogate waiting for its low half
        self.broken = False
        """Whether a bad escape was met; nothing after it is decoded."""

    def feed(self, text: str, pos: int) -> tuple[str, int | None]:
        """Decode ``text[pos:]``: the characters, and the index just after the closing
        quote (``None`` while the string is still open, or once it is ``broken``)."""
        out: list[str] = []
        while pos < len(text) and not self.broken:
            if self._escape is not None:
                self._escape_step(text[pos], out)
                pos += 1
                continue
            char = text[pos]
            if char == '"':
                self._lone_high(out)
                return "".join(out), pos + 1
            if char == "\\":
                self._escape = ""
                pos += 1
                continue
            run = _RUN.match(text, pos)
            assert run is not None  # text[pos] is neither a quote nor a backslash
            self._lone_high(out)
            out.append(run.group())
            pos = run.end()
        return "".join(out), None

    def _escape_step(self, char: str, out: list[str]) -> None:
        escape = f"{self._escape}{char}"
        if escape[0] != "u":
            self._escape = None
            if escape not in _SIMPLE_ESCAPES:
                self.broken = True
                return
            self._lone_high(out)
            out.append(_SIMPLE_ESCAPES[escape])
        elif len(escape) > 1 and char not in _HEX:
            self.broken = True
        elif len(escape) < 5:
            self._escape = escape
        else:
            self._escape = None
            self._code_point(int(escape[1:], 16), out)

    def _code_point(self, code: int, out: list[str]) -> None:
        if self._high is not None and 0xDC00 <= code <= 0xDFFF:
            out.append(chr(0x10000 + ((self._high - 0xD800) << 10) + (code - 0xDC00)))
            self._high = None
            return
        self._lone_high(out)
        if 0xD800 <= code <= 0xDBFF:
            self._high = code  # its low half may be in the next piece
        elif 0xDC00 <= code <= 0xDFFF:
            out.append(_REPLACEMENT)
        else:
            out.append(chr(code))

    def _lone_high(self, out: list[str]) -> None:
        if self._high is not None:
            out.append(_REPLACEMENT)
            self._high = None


class _State(enum.Enum):
    SEEK = enum.auto()  # before the object's "{"
    KEY = enum.auto()  # expecting a key or "}"
    KEY_STRING = enum.auto()
    COLON = enum.auto()
    VALUE = enum.auto()
    VALUE_STRING = enum.auto()
    NESTED = enum.auto()  # inside an object or array value, skipped
    SCALAR = enum.auto()  # inside a number, true, false or null
    AFTER_VALUE = enum.auto()  # expecting "," or "}"
    DONE = enum.auto()
    FAILED = enum.auto()


class FieldStreamer:
    """Streams the top-level string ``field`` of the first JSON object in a text,
    once the top-level string ``gate`` has a value in ``accept``.

    ``feed`` takes the next piece of the text and returns the field's newly decoded
    characters; all of them together are exactly the field's value. Only the first
    occurrence of ``field`` and of ``gate`` counts.
    """

    __slots__ = (
        "_accept",
        "_depth",
        "_field",
        "_gate",
        "_gate_text",
        "_held",
        "_key",
        "_nested_escape",
        "_nested_string",
        "_seen_field",
        "_state",
        "_string",
        "_target",
        "field_complete",
        "gate_value",
    )

    def __init__(self, field: str, *, gate: str, accept: Collection[str]) -> None:
        self._field, self._gate, self._accept = field, gate, frozenset(accept)
        self._state = _State.SEEK
        self._string = _StringDecoder()
        self._key: list[str] = []
        self._target: str | None = None  # "field" | "gate" while in such a value
        self._seen_field = False
        self._gate_text: list[str] = []
        self._held: list[str] = []  # field text decoded before the gate was known
        self._depth = 0
        self._nested_string = False
        self._nested_escape = False
        self.gate_value: str | None = None
        """The gate's value once its string has closed."""
        self.field_complete = False
        """Whether the field's string has closed."""

    @property
    def streaming(self) -> bool:
        """Whether the gate let the field through."""
        return self.gate_value in self._accept

    @property
    def done(self) -> bool:
        """Whether the object has closed."""
        return self._state is _State.DONE

    @property
    def failed(self) -> bool:
        """Whether the text stopped being JSON; nothing more is read."""
        return self._state is _State.FAILED

    def feed(self, piece: str) -> str:
        """Read the next piece of the text; the field's characters it completes."""
        out: list[str] = []
        pos = 0
        while pos < len(piece) and self._state not in (_State.DONE, _State.FAILED):
            pos = self._step(piece, pos, out)
        return "".join(out)

    def _step(self, text: str, pos: int, out: list[str]) -> int:
        """Consume from ``text[pos]`` on; the position reached."""
        state = self._state
        if state is _State.SEEK:
            brace = text.find("{", pos)
            if brace < 0:
                return len(text)
            self._state = _State.KEY
            return brace + 1
        if state is _State.KEY_STRING or state is _State.VALUE_STRING:
            return self._read_string(text, pos, out)
        if state is _State.NESTED:
            return self._skip_nested(text, pos)
        char = text[pos]
        if state is _State.SCALAR:
            if char in _WHITESPACE or char in ",}":
                self._state = _State.AFTER_VALUE
                return pos  # the character belongs to what follows the value
            return pos + 1
        if char in _WHITESPACE:
            return pos + 1
        self._state = self._next_state(state, char)
        return pos + 1

    def _next_state(self, state: _State, char: str) -> _State:
        """The state after a structural character ``char`` read in ``state``."""
        if state is _State.KEY:
            if char == '"':
                self._key = []
                return _State.KEY_STRING
            return _State.DONE if char == "}" else _State.FAILED
        if state is _State.COLON:
            return _State.VALUE if char == ":" else _State.FAILED
        if state is _State.VALUE:
            return self._start_value(char)
        if state is _State.AFTER_VALUE and char in ",}":
            return _State.KEY if char == "," else _State.DONE
        return _State.FAILED

    def _start_value(self, char: str) -> _State:
        if char == '"':
            key = "".join(self._key)
            self._target = None
            if key == self._field and not self._seen_field:
                self._target, self._seen_field = "field", True
            elif key == self._gate and self.gate_value is None:
                self._target = "gate"
            return _State.VALUE_STRING
        if char in "{[":
            self._depth, self._nested_string, self._nested_escape = 1, False, False
            return _State.NESTED
        return _State.FAILED if char in ",}:]" else _State.SCALAR

    def _read_string(self, text: str, pos: int, out: list[str]) -> int:
        decoded, end = self._string.feed(text, pos)
        if self._state is _State.KEY_STRING:
            self._key.append(decoded)
        elif self._target == "gate":
            self._gate_text.append(decoded)
        elif self._target == "field":
            if self.gate_value is None:
                self._held.append(decoded)
            elif self.streaming:
                out.append(decoded)
        if self._string.broken:
            self._state = _State.FAILED
        if end is None:
            return len(text)
        self._string = _StringDecoder()
        if self._state is _State.KEY_STRING:
            self._state = _State.COLON
            return end
        self._state = _State.AFTER_VALUE
        if self._target == "field":
            self.field_complete = True
        elif self._target == "gate":
            self.gate_value = "".join(self._gate_text)
            if self.streaming:
                out.extend(self._held)
            self._held = []
        return end

    def _skip_nested(self, text: str, pos: int) -> int:
        for index in range(pos, len(text)):
            char = text[index]
            if self._nested_string:
                if self._nested_escape:
                    self._nested_escape = False
                elif char == "\\":
                    self._nested_escape = True
                elif char == '"':
                    self._nested_string = False
            elif char == '"':
                self._nested_string = True
            elif char in "{[":
                self._depth += 1
            elif char in "}]":
                self._depth -= 1
                if self._depth == 0:
                    self._state = _State.AFTER_VALUE
                    return index + 1
        return len(text)
