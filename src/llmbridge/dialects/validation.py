"""Validating a client's body, and turning pydantic's errors into one 400 naming the field.

``validate_body`` is the one way every dialect validates an inbound body, and
``invalid_request`` the one translator of pydantic's errors: it picks the error the
client most likely made (the deepest field; a union reports one error per member),
names it by the dotted path of keys and indexes that exist in the body (pydantic adds
union member labels such as ``str`` or ``list[...]`` to its locations), and hands the
sentence to the dialect's ``ErrorWording``, so each API keeps its own voice
(``messages.0.role: Field required`` against ``Missing required parameter:
'messages.0.role'.``). ``tag_discriminator`` builds tagged unions whose errors name the
tag field and the values it takes.

A long conversation is validated in slices, so a large body never holds the
interpreter for long.

A pydantic validation is one call into compiled code that keeps the interpreter
(the GIL) until it returns: 100k content blocks took 0.7 s in one call, during which
the event loop could not run even with the call in a worker thread. The
gateway decodes large bodies in a worker thread (``web/bodies.py``); validating the
messages a few hundred blocks at a time lets the event loop take the interpreter
between slices, every few milliseconds.

Errors keep the locations one whole-body validation would give (``messages.4021...``),
so the translator names the field as it would for a small body.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache
from itertools import pairwise
from typing import Any, TypeVar

from pydantic import BaseModel, Discriminator, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.request_limits import message_parts

__all__ = [
    "BodyErrors",
    "ErrorWording",
    "invalid_request",
    "json_type",
    "path_prefixed",
    "tag_discriminator",
    "validate_body",
    "validate_in_slices",
]

M = TypeVar("M", bound=BaseModel)

SLICE_WEIGHT = 256
"""Messages plus their content parts validated in one call (a few milliseconds)."""


class BodyErrors(Exception):
    """The validation errors of a body, with whole-body locations."""

    def __init__(self, errors: list[ErrorDetails]) -> None:
        super().__init__(f"{len(errors)} validation errors")
        self.errors = errors


@cache
def _adapter(model: type[BaseModel], field: str) -> TypeAdapter[Any]:
    annotation: Any = model.model_fields[field].annotation
    return TypeAdapter(annotation)


def validate_in_slices(
    model: type[M], body: dict[str, Any], field: str | None, part_keys: Sequence[str] = ()
) -> M:
    """``model.model_validate(body)``, with the list ``body[field]`` (when ``field`` is
    given) validated in slices of about ``SLICE_WEIGHT`` messages and parts.

    Raises:
        BodyErrors: the body is invalid (the first slice that fails, or the rest of
            the body).
    """
    items = body.get(field) if field is not None else None
    if field is None or not isinstance(items, list):
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
        weight += 1 + message_parts(item, part_keys)
        if weight >= SLICE_WEIGHT:
            cuts.append(index + 1)
            weight = 0
    if cuts[-1] != len(items):
        cuts.append(len(items))
    return cuts


# -- the translator -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ErrorWording:
    """One dialect's sentences for a body that fails validation. The translator picks
    the field and its dotted path (``""`` for the body itself); these only word it."""

    not_an_object: Callable[[object], str]
    """The body is not a JSON object (given the body)."""
    invalid: Callable[[str, list[str]], str]
    """A field is wrong: its path and pydantic's reasons (at least one, no repeats)."""
    missing: Callable[[str], str]
    """A required field is absent: its path."""
    unsupported_tag: Callable[[str, object, str], str]
    """A ``tag_discriminator`` field holds no member's tag: its path, its value and
    the values it takes (``'system', 'user'``)."""


def path_prefixed(join: Callable[[list[str]], str]) -> ErrorWording:
    """Wording as pydantic words it, ``<path>: <reasons joined>`` (``messages.0.role:
    Field required``), as Ollama's and Anthropic's fronts answer."""

    def invalid(where: str, reasons: list[str]) -> str:
        return f"{where}: {join(reasons)}" if where else join(reasons)

    return ErrorWording(
        not_an_object=lambda body: "the request body must be a JSON object",
        invalid=invalid,
        missing=lambda where: f"{where}: Field required",
        unsupported_tag=lambda where, value, expected: (
            f"{where}: {value!r} is not one of {expected}"
        ),
    )


def validate_body(
    model: type[M],
    body: object,
    wording: ErrorWording,
    *,
    slice_field: str | None = None,
    part_keys: Sequence[str] = (),
) -> M:
    """Validate a decoded JSON body against ``model`` (the list ``slice_field``, when
    given, a slice at a time; ``part_keys`` weigh its items).

    Raises:
        InvalidRequestError: the body is not an object, or a field is missing or
            wrong; ``param`` is the field's dotted path (``messages.0.content.1``).
    """
    if not isinstance(body, dict):
        raise InvalidRequestError(wording.not_an_object(body))
    try:
        return validate_in_slices(model, body, slice_field, part_keys)
    except BodyErrors as exc:
        raise invalid_request(exc.errors, body, wording) from exc


def invalid_request(
    errors: list[ErrorDetails], body: dict[str, Any], wording: ErrorWording
) -> InvalidRequestError:
    """The error the client most likely made, worded by the dialect.

    When a union fails, pydantic reports one error per member; the deepest field is
    the member the client meant, and the reasons given there are all reported.
    """
    paths = [_field_path(error["loc"], body, error["type"]) for error in errors]
    deepest = max(paths, key=len)
    chosen = [error for error, path in zip(errors, paths, strict=True) if path == deepest]
    where = ".".join(map(str, deepest))
    first = chosen[0]
    if first["type"] == _TAG_ERROR:
        return _tag_error(deepest, first.get("ctx", {}), body, wording)
    if first["type"] == "missing":
        return InvalidRequestError(wording.missing(where), param=where or None)
    reasons = list(dict.fromkeys(_reason(error) for error in chosen))
    return InvalidRequestError(wording.invalid(where, reasons), param=where or None)


def tag_discriminator(
    field: str,
    tags: dict[str, str],
    *,
    missing: str | None = None,
    other: str | None = None,
) -> Discriminator:
    """A tagged union's discriminator picking the member by ``body[field]`` (``tags``
    maps each value to the member's ``Tag`` name). A missing or unknown value is
    reported by ``invalid_request`` as the field ``<union>.<field>`` with the values
    it takes, rather than as one error per member. ``missing`` names the member for
    an object without the field (Responses input items default to ``message``);
    ``other`` the member for any other string value (Responses' hosted tools)."""

    def pick(value: Any) -> str | None:
        raw = value.get(field) if isinstance(value, dict) else getattr(value, field, None)
        if raw is None and missing is not None and isinstance(value, dict):
            return missing
        if isinstance(raw, str):
            return tags.get(raw, other)
        return None

    return Discriminator(
        pick,
        custom_error_type=_TAG_ERROR,
        custom_error_message=f"'{field}' is missing or not one of the supported values",
        custom_error_context=_ErrorContext(field=field, expected=", ".join(map(repr, tags))),
    )


def json_type(value: object) -> str:
    """What a JSON value is, with its article (``a string``, ``null``)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "an array"
    return "an object" if isinstance(value, dict) else type(value).__name__


_TAG_ERROR = "invalid_tag"
"""The error type of a ``tag_discriminator`` union whose tag is missing or unknown."""


class _ErrorContext(dict[str, int | str | float]):
    """An error context that can sit in a ``X | None`` annotation (unions hash members)."""

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items())))


def _field_path(loc: tuple[int | str, ...], body: Any, error_type: str) -> list[int | str]:
    # pydantic adds union-member labels (``str``, ``dict[str,any]``, tags) to ``loc``;
    # keep only the steps that exist in the input, plus the name of a missing field.
    path: list[int | str] = []
    current: Any = body
    last = len(loc) - 1
    for position, item in enumerate(loc):
        in_list = isinstance(item, int) and isinstance(current, list) and 0 <= item < len(current)
        in_dict = isinstance(current, dict) and item in current
        if in_list or in_dict:
            current = current[item]
            path.append(item)
        elif error_type == "missing" and position == last and isinstance(current, dict):
            path.append(item)
    return path


def _reason(error: ErrorDetails) -> str:
    if error["type"] == "value_error":  # a validator's ValueError, without "Value error, "
        return str(error.get("ctx", {}).get("error", error["msg"]))
    if error["type"] == "union_tag_invalid":  # pydantic lists every tag; say which was given
        ctx = error.get("ctx", {})
        tag_field = str(ctx.get("discriminator", "tag")).strip("'")
        return f"unknown {tag_field} {ctx.get('tag')!r}"
    return error["msg"]


def _tag_error(
    path: list[int | str], ctx: dict[str, Any], body: dict[str, Any], wording: ErrorWording
) -> InvalidRequestError:
    where = ".".join(map(str, path))
    value: Any = body
    for step in path:
        value = value[step]  # every step of the path exists in the body
    if not isinstance(value, dict):
        reason = f"expected an object, got {json_type(value)}"
        return InvalidRequestError(wording.invalid(where, [reason]), param=where or None)
    field = ctx["field"]
    param = f"{where}.{field}" if where else field
    if field not in value:
        return InvalidRequestError(wording.missing(param), param=param)
    message = wording.unsupported_tag(param, value[field], ctx["expected"])
    return InvalidRequestError(message, param=param)
