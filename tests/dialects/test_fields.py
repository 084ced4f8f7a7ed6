"""The shared readers of backend reply fields (dialects/fields.py): a wrong-typed
strict field is a BackendProtocolError naming the field in the dialect's words; a
missing optional field is None (or empty); lenient readers never raise."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from llmbridge.core.errors import BackendProtocolError
from llmbridge.dialects.fields import (
    ReplyFields,
    int_or_none,
    is_number,
    nonempty_str,
    number_or_none,
    object_or_empty,
    str_or_none,
)

FIELDS = ReplyFields(lambda field, expected: f"the test backend's {field} is not {expected}")


@pytest.mark.parametrize(
    ("read", "value", "message"),
    [
        (FIELDS.required_object, "text", "the test backend's reply.part is not a JSON object"),
        (FIELDS.required_object, None, "the test backend's reply.part is not a JSON object"),
        (FIELDS.optional_object, [], "the test backend's reply.part is not a JSON object"),
        (FIELDS.required_string, 5, "the test backend's reply.part is not a string"),
        (FIELDS.required_string, None, "the test backend's reply.part is not a string"),
        (FIELDS.optional_string, {"a": 1}, "the test backend's reply.part is not a string"),
        (FIELDS.required_int, "3", "the test backend's reply.part is not an integer"),
        (FIELDS.required_int, True, "the test backend's reply.part is not an integer"),
        (FIELDS.required_int, 1.5, "the test backend's reply.part is not an integer"),
        (FIELDS.optional_list, {}, "the test backend's reply.part is not a list"),
    ],
)
def test_a_wrong_typed_field_is_named_in_the_dialects_words(
    read: Callable[[object, str], object], value: object, message: str
) -> None:
    with pytest.raises(BackendProtocolError) as caught:
        read(value, "reply.part")
    assert caught.value.message == message


def test_a_missing_optional_field_is_none_or_empty() -> None:
    assert FIELDS.optional_string(None, "content") is None
    assert FIELDS.optional_list(None, "tool_calls") == []
    assert FIELDS.optional_object(None, "function") == {}


def test_a_well_typed_field_is_returned_as_it_is() -> None:
    part = {"text": "hi"}
    assert FIELDS.required_object(part, "part") is part
    assert FIELDS.optional_object(part, "part") is part
    assert FIELDS.required_string("", "text") == ""
    assert FIELDS.optional_string("hi", "text") == "hi"
    assert FIELDS.required_int(0, "index") == 0
    assert FIELDS.optional_list([1], "calls") == [1]


@pytest.mark.parametrize(
    ("value", "as_int", "as_float"),
    [
        (3, 3, 3.0),
        (12.9, 12, 12.9),
        (0, 0, 0.0),
        (True, None, None),  # a JSON boolean is no number, though Python's bool is an int
        ("3", None, None),
        (None, None, None),
        ([3], None, None),
    ],
)
def test_lenient_numbers(value: object, as_int: int | None, as_float: float | None) -> None:
    assert int_or_none(value) == as_int
    assert number_or_none(value) == as_float
    assert is_number(value) is (as_float is not None)


@pytest.mark.parametrize(
    ("value", "as_str", "as_name"),
    [("m", "m", "m"), ("", "", None), (None, None, None), (5, None, None), (["m"], None, None)],
)
def test_lenient_strings(value: object, as_str: str | None, as_name: str | None) -> None:
    assert str_or_none(value) == as_str
    assert nonempty_str(value) == as_name


def test_object_or_empty() -> None:
    details = {"family": "llama"}
    assert object_or_empty(details) is details
    assert object_or_empty(None) == {}
    assert object_or_empty("llama") == {}
