"""Validating a long conversation in slices, so a large body never holds the
interpreter for long.

A pydantic validation is one call into compiled code that keeps the interpreter
(the GIL) until it returns: 100k content blocks took 0.7 s in one call, during which
the event loop could not run even with the call in a worker thread (issue 13). The
gateway decodes large bodies in a worker thread (``web/bodies.py``); validating the
messages a few hundred blocks at a time lets the event loop take the interpreter
between slices, every few milliseconds.

Errors keep the locations one whole-body validation would give (``messages.4021...``),
so each dialect turns them into its own error message as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import cache
from itertools import pairwise
from typing import Any, TypeVar

from pydantic import BaseModel, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

__all__ = ["BodyErrors", "message_weight", "validate_in_slices"]

M = TypeVar("M", bound=BaseModel)

SLICE_WEIGHT = 256
"""Messages plus their content parts validated in one call (a few milliseconds)."""


class BodyErrors(Exception):
    """The validation errors of a body, with whole-body locations."""

    def __init__(self, errors: list[ErrorDetails]) -> None:
        super().__init__(f"{len(errors)} validation errors")
        self.errors = errors


def message_weight(message: object, part_keys: Sequence[str]) -> int:
    """One for the message plus the length of each list it holds under ``part_keys``."""
    weight = 1
    if isinstance(message, dict):
        for key in part_keys:
            parts = message.get(key)
            if isinstance(parts, list):
                weight += len(parts)
    return weight


@cache
def _adapter(model: type[BaseModel], field: str) -> TypeAdapter[Any]:
    annotation: Any = model.model_fields[field].annotation
    return TypeAdapter(annotation)


def validate_in_slices(
    model: type[M], body: dict[str, Any], field: str, part_keys: Sequence[str]
) -> M:
    """``model.model_validate(body)``, with the list ``body[field]`` validated in slices
    of about ``SLICE_WEIGHT`` messages and parts.

    Raises:
        BodyErrors: the body is invalid (the first slice that fails, or the rest of
            the body).
    """
    items = body.get(field)
    if not isinstance(items, list):
        return _whole(model, body)
    cuts = _cuts(items, part_keys)
    if len(cuts) <= 2:
        return _whole(model, body)
    head = _whole(model, {**body, field: items[: cuts[1]]})
    validated: list[Any] = list(getattr(head, field))
    adapter = _adapter(model, field)
    for start, stop in pairwise(cuts[1:]):
        try:
            validated.extend(adapter.validate_python(items[start:stop]))
        except ValidationError as exc:
            errors = exc.errors(include_url=False)
            for error in errors:
                loc = error["loc"]
                # The slice's own union label (``list[...]``) may lead the location.
                while loc and not isinstance(loc[0], int):
                    loc = loc[1:]
                if loc and isinstance(loc[0], int):
                    loc = (start + loc[0], *loc[1:])
                error["loc"] = (field, *loc)
            raise BodyErrors(errors) from exc
    setattr(head, field, validated)
    return head


def _whole(model: type[M], body: dict[str, Any]) -> M:
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise BodyErrors(exc.errors(include_url=False)) from exc


def _cuts(items: list[Any], part_keys: Sequence[str]) -> list[int]:
    """Slice boundaries: 0, then wherever the weight so far reaches ``SLICE_WEIGHT``,
    then ``len(items)``."""
    cuts = [0]
    weight = 0
    for index, item in enumerate(items):
        weight += message_weight(item, part_keys)
        if weight >= SLICE_WEIGHT:
            cuts.append(index + 1)
            weight = 0
    if cuts[-1] != len(items):
        cuts.append(len(items))
    return cuts
