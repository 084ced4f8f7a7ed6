"""Per-call resolution: the model (call, runtime config, default), tools and parameters."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.client import (
    INVALID_CONFIG,
    AdapterError,
    ErrorCode,
    OllamaAdapter,
    RuntimeProviderConfig,
)
from llmbridge.core.messages import ToolChoice, ToolDefinition
from llmbridge.core.request import GenerationParams, ThinkingConfig
from tests.client.conftest import collect, kinds


@pytest.fixture
async def adapter() -> AsyncIterator[OllamaAdapter]:
    async with OllamaAdapter.from_backend(ScriptedBackend(), default_model="default-m") as a:
        yield a


@pytest.fixture
async def no_default() -> AsyncIterator[OllamaAdapter]:
    async with OllamaAdapter.from_backend(ScriptedBackend()) as a:
        yield a


def test_model_resolution_order(adapter: OllamaAdapter) -> None:
    runtime = RuntimeProviderConfig(model_id="runtime-m")
    assert adapter.build_request("Hi", model="call-m", provider_config=runtime).model == "call-m"
    assert adapter.build_request("Hi", provider_config=runtime).model == "runtime-m"
    assert adapter.build_request("Hi", provider_config={"modelId": "camel-m"}).model == "camel-m"
    assert adapter.build_request("Hi").model == "default-m"


async def test_no_model_is_invalid_config(no_default: OllamaAdapter) -> None:
    events = await collect(no_default.call("Hi"))
    assert kinds(events) == ["ERROR", "END"]
    err = events[0].error
    assert err is not None and err.code is INVALID_CONFIG and err.code == "INVALID_CONFIG"
    with pytest.raises(AdapterError) as caught:
        await no_default.chat("Hi")
    assert caught.value.code is ErrorCode.INVALID_CONFIG
    with pytest.raises(AdapterError):
        no_default.stream("Hi")


async def test_a_model_from_the_call_or_runtime_config_is_enough(
    no_default: OllamaAdapter,
) -> None:
    events = await collect(no_default.call("Hi", model="m"))
    assert kinds(events)[-2:] == ["METADATA", "END"]
    events = await collect(no_default.call("Hi", provider_config={"model_id": "m"}))
    assert kinds(events)[-2:] == ["METADATA", "END"]


def test_parameters_map_onto_generation_params(adapter: OllamaAdapter) -> None:
    request = adapter.build_request(
        "Hi",
        temperature=0,
        max_tokens=12,
        top_p=0.9,
        top_k=40,
        stop="\n",
        seed=7,
        frequency_penalty=0.5,
        presence_penalty=0.25,
        repeat_penalty=1.1,
        mirostat=2,
    )
    assert request.params == GenerationParams(
        max_tokens=12,
        temperature=0.0,
        top_p=0.9,
        top_k=40,
        stop=("\n",),
        seed=7,
        frequency_penalty=0.5,
        presence_penalty=0.25,
        repeat_penalty=1.1,
        extra={"mirostat": 2},
    )
    assert request.provider_details == {"openai": {"mirostat": 2}, "anthropic": {"mirostat": 2}}
    assert request.stream is True


def test_runtime_adapter_options_are_defaults_the_call_overrides(adapter: OllamaAdapter) -> None:
    runtime = {"adapter_options": {"temperature": 0.7, "max_output_tokens": 5}}
    request = adapter.build_request("Hi", provider_config=runtime, temperature=0.1)
    assert (request.params.temperature, request.params.max_tokens) == (0.1, 5)


def test_tool_choice_and_thinking(adapter: OllamaAdapter) -> None:
    request = adapter.build_request("Hi", tool_choice="required", thinking="high")
    assert request.tool_choice == ToolChoice("any")
    assert request.thinking == ThinkingConfig(effort="high")
    request = adapter.build_request("Hi", tool_choice="get_weather", thinking=False)
    assert request.tool_choice == ToolChoice("tool", name="get_weather")
    assert request.thinking == ThinkingConfig(enabled=False)


@pytest.mark.parametrize(
    "params",
    [
        {"temperature": "hot"},
        {"max_tokens": 1.5},
        {"stop": [1, 2]},
        {"tool_choice": 3},
        {"thinking": "very"},
        {"provider_config": "fast"},
        {"provider_config": {"model_id": 3}},
    ],
)
async def test_bad_parameters_are_invalid_config(
    adapter: OllamaAdapter, params: dict[str, Any]
) -> None:
    events = await collect(adapter.call("Hi", **params))
    assert kinds(events) == ["ERROR", "END"]
    assert events[0].error is not None and events[0].error.code is INVALID_CONFIG


def test_tools_take_the_neutral_schema(adapter: OllamaAdapter) -> None:
    schema = {"type": "object", "properties": {"q": {"type": "string"}}}
    request = adapter.build_request(
        "Hi",
        tools=[
            {"name": "search", "description": "Search the web", "input_schema": schema},
            {"name": "art_style", "inputSchema": schema},
            ToolDefinition("neutral"),
        ],
    )
    assert request.tools == (
        ToolDefinition("search", "Search the web", schema),
        ToolDefinition("art_style", "", schema),
        ToolDefinition("neutral"),
    )


@pytest.mark.parametrize(
    "tool", [{"description": "no name", "input_schema": {}}, {"name": "no_schema"}, "search"]
)
async def test_malformed_tool_schema_is_invalid_config(
    adapter: OllamaAdapter, tool: object
) -> None:
    events = await collect(adapter.call("Hi", tools=[tool]))  # type: ignore[list-item]
    assert kinds(events) == ["ERROR", "END"]
    assert events[0].error is not None and events[0].error.code is INVALID_CONFIG


def test_ollama_base_url_gets_v1_once() -> None:
    for url in ("http://h:11434", "http://h:11434/", "http://h:11434/v1", "http://h:11434/v1/"):
        adapter = OllamaAdapter(url)
        assert adapter.base_url == "http://h:11434/v1"
    assert OllamaAdapter().base_url == "http://localhost:11434/v1"
