"""Gemini requests the decoder refuses (bad bodies, counts over the limits, as data) and
Google's error body."""

from __future__ import annotations

import base64
from typing import Any

import pytest

from llmbridge.core.errors import (
    InvalidRequestError,
    LLMBridgeError,
    NotFoundError,
    RateLimitError,
    UnsupportedFeatureError,
)
from llmbridge.dialects.gemini.errors import error_body, status_for_http
from llmbridge.dialects.gemini.request import (
    decode_chat_request,
)
from tests.dialects.gemini.bodies import (
    PNG,
    SMALL,
    TOOLS,
    body,
    call,
    decode,
    model,
    result,
    user,
)

# -- bad input as data -------------------------------------------------------------------

BAD_BODIES: list[tuple[str, Any, type[LLMBridgeError], str, str]] = [
    ("not an object", [1, 2], InvalidRequestError, "", "must be a JSON object"),
    ("no contents", {}, InvalidRequestError, "contents", "contents: Field required"),
    ("empty contents", {"contents": []}, InvalidRequestError, "contents", "at least one content"),
    ("contents not a list", {"contents": "hi"}, InvalidRequestError, "contents", "valid list"),
    (
        "no parts",
        {"contents": [{"role": "user"}]},
        InvalidRequestError,
        "contents.0.parts",
        "Field required",
    ),
    (
        "text not a string",
        body(user({"text": "ok"}, {"text": 5})),
        InvalidRequestError,
        "contents.0.parts.1.text",
        "valid string",
    ),
    (
        "unknown role",
        body({"role": "assistant", "parts": [{"text": "x"}]}),
        InvalidRequestError,
        "contents.0.role",
        "valid role",
    ),
    ("empty part", body(user({})), InvalidRequestError, "contents.0.parts.0", "must hold one of"),
    (
        "call in a user turn",
        body(user(call("f"))),
        InvalidRequestError,
        "contents.0.parts.0",
        "model turns",
    ),
    (
        "result in a model turn",
        body(user({"text": "a"}), model(result("f", {}))),
        InvalidRequestError,
        "contents.1.parts.0",
        "user turns",
    ),
    (
        "call without name",
        body(user({"text": "a"}), model({"functionCall": {"args": {}}})),
        InvalidRequestError,
        "contents.1.parts.0.functionCall.name",
        "Field required",
    ),
    (
        "args not an object",
        body(user({"text": "a"}), model({"functionCall": {"name": "f", "args": []}})),
        InvalidRequestError,
        "contents.1.parts.0.functionCall.args",
        "valid dictionary",
    ),
    (
        "code execution part",
        body(user({"text": "a"}), model({"executableCode": {"language": "PYTHON", "code": "1"}})),
        UnsupportedFeatureError,
        "contents.1.parts.0.executableCode",
        "not supported",
    ),
    (
        "inline data without data",
        body(user({"inlineData": {"mimeType": "image/png"}})),
        InvalidRequestError,
        "contents.0.parts.0.inlineData.data",
        "Field required",
    ),
    (
        "inline data not base64",
        body(user({"inlineData": {"mimeType": "image/png", "data": "not base64!"}})),
        InvalidRequestError,
        "contents.0.parts.0.inlineData.data",
        "invalid base64",
    ),
    (
        "inline audio",
        body(user({"inlineData": {"mimeType": "audio/wav", "data": PNG}})),
        UnsupportedFeatureError,
        "contents.0.parts.0.inlineData",
        "'audio/wav' is not supported",
    ),
    (
        "inline text not utf-8",
        body(
            user(
                {
                    "inlineData": {
                        "mimeType": "text/plain",
                        "data": base64.b64encode(b"\xff").decode(),
                    }
                }
            )
        ),
        InvalidRequestError,
        "contents.0.parts.0.inlineData.data",
        "UTF-8",
    ),
    (
        "a pdf by uri",
        body(user({"fileData": {"mimeType": "application/pdf", "fileUri": "https://x/a.pdf"}})),
        UnsupportedFeatureError,
        "contents.0.parts.0.fileData",
        "only images",
    ),
    (
        "system instruction with an image",
        body(systemInstruction={"parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}]}),
        InvalidRequestError,
        "systemInstruction.parts.0",
        "text parts",
    ),
    (
        "cached content",
        body(cachedContent="cachedContents/abc"),
        UnsupportedFeatureError,
        "cachedContent",
        "not supported",
    ),
    (
        "google search",
        body(tools=[{"googleSearch": {}}]),
        UnsupportedFeatureError,
        "tools.0.googleSearch",
        "hosted tools",
    ),
    (
        "code execution tool beside functions",
        body(tools=[{"functionDeclarations": [{"name": "f"}]}, {"codeExecution": {}}]),
        UnsupportedFeatureError,
        "tools.1.codeExecution",
        "hosted tools",
    ),
    (
        "function without name",
        body(tools=[{"functionDeclarations": [{"description": "x"}]}]),
        InvalidRequestError,
        "tools.0.functionDeclarations.0.name",
        "Field required",
    ),
    (
        "function with empty name",
        body(tools=[{"functionDeclarations": [{"name": ""}]}]),
        InvalidRequestError,
        "tools.0.functionDeclarations.0.name",
        "needs a name",
    ),
    (
        "parameters not an object",
        body(tools=[{"functionDeclarations": [{"name": "f", "parameters": "x"}]}]),
        InvalidRequestError,
        "tools.0.functionDeclarations.0.parameters",
        "valid dictionary",
    ),
    (
        "unknown mode",
        body(tools=TOOLS, toolConfig={"functionCallingConfig": {"mode": "SOMETIMES"}}),
        InvalidRequestError,
        "toolConfig.functionCallingConfig.mode",
        "not one of AUTO",
    ),
    (
        "allowed name not declared",
        body(
            tools=TOOLS,
            toolConfig={
                "functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["ls", "mv"]}
            },
        ),
        InvalidRequestError,
        "toolConfig.functionCallingConfig.allowedFunctionNames.1",
        "'mv' is not a declared function",
    ),
    (
        "two candidates",
        body(generationConfig={"candidateCount": 2}),
        UnsupportedFeatureError,
        "generationConfig.candidateCount",
        "generates one",
    ),
    (
        "fractional topK",
        body(generationConfig={"topK": 2.5}),
        InvalidRequestError,
        "generationConfig.topK",
        "whole number",
    ),
    (
        "temperature a string",
        body(generationConfig={"temperature": "1"}),
        InvalidRequestError,
        "generationConfig.temperature",
        "valid number",
    ),
    (
        "stop not a list",
        body(generationConfig={"stopSequences": "END"}),
        InvalidRequestError,
        "generationConfig.stopSequences",
        "valid list",
    ),
    (
        "enum output",
        body(generationConfig={"responseMimeType": "text/x.enum"}),
        UnsupportedFeatureError,
        "generationConfig.responseMimeType",
        "text/x.enum",
    ),
    (
        "xml output",
        body(generationConfig={"responseMimeType": "text/xml"}),
        UnsupportedFeatureError,
        "generationConfig.responseMimeType",
        "'text/xml'",
    ),
    (
        "image output",
        body(generationConfig={"responseModalities": ["TEXT", "IMAGE"]}),
        UnsupportedFeatureError,
        "generationConfig.responseModalities",
        "only TEXT",
    ),
    (
        "budget below -1",
        body(generationConfig={"thinkingConfig": {"thinkingBudget": -2}}),
        InvalidRequestError,
        "generationConfig.thinkingConfig.thinkingBudget",
        "must be -1",
    ),
    (
        "unknown thinking level",
        body(generationConfig={"thinkingConfig": {"thinkingLevel": "EXTREME"}}),
        InvalidRequestError,
        "generationConfig.thinkingConfig.thinkingLevel",
        "not one of MINIMAL",
    ),
    (
        "include thoughts a string",
        body(generationConfig={"thinkingConfig": {"includeThoughts": "yes"}}),
        InvalidRequestError,
        "generationConfig.thinkingConfig.includeThoughts",
        "valid boolean",
    ),
]


@pytest.mark.parametrize(
    ("payload", "error", "param", "words"),
    [case[1:] for case in BAD_BODIES],
    ids=[case[0] for case in BAD_BODIES],
)
def test_bad_bodies_name_the_field(
    payload: Any, error: type[LLMBridgeError], param: str, words: str
) -> None:
    with pytest.raises(error) as caught:
        decode_chat_request(payload, model="m", stream=False)
    assert caught.value.status_code == 400
    assert (caught.value.param or "") == param
    assert words in caught.value.message
    if param:
        assert caught.value.message.startswith(f"{param}: ")


@pytest.mark.parametrize(
    ("payload", "param", "setting"),
    [
        (body(*[user({"text": "x"})] * 4), "contents", "max_messages"),
        (
            body(user({"text": "a"}, {"text": "b"}, {"text": "c"})),
            "contents.0.parts",
            "max_parts_per_message",
        ),
        (
            body(systemInstruction={"parts": [{"text": "a"}] * 3}),
            "systemInstruction.parts",
            "max_parts_per_message",
        ),
        (
            body(tools=[{"functionDeclarations": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}]),
            "tools",
            "max_tools",
        ),
        (body(tools=[{"functionDeclarations": [{"name": "a"}]}] * 3), "tools", "max_tools"),
        (
            body(
                tools=[
                    {"functionDeclarations": [{"name": "a"}, {"name": "b"}]},
                    {"functionDeclarations": [{"name": "c"}]},
                ]
            ),
            "tools",
            "max_tools",
        ),
    ],
)
def test_counts_over_the_limits_are_400s_naming_the_setting(
    payload: dict[str, Any], param: str, setting: str
) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_chat_request(payload, SMALL, model="m", stream=False)
    assert caught.value.param == param
    assert f"server.limits.{setting}" in caught.value.message


# -- errors ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("code", "status"),
    [
        (400, "INVALID_ARGUMENT"),
        (401, "UNAUTHENTICATED"),
        (403, "PERMISSION_DENIED"),
        (404, "NOT_FOUND"),
        (405, "INVALID_ARGUMENT"),
        (408, "DEADLINE_EXCEEDED"),
        (409, "ABORTED"),
        (413, "INVALID_ARGUMENT"),
        (422, "FAILED_PRECONDITION"),
        (429, "RESOURCE_EXHAUSTED"),
        (499, "CANCELLED"),
        (500, "INTERNAL"),
        (501, "UNIMPLEMENTED"),
        (502, "UNAVAILABLE"),
        (503, "UNAVAILABLE"),
        (504, "DEADLINE_EXCEEDED"),
        (507, "INTERNAL"),
    ],
)
def test_status_for_http(code: int, status: str) -> None:
    assert status_for_http(code) == status


def test_error_body_in_googles_shape() -> None:
    assert error_body(RateLimitError("slow down"), "req-1") == {
        "error": {"code": 429, "message": "slow down", "status": "RESOURCE_EXHAUSTED"}
    }
    assert error_body(NotFoundError("no such model"), "req-1")["error"]["status"] == "NOT_FOUND"


def test_error_body_of_a_bad_field_names_it_in_details() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode(body(user({"text": 5})))
    message = "contents.0.parts.0.text: Input should be a valid string"
    assert error_body(caught.value, "r") == {
        "error": {
            "code": 400,
            "message": message,
            "status": "INVALID_ARGUMENT",
            "details": [
                {
                    "@type": "type.googleapis.com/google.rpc.BadRequest",
                    "fieldViolations": [
                        {
                            "field": "contents.0.parts.0.text",
                            "description": message,
                        }
                    ],
                }
            ],
        }
    }


def test_a_field_the_core_names_is_named_as_gemini_knows_it() -> None:
    # A context-length error from a backend names the core's "messages".
    error = InvalidRequestError("the prompt is too long", param="messages")
    violation = error_body(error, "r")["error"]["details"][0]["fieldViolations"][0]
    assert violation["field"] == "contents"


def test_the_sdk_reads_our_error_body() -> None:
    from google.genai import errors

    payload = error_body(InvalidRequestError("contents: bad", param="contents"), "r")
    err = errors.APIError(400, payload)
    assert (err.code, err.status, err.message) == (400, "INVALID_ARGUMENT", "contents: bad")
