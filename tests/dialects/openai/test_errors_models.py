"""error_body by status, and the model list codecs (checked with the official client)."""

from __future__ import annotations

import openai
import orjson
import pytest
from openai.types import Model

from llmbridge.core.errors import (
    AuthenticationError,
    BackendError,
    BackendHTTPError,
    BackendTimeoutError,
    BackendUnavailableError,
    ContextLengthError,
    InternalError,
    InvalidRequestError,
    LLMBridgeError,
    ModelNotFoundError,
    NotFoundError,
    PermissionDeniedError,
    RateLimitError,
    RequestTooLargeError,
)
from llmbridge.core.model_info import ModelInfo
from llmbridge.dialects.openai.errors import error_body
from llmbridge.dialects.openai.model_list import decode_models, encode_model, encode_models
from tests.dialects.openai.helpers import official_client


@pytest.mark.parametrize(
    ("error", "error_type"),
    [
        (InvalidRequestError("bad", param="messages"), "invalid_request_error"),
        (RequestTooLargeError("big"), "invalid_request_error"),
        (LLMBridgeError("unprocessable", status_code=422), "invalid_request_error"),
        (LLMBridgeError("conflict", status_code=409), "invalid_request_error"),
        (AuthenticationError("key"), "authentication_error"),
        (PermissionDeniedError("no"), "permission_error"),
        (NotFoundError("nothing here"), "not_found_error"),
        (ModelNotFoundError("gpt-9"), "not_found_error"),
        (RateLimitError("slow"), "rate_limit_error"),
        (InternalError("bug"), "api_error"),
        (BackendError("upstream"), "api_error"),
        (BackendUnavailableError("down"), "api_error"),
        (BackendTimeoutError("slow"), "api_error"),
        (BackendHTTPError("boom", backend_status=500), "api_error"),
        (BackendHTTPError("limited", backend_status=429), "rate_limit_error"),
    ],
)
def test_error_type_follows_status(error: LLMBridgeError, error_type: str) -> None:
    body = error_body(error, "req_1")
    assert body == {
        "error": {
            "message": error.message,
            "type": error_type,
            "param": error.param,
            "code": error.code,
        }
    }


def test_model_not_found_has_code_and_param() -> None:
    assert error_body(ModelNotFoundError("gpt-9"), "req_1")["error"] == {
        "message": "model 'gpt-9' not found",
        "type": "not_found_error",
        "param": "model",
        "code": "model_not_found",
    }


def test_context_length_code() -> None:
    error = error_body(ContextLengthError("too long"), "r")["error"]
    assert error["code"] == "context_length_exceeded"
    assert error["param"] == "messages"


async def test_official_client_reads_the_error() -> None:
    body = error_body(ModelNotFoundError("gpt-9"), "req_1")

    async with official_client(orjson.dumps(body), status=404) as client:
        with pytest.raises(openai.NotFoundError) as info:
            await client.chat.completions.create(
                model="gpt-9", messages=[{"role": "user", "content": "hi"}]
            )
    assert info.value.code == "model_not_found"
    assert info.value.param == "model"
    assert info.value.type == "not_found_error"


# -- models -------------------------------------------------------------------------


def test_encode_model() -> None:
    info = ModelInfo(name="llama3", backend="local-ollama", modified_at=1700000000.5)
    body = encode_model(info)
    assert body == {
        "id": "llama3",
        "object": "model",
        "created": 1700000000,
        "owned_by": "local-ollama",
    }
    Model.model_validate(body)
    assert encode_model(ModelInfo(name="x"))["owned_by"] == "llmbridge"
    assert encode_model(ModelInfo(name="x"))["created"] == 0


async def test_official_client_lists_models() -> None:
    body = encode_models([ModelInfo(name="a", backend="b1"), ModelInfo(name="c")])

    async with official_client(orjson.dumps(body)) as client:
        models = [model async for model in client.models.list()]
    assert [(m.id, m.owned_by) for m in models] == [("a", "b1"), ("c", "llmbridge")]


def test_decode_models() -> None:
    body = {
        "object": "list",
        "data": [
            {"id": "Qwen/Qwen2.5-7B", "object": "model", "created": 1700000000, "owned_by": "vllm"},
            {"id": "tiny"},
        ],
    }
    assert decode_models(body) == [
        ModelInfo(
            name="Qwen/Qwen2.5-7B",
            backend_model="Qwen/Qwen2.5-7B",
            modified_at=1700000000.0,
            details={"owned_by": "vllm"},
        ),
        ModelInfo(name="tiny", backend_model="tiny"),
    ]


@pytest.mark.parametrize(
    "body", [[], {"data": None}, {"data": [{"object": "model"}]}, {"data": ["x"]}]
)
def test_decode_malformed_models(body: object) -> None:
    with pytest.raises(Exception, match="model list") as info:
        decode_models(body)
    assert type(info.value).__name__ == "BackendProtocolError"
