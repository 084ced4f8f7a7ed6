"""Gemini's model list (``dialects/gemini/model_list.py``) and embedding replies (in
``response.py``): the shapes, paging, bad query values as data, the client-side
decoders, and the google-genai SDK's client reading what the gateway writes (its HTTP
layer fed the encoded bodies)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import types as genai_types

from llmbridge.core.errors import BackendProtocolError, InternalError, InvalidRequestError
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.response import EmbedResponse
from llmbridge.dialects.gemini.model_list import decode_models, encode_model, encode_model_list
from llmbridge.dialects.gemini.response import (
    decode_batch_embed_response,
    encode_batch_embed_response,
    encode_embed_response,
)

CHAT = ModelInfo(
    name="qwen3:8b",
    backend="ollama",
    capabilities=frozenset({"completion", "tools", "thinking"}),
    context_length=40960,
)
EMBED = ModelInfo(name="nomic-embed-text", capabilities=frozenset({"embedding"}))
BOTH = ModelInfo(name="smol", capabilities=frozenset({"completion", "embedding"}))


def test_encode_model() -> None:
    assert encode_model(CHAT) == {
        "name": "models/qwen3:8b",
        "baseModelId": "qwen3:8b",
        "version": "001",
        "displayName": "qwen3:8b",
        "description": "qwen3:8b, served by llmbridge",
        "inputTokenLimit": 40960,
        "outputTokenLimit": 40960,
        "supportedGenerationMethods": ["generateContent", "streamGenerateContent", "countTokens"],
        "thinking": True,
    }


def test_supported_methods_follow_capabilities() -> None:
    assert encode_model(EMBED)["supportedGenerationMethods"] == [
        "embedContent",
        "batchEmbedContents",
    ]
    assert encode_model(BOTH)["supportedGenerationMethods"] == [
        "generateContent",
        "streamGenerateContent",
        "countTokens",
        "embedContent",
        "batchEmbedContents",
    ]
    assert "inputTokenLimit" not in encode_model(EMBED)  # unknown, not invented


MANY = [ModelInfo(name=f"m{i}") for i in range(7)]


def _names(page: dict[str, Any]) -> list[str]:
    return [model["name"].removeprefix("models/") for model in page["models"]]


def test_list_pages_follow_next_page_token() -> None:
    seen: list[str] = []
    query: dict[str, str] = {"pageSize": "3"}
    while True:
        page = encode_model_list(MANY, query)
        seen += _names(page)
        if "nextPageToken" not in page:
            break
        query = {"pageSize": "3", "pageToken": page["nextPageToken"]}
    assert seen == [info.name for info in MANY]


def test_list_defaults_and_clamps() -> None:
    assert _names(encode_model_list(MANY, {})) == [info.name for info in MANY]
    assert _names(encode_model_list(MANY, {"pageSize": "0"})) == [info.name for info in MANY]
    assert "nextPageToken" not in encode_model_list(MANY, {"pageSize": "5000"})
    assert encode_model_list([], {}) == {"models": []}


@pytest.mark.parametrize(
    ("query", "param"),
    [
        ({"pageSize": "-1"}, "pageSize"),
        ({"pageSize": "ten"}, "pageSize"),
        ({"pageToken": "abc"}, "pageToken"),
        ({"pageToken": "99"}, "pageToken"),
        ({"pageToken": "²"}, "pageToken"),
    ],
)
def test_list_bad_query_values_name_the_field(query: dict[str, str], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        encode_model_list(MANY, query)
    assert caught.value.param == param
    assert caught.value.message.startswith(param)


def test_decode_models_strips_the_prefix() -> None:
    body = {
        "models": [
            {
                "name": "models/gemini-2.5-flash",
                "displayName": "Gemini 2.5 Flash",
                "inputTokenLimit": 1048576,
                "outputTokenLimit": 65536,
                "supportedGenerationMethods": ["generateContent", "countTokens"],
                "thinking": True,
            },
            {
                "name": "models/gemini-embedding-001",
                "supportedGenerationMethods": ["embedContent", "countTextTokens"],
            },
        ],
        "nextPageToken": "Ch0...",
    }
    flash, embedding = decode_models(body)
    assert flash.name == "gemini-2.5-flash"
    assert flash.context_length == 1048576
    assert flash.capabilities == frozenset({"completion", "thinking"})
    assert flash.details["displayName"] == "Gemini 2.5 Flash"
    assert embedding.capabilities == frozenset({"embedding"})


def test_decode_models_round_trip() -> None:
    listing = encode_model_list([CHAT, EMBED, BOTH], {})
    decoded = decode_models(orjson.loads(orjson.dumps(listing)))
    assert [(m.name, m.capabilities, m.context_length) for m in decoded] == [
        ("qwen3:8b", frozenset({"completion", "thinking"}), 40960),
        ("nomic-embed-text", frozenset({"embedding"}), None),
        ("smol", frozenset({"completion", "embedding"}), None),
    ]


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ([], "the body"),
        ({"models": {}}, "models"),
        ({"models": [{"displayName": "x"}]}, "models.0.name"),
    ],
)
def test_decode_models_malformed(body: object, named: str) -> None:
    with pytest.raises(BackendProtocolError, match=named):
        decode_models(body)


VECTORS = EmbedResponse(model="smol", embeddings=((0.5, -1.0), (2.0, 0.25)), input_tokens=4)


def test_embed_responses() -> None:
    assert encode_embed_response(VECTORS) == {"embedding": {"values": [0.5, -1.0]}}
    batch = encode_batch_embed_response(VECTORS)
    assert batch == {"embeddings": [{"values": [0.5, -1.0]}, {"values": [2.0, 0.25]}]}
    decoded = decode_batch_embed_response(batch, model="smol")
    assert decoded.embeddings == VECTORS.embeddings
    assert decoded.model == "smol"
    with pytest.raises(InternalError):
        encode_embed_response(EmbedResponse(model="smol", embeddings=()))


def test_decode_batch_embed_reads_usage() -> None:
    body = {"embeddings": [{"values": [1, 2]}], "usageMetadata": {"promptTokenCount": 3}}
    decoded = decode_batch_embed_response(body)
    assert decoded.embeddings == ((1.0, 2.0),)
    assert decoded.input_tokens == 3


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ("x", "the body"),
        ({}, "embeddings"),
        ({"embeddings": ["x"]}, "embeddings.0"),
        ({"embeddings": [{"values": ["a"]}]}, "embeddings.0.values"),
        ({"embeddings": [{"values": [True]}]}, "embeddings.0.values"),
    ],
)
def test_decode_batch_embed_malformed(body: object, named: str) -> None:
    with pytest.raises(BackendProtocolError, match=named):
        decode_batch_embed_response(body)


# -- the google-genai SDK's client ---------------------------------------------------------


def sdk_client(answer: Callable[[httpx.Request], Any]) -> genai.Client:
    def reply(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json=answer(request))

    return genai.Client(
        api_key="test-key",
        http_options=genai_types.HttpOptions(
            base_url="http://127.0.0.1:9",
            httpx_client=httpx.Client(transport=httpx.MockTransport(reply)),
        ),
    )


def test_sdk_lists_every_page_and_gets_one_model() -> None:
    def answer(request: httpx.Request) -> Any:
        if request.url.path.endswith("/models"):
            return encode_model_list(MANY, dict(request.url.params))
        return encode_model(CHAT)

    client = sdk_client(answer)
    listed = list(client.models.list(config={"page_size": 3}))
    assert [model.name for model in listed] == [f"models/{info.name}" for info in MANY]
    got = client.models.get(model="qwen3:8b")
    assert got.name == "models/qwen3:8b"
    assert got.input_token_limit == 40960
    assert got.supported_actions == ["generateContent", "streamGenerateContent", "countTokens"]


def test_sdk_embed_content_reads_the_batch_reply() -> None:
    client = sdk_client(lambda request: encode_batch_embed_response(VECTORS))
    result = client.models.embed_content(model="smol", contents=["a", "b"])
    assert result.embeddings is not None
    assert [embedding.values for embedding in result.embeddings] == [[0.5, -1.0], [2.0, 0.25]]
