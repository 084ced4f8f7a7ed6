"""Reading fields out of a backend's decoded JSON reply, one way for every dialect.

A reply is untrusted data: any field may be absent, ``null`` or of another type. Two
kinds of reader cover what the decoders need:

- **lenient** functions (``int_or_none``, ``number_or_none``, ``str_or_none``,
  ``nonempty_str``, ``object_or_empty``, ``is_number``) for fields a reply may omit or
  get wrong without harm to the answer: counts, timings, ids, names, timestamps.
  Wrong-typed is the same as absent.
- **strict** readers (``ReplyFields``) for fields the answer is made of: text, tool
  calls, the objects that hold them. Absent or ``null`` is ``None`` (or empty) where the
  field is optional; a wrong type raises ``BackendProtocolError`` naming the field,
  in the dialect's own words (``the backend's message.content is not a string``).

JSON booleans are never numbers here, although Python's ``bool`` is an ``int``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llmbridge.core.errors import BackendProtocolError

__all__ = [
    "ReplyFields",
    "Wording",
    "int_or_none",
    "is_number",
    "nonempty_str",
    "number_or_none",
    "object_or_empty",
    "str_or_none",
]

Wording = Callable[[str, str], str]
"""A dialect's sentence for a malformed reply, given the field as the caller names it
(``choices[0].message``) and what it should have been (``a string``)."""


def is_number(value: object) -> bool:
    """A JSON number (an int or a float, never a boolean)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def int_or_none(value: object) -> int | None:
    """A JSON number as an ``int`` (a float such as ``12.0`` is truncated), else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value)


def number_or_none(value: object) -> float | None:
    """A JSON number as a ``float``, else ``None``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def str_or_none(value: object) -> str | None:
    """A JSON string (``""`` included), else ``None``."""
    return value if isinstance(value, str) else None


def nonempty_str(value: object) -> str | None:
    """A JSON string that is not empty, else ``None`` (for names and ids)."""
    return value if isinstance(value, str) and value else None


def object_or_empty(value: object) -> dict[str, Any]:
    """A JSON object, else an empty one (for optional groups of lenient fields)."""
    return value if isinstance(value, dict) else {}


class ReplyFields:
    """Strict readers whose errors are worded by one dialect.

    Each takes the field's value and the name to give it when it is wrong, so a
    decoder names the field the way its messages always have (a dotted path, an
    index in brackets, a quoted key).
    """

    __slots__ = ("_wording",)

    def __init__(self, wording: Wording) -> None:
        self._wording = wording

    def malformed(self, field: str, expected: str) -> BackendProtocolError:
        """The error for ``field`` not being ``expected`` (``a string``)."""
        return BackendProtocolError(self._wording(field, expected))

    def required_object(self, value: object, field: str) -> dict[str, Any]:
        """A JSON object; anything else (``null`` included) raises."""
        if not isinstance(value, dict):
            raise self.malformed(field, "a JSON object")
        return value

    def optional_object(self, value: object, field: str) -> dict[str, Any]:
        """A JSON object, or ``{}`` when absent or ``null``; another type raises."""
        if value is None:
            return {}
        return self.required_object(value, field)

    def required_string(self, value: object, field: str) -> str:
        """A JSON string; anything else (``null`` included) raises."""
        if not isinstance(value, str):
            raise self.malformed(field, "a string")
        return value

    def optional_string(self, value: object, field: str) -> str | None:
        """A JSON string, or ``None`` when absent or ``null``; another type raises."""
        if value is None or isinstance(value, str):
            return value
        raise self.malformed(field, "a string")

    def required_int(self, value: object, field: str) -> int:
        """A JSON integer (not a boolean); anything else raises."""
        if not isinstance(value, int) or isinstance(value, bool):
            raise self.malformed(field, "an integer")
        return value

    def optional_list(self, value: object, field: str) -> list[Any]:
        """A JSON array, or ``[]`` when absent or ``null``; another type raises."""
        if value is None:
            return []
        if not isinstance(value, list):
            raise self.malformed(field, "a list")
        return value
