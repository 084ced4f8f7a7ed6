"""The one validation-error translator the dialects share (dialects/validation.py): it
names the field the client got wrong by its dotted path in the body, and each dialect
words the sentence (the dialects' own wordings are tested in their test_request.py)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

import pytest
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, Tag

from llmbridge.core.errors import InvalidRequestError
from llmbridge.dialects.anthropic.errors import VALIDATION_WORDING as ANTHROPIC
from llmbridge.dialects.ollama.errors import VALIDATION_WORDING as OLLAMA
from llmbridge.dialects.openai.errors import VALIDATION_WORDING as OPENAI
from llmbridge.dialects.validation import (
    ErrorWording,
    json_type,
    tag_discriminator,
    validate_body,
)

# A wording that shows what the translator handed it.
PLAIN = ErrorWording(
    not_an_object=lambda body: f"not an object: {json_type(body)}",
    invalid=lambda where, reasons: f"invalid {where}: {' | '.join(reasons)}",
    missing=lambda where: f"missing {where}",
    unsupported_tag=lambda where, value, expected: f"tag {where}={value!r} not in {expected}",
)


def _no_dashes(value: str) -> str:
    if "-" in value:
        raise ValueError("must not hold a dash")
    return value


class Text(BaseModel):
    model_config = ConfigDict(strict=True)
    type: Literal["text"]
    text: str


class Image(BaseModel):
    model_config = ConfigDict(strict=True)
    type: Literal["image"]
    url: Annotated[str, AfterValidator(_no_dashes)]


class Message(BaseModel):
    model_config = ConfigDict(strict=True)
    role: str
    content: str | list[Annotated[Text | Image, Field(discriminator="type")]]


class Tagged(BaseModel):
    model_config = ConfigDict(strict=True)
    part: Annotated[
        Annotated[Text, Tag("Text")] | Annotated[Image, Tag("Image")],
        tag_discriminator("type", {"text": "Text", "image": "Image"}),
    ]


class Body(BaseModel):
    model_config = ConfigDict(strict=True)
    model: str
    messages: list[Message] = Field(default_factory=list)
    tagged: Tagged | None = None


def invalid(body: object, wording: ErrorWording = PLAIN) -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as caught:
        validate_body(Body, body, wording, slice_field="messages", part_keys=("content",))
    assert caught.value.status_code == 400
    return caught.value


def message(content: Any, role: Any = "user") -> dict[str, Any]:
    return {"role": role, "content": content}


@pytest.mark.parametrize(
    ("body", "param", "text"),
    [
        ({"model": 3}, "model", "invalid model: Input should be a valid string"),
        ({"model": "m", "messages": [message("x", role=1)]}, "messages.0.role", None),
        # a union's members each report; the deepest field is where the client went wrong
        (
            {"model": "m", "messages": [message([{"type": "text", "text": 5}])]},
            "messages.0.content.0.text",
            "invalid messages.0.content.0.text: Input should be a valid string",
        ),
        # pydantic lists every tag it knows; the translator says which one it got
        (
            {"model": "m", "messages": [message([{"type": "video"}])]},
            "messages.0.content.0",
            "invalid messages.0.content.0: unknown type 'video'",
        ),
        # a validator's ValueError is its own words, without pydantic's "Value error, "
        (
            {"model": "m", "messages": [message([{"type": "image", "url": "a-b"}])]},
            "messages.0.content.0.url",
            "invalid messages.0.content.0.url: must not hold a dash",
        ),
    ],
)
def test_a_wrong_field_is_named_by_its_path_in_the_body(
    body: dict[str, Any], param: str, text: str | None
) -> None:
    error = invalid(body)
    assert error.param == param
    assert error.message.startswith(f"invalid {param}: ")
    if text is not None:
        assert error.message == text


def test_a_missing_field_is_named() -> None:
    error = invalid({"model": "m", "messages": [{"content": "x"}]})
    assert (error.param, error.message) == ("messages.0.role", "missing messages.0.role")


def test_reasons_at_one_field_are_all_given_once() -> None:
    error = invalid({"model": "m", "messages": [message(5)]})
    assert error.param == "messages.0.content"
    assert error.message == (
        "invalid messages.0.content: Input should be a valid string | Input should be a valid list"
    )


@pytest.mark.parametrize(
    ("part", "param", "text"),
    [
        ({"text": "x"}, "tagged.part.type", "missing tagged.part.type"),
        (
            {"type": "video"},
            "tagged.part.type",
            "tag tagged.part.type='video' not in 'text', 'image'",
        ),
        ("x", "tagged.part", "invalid tagged.part: expected an object, got a string"),
    ],
)
def test_a_tagged_union_names_its_tag(part: object, param: str, text: str) -> None:
    error = invalid({"model": "m", "tagged": {"part": part}})
    assert (error.param, error.message) == (param, text)


@pytest.mark.parametrize("body", [None, [], "text", 3])
def test_a_body_that_is_not_an_object(body: object) -> None:
    error = invalid(body)
    assert error.param is None
    assert error.message == f"not an object: {json_type(body)}"


def test_a_long_conversation_validated_in_slices_names_the_same_field() -> None:
    messages = [message([{"type": "text", "text": "x"}] * 3) for _ in range(400)]
    messages[321] = message([{"type": "text", "text": "x"}, {"type": "text", "text": None}])
    error = invalid({"model": "m", "messages": messages})
    assert error.param == "messages.321.content.1.text"


def test_a_valid_body_is_validated_whole() -> None:
    messages = [message([{"type": "text", "text": "x"}] * 3) for _ in range(400)]
    body = validate_body(Body, {"model": "m", "messages": messages}, PLAIN, slice_field="messages")
    assert len(body.messages) == 400
    assert body.messages[399].content == [Text(type="text", text="x")] * 3


# -- each dialect's words for the same fault ---------------------------------------


@pytest.mark.parametrize(
    ("wording", "missing", "wrong", "not_an_object"),
    [
        (
            OLLAMA,
            "messages.0.role: Field required",
            "messages.0.content: Input should be a valid string",
            "the request body must be a JSON object",
        ),
        (
            ANTHROPIC,
            "messages.0.role: Field required",
            "messages.0.content: Input should be a valid string or a valid list",
            "the request body must be a JSON object",
        ),
        (
            OPENAI,
            "Missing required parameter: 'messages.0.role'.",
            "Invalid 'messages.0.content': Input should be a valid string; Input should be a "
            "valid list.",
            "The request body must be a JSON object, not an array.",
        ),
    ],
)
def test_each_dialect_keeps_its_wording(
    wording: ErrorWording, missing: str, wrong: str, not_an_object: str
) -> None:
    assert invalid({"model": "m", "messages": [{"content": "x"}]}, wording).message == missing
    assert invalid({"model": "m", "messages": [message(5)]}, wording).message == wrong
    assert invalid([], wording).message == not_an_object
