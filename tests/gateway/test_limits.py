"""Request bounds and input checks: every finding is a 4xx in the caller's
dialect, naming the field and, for a limit, its setting and value; never a 500.

Bodies go over loopback as raw bytes where a client library would refuse to build
them (``1e999``, 2**64, 300 levels of nesting), and through the official clients
where it would not, against a gateway on the scripted backend with small limits (so
each limit is reached with a small body), and one on an Ollama backend (a fake
upstream) for the data the JSON encoder could not write back.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import orjson
import pytest

from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer, anthropic_client, openai_client, running_gateway
from tests.fuzz.shapes import assert_error_shape
from tests.upstream import Canned, FakeUpstream

LIMITS = {
    "max_messages": 20,
    "max_tools": 4,
    "max_parts_per_message": 5,
    "max_json_depth": 32,
    "max_json_items": 2000,
    "offload_bytes": 1024,  # most bodies here go through the worker thread too
}
USER = [{"role": "user", "content": "hi"}]
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n" + b"\0" * 16).decode()
PATHS = {Dialect.OLLAMA: "/api/chat", Dialect.OPENAI: "/v1/chat/completions"}
PATHS[Dialect.ANTHROPIC] = "/v1/messages"


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend) -> Iterator[RunningServer]:  # type: ignore[override]
    with running_gateway({"scripted": scripted}, server={"limits": LIMITS}) as server:
        yield server


def post(gateway: RunningServer, path: str, body: bytes | dict[str, Any]) -> httpx.Response:
    # The standard library writes what orjson refuses to (300 levels of nesting).
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    headers = {"content-type": "application/json"}
    return httpx.post(gateway.url + path, content=raw, headers=headers, timeout=30)


def body_for(dialect: Dialect, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"model": "scripted", "messages": USER}
    if dialect is Dialect.ANTHROPIC:
        base["max_tokens"] = 8
    if dialect is Dialect.OLLAMA:
        base["stream"] = False
    return {**base, **fields}


def error(dialect: Dialect, response: httpx.Response, status: int = 400) -> str:
    assert response.status_code == status, response.text
    return assert_error_shape(dialect, status, response.content, response.headers)


def nested(levels: int) -> dict[str, Any]:
    """A JSON Schema of ``levels`` schemas, each inside the last one's ``properties``
    (``2 * levels - 1`` levels of JSON)."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


# -- count limits: 400 naming the field, the setting and its value --------------------


@pytest.mark.parametrize("dialect", list(PATHS))
def test_too_many_messages_tools_and_parts(gateway: RunningServer, dialect: Dialect) -> None:
    path = PATHS[dialect]
    message = error(dialect, post(gateway, path, body_for(dialect, messages=USER * 21)))
    assert "21 messages" in message and "server.limits.max_messages" in message
    assert "20" in message

    tool = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    if dialect is Dialect.ANTHROPIC:
        tool = {"name": "f", "input_schema": {"type": "object"}}
    message = error(dialect, post(gateway, path, body_for(dialect, tools=[tool] * 5)))
    assert "5 tools" in message and "server.limits.max_tools" in message

    response = post(gateway, path, body_for(dialect, messages=[crowded(dialect, 6)]))
    message = error(dialect, response)
    assert "6 " in message and "server.limits.max_parts_per_message" in message
    if dialect is Dialect.OPENAI:
        assert response.json()["error"]["param"] == "messages.0"

    # At the limits, all is well.
    fine = body_for(dialect, messages=[*USER * 19, crowded(dialect, 5)], tools=[tool] * 4)
    assert post(gateway, path, fine).status_code == 200


def crowded(dialect: Dialect, parts: int) -> dict[str, Any]:
    """A user message with ``parts`` parts."""
    if dialect is Dialect.OLLAMA:
        return {"role": "user", "content": "look", "images": [PNG] * parts}
    return {"role": "user", "content": [{"type": "text", "text": "x"}] * parts}


@pytest.mark.parametrize("dialect", list(PATHS))
def test_deep_json_is_a_400_naming_the_field(gateway: RunningServer, dialect: Dialect) -> None:
    if dialect is Dialect.ANTHROPIC:
        tools = [{"name": "f", "input_schema": nested(40)}]
        field = "tools.0.input_schema"
    else:
        tools = [{"type": "function", "function": {"name": "f", "parameters": nested(40)}}]
        field = "tools.0.function.parameters"
    message = error(dialect, post(gateway, PATHS[dialect], body_for(dialect, tools=tools)))
    assert field in message and "server.limits.max_json_depth" in message and "32" in message


def test_too_many_json_items_is_a_400_before_parsing(gateway: RunningServer) -> None:
    body = body_for(Dialect.OPENAI, metadata={f"k{i}": "v" for i in range(1500)})
    message = error(Dialect.OPENAI, post(gateway, "/v1/chat/completions", body))
    assert "server.limits.max_json_items" in message and "2000" in message


def test_a_body_over_max_body_bytes_is_a_413_naming_the_setting(scripted: ScriptedBackend) -> None:
    with running_gateway({"scripted": scripted}, server={"max_body_bytes": 4096}) as gateway:
        big = body_for(Dialect.ANTHROPIC, system="x" * 5000)
        message = error(Dialect.ANTHROPIC, post(gateway, "/v1/messages", big), 413)
    assert "server.max_body_bytes" in message and "4096" in message


def test_a_large_body_is_decoded_off_the_event_loop_with_the_same_result(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    # Over offload_bytes: parsed and decoded in a worker thread, validated in slices.
    messages = [{"role": "user", "content": "x" * 200}, {"role": "assistant", "content": "y"}] * 9
    response = post(gateway, "/v1/chat/completions", body_for(Dialect.OPENAI, messages=messages))
    assert response.status_code == 200, response.text
    assert len(scripted.requests[-1].messages) == 18
    bad = [*messages[:17], {"role": "user", "content": 5}]
    response = post(gateway, "/v1/chat/completions", body_for(Dialect.OPENAI, messages=bad))
    error(Dialect.OPENAI, response)
    assert response.json()["error"]["param"] == "messages.17.content"


# -- numbers the encoder cannot write -------------------------------------------------


@pytest.mark.parametrize("dialect", list(PATHS))
def test_an_infinite_number_is_a_400_naming_the_field(
    gateway: RunningServer, dialect: Dialect
) -> None:
    raw = orjson.dumps(body_for(dialect, temperature=0.5)).replace(b"0.5", b"1e999")
    if dialect is Dialect.OLLAMA:
        raw = orjson.dumps(body_for(dialect, options={"temperature": 0.5})).replace(
            b"0.5", b"1e999"
        )
    message = error(dialect, post(gateway, PATHS[dialect], raw))
    assert "temperature" in message and "not a finite number" in message


def test_an_ollama_option_beyond_64_bits_is_a_400(gateway: RunningServer) -> None:
    # orjson reads 2**64 as the float 1.8e19; Ollama's whole-number options made it an
    # int again, which the encoder then refused: a 500 before.
    raw = orjson.dumps(body_for(Dialect.OLLAMA, options={"num_ctx": 1})).replace(
        b'"num_ctx":1', b'"num_ctx":18446744073709551616'
    )
    message = error(Dialect.OLLAMA, post(gateway, "/api/chat", raw))
    assert message.startswith("options.num_ctx:") and "64-bit" in message


@pytest.fixture(scope="module")
def ollama_gateway() -> Iterator[tuple[FakeUpstream, RunningServer]]:
    fake = FakeUpstream()
    with RunningServer(fake.app) as upstream:
        backend = OllamaBackend("up", upstream.url, http=HTTPSettings(connect=1.0, read=5.0))
        with running_gateway({"up": backend}, resilience={"retries": 0}) as gateway:
            yield fake, gateway


def test_pass_through_json_at_the_depth_limit_reaches_the_backend(
    ollama_gateway: tuple[FakeUpstream, RunningServer],
) -> None:
    # Before: 300 levels in a tool schema, a `format` or tool-call arguments passed
    # decoding and failed in the encoder (orjson stops at 254): a 500 with a traceback.
    fake, gateway = ollama_gateway
    tools = [{"type": "function", "function": {"name": "f", "parameters": nested(300)}}]
    message = error(
        Dialect.OLLAMA, post(gateway, "/api/chat", body_for(Dialect.OLLAMA, tools=tools))
    )
    assert "tools.0.function.parameters" in message and "max_json_depth" in message
    arguments = json.dumps(nested(200))
    call = {"function": {"name": "f", "arguments": arguments}}
    history = [*USER, {"role": "assistant", "tool_calls": [call]}]
    message = error(
        Dialect.OLLAMA, post(gateway, "/api/chat", body_for(Dialect.OLLAMA, messages=history))
    )
    assert message.startswith("messages.1.tool_calls.0.function.arguments")
    # The deepest body the default limit (128) allows is written out and answered.
    done = {"model": "m", "message": {"role": "assistant", "content": "ok"}, "done": True}
    fake.queue.append(Canned(chunks=[orjson.dumps(done) + b"\n"]))
    deepest = body_for(Dialect.OLLAMA, format=nested(64))  # 128 levels with the body
    response = post(gateway, "/api/chat", deepest)
    assert response.status_code == 200, response.text
    assert b'"format"' in fake.bodies[-1]


# -- parameters and content the real APIs reject, in their words -------------------


@pytest.mark.parametrize(
    ("fields", "param", "wording"),
    [
        (
            {"max_tokens": -1},
            "max_tokens",
            "Invalid 'max_tokens': integer below minimum value. "
            "Expected a value >= 1, but got -1 instead.",
        ),
        ({"max_tokens": 0}, "max_tokens", "Expected a value >= 1, but got 0 instead."),
        ({"max_completion_tokens": 0}, "max_completion_tokens", "integer below minimum value"),
        (
            {"temperature": -5},
            "temperature",
            "Invalid 'temperature': decimal below minimum "
            "value. Expected a value >= 0, but got -5 instead.",
        ),
        ({"temperature": 2.5}, "temperature", "decimal above maximum value"),
        ({"top_p": 1.5}, "top_p", "Expected a value <= 1"),
        ({"presence_penalty": -3}, "presence_penalty", "Expected a value >= -2"),
        ({"model": ""}, "model", "you must provide a model parameter"),
        ({"messages": []}, "messages", "Invalid 'messages': empty array."),
    ],
)
def test_openai_rejects_what_openai_rejects(
    gateway: RunningServer, fields: dict[str, Any], param: str, wording: str
) -> None:
    client = openai_client(gateway.url)
    request: dict[str, Any] = {"model": "scripted", "messages": USER, **fields}
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(**request)
    assert caught.value.status_code == 400
    assert wording in caught.value.message
    assert caught.value.param == param


@pytest.mark.parametrize(
    ("fields", "wording"),
    [
        ({"max_tokens": 0}, "max_tokens: Input should be greater than or equal to 1"),
        ({"messages": []}, "messages: at least one message is required"),
        ({"extra_body": {"temperature": -5}}, "temperature: Input should be greater than"),
    ],
)
def test_anthropic_rejects_what_anthropic_rejects(
    gateway: RunningServer, fields: dict[str, Any], wording: str
) -> None:
    client = anthropic_client(gateway.url)
    request: dict[str, Any] = {"model": "scripted", "max_tokens": 8, "messages": USER, **fields}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(**request)
    assert caught.value.status_code == 400
    assert wording in caught.value.message


BAD = "bm90IGEgcG5n!"  # base64 of "not a png", then a character base64 has not


@pytest.mark.parametrize(
    ("dialect", "content", "wording"),
    [
        (
            Dialect.OLLAMA,
            {"role": "user", "content": "look", "images": [PNG, BAD]},
            "messages.0.images.1: illegal base64 data at input byte 12",
        ),
        (
            Dialect.OPENAI,
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "look"},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{BAD}"}},
                ],
            },
            "Invalid 'messages.0.content.1.image_url.url': Invalid base64 image_url.",
        ),
        (
            Dialect.ANTHROPIC,
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t",
                        "content": [
                            {
                                "type": "image",
                                "source": {
                                    "type": "base64",
                                    "media_type": "image/png",
                                    "data": BAD,
                                },
                            }
                        ],
                    }
                ],
            },
            "messages.0.content.0.content.0.source.data: invalid base64 data",
        ),
    ],
)
def test_invalid_base64_images_are_a_400_naming_the_part(
    gateway: RunningServer, dialect: Dialect, content: dict[str, Any], wording: str
) -> None:
    message = error(dialect, post(gateway, PATHS[dialect], body_for(dialect, messages=[content])))
    assert message == wording
    valid = orjson.loads(orjson.dumps(content).replace(BAD.encode(), PNG.encode()))
    assert post(gateway, PATHS[dialect], body_for(dialect, messages=[valid])).status_code == 200


def test_generate_images_are_checked_too(gateway: RunningServer) -> None:
    body = {"model": "scripted", "prompt": "look", "images": ["abc"], "stream": False}
    message = error(Dialect.OLLAMA, post(gateway, "/api/generate", body))
    assert message == "images.0: illegal base64 data at input byte 3"


def test_an_ollama_image_that_only_looks_like_a_data_url_is_a_400(gateway: RunningServer) -> None:
    # "data:" without ";base64," is no data URL: checked whole, as the decoder reads it,
    # never as an empty payload that passes.
    content = {"role": "user", "content": "look", "images": ["data:not base64 !!"]}
    message = error(
        Dialect.OLLAMA, post(gateway, "/api/chat", body_for(Dialect.OLLAMA, messages=[content]))
    )
    assert message == "messages.0.images.0: illegal base64 data at input byte 4"
    url = {"role": "user", "content": "look", "images": [f"data:image/png;base64,{PNG}"]}
    assert post(gateway, "/api/chat", body_for(Dialect.OLLAMA, messages=[url])).status_code == 200
