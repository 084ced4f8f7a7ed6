"""Google's Interactions API on the embedded model, through the official ``google-genai``
SDK (``client.interactions``) against the zero-configuration gateway: create, stream,
continue, get, delete and a function call with its ``function_result`` turn.

What the model says depends on the CPU and the llama.cpp build: a greedy answer must
equal what the same model gives called directly (``tests/embedded_reference.py``), and
everything else asserted is the protocol: statuses, the event grammar, non-empty
text, usage counts."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from google import genai
from google.genai import _interactions as interaction_errors
from google.genai import types

from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from tests.conftest import RunningServer
from tests.embedded_reference import direct_reply

pytestmark = pytest.mark.embedded

QUESTION = "What is the capital of France?"
CONFIG = {"temperature": 0, "max_output_tokens": 12, "seed": 1}
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def zero_config() -> Iterator[RunningServer]:
    """Exactly what `llmbridge serve` builds with no flags and no file."""
    with RunningServer(create_app(load_config(None))) as server:
        yield server


@pytest.fixture
def client(zero_config: RunningServer) -> Iterator[genai.Client]:
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=zero_config.url))
    yield client
    client.close()


def test_create_stream_continue_get_and_delete(client: genai.Client) -> None:
    expected = direct_reply([{"role": "user", "content": QUESTION}], max_tokens=12)
    first = client.interactions.create(model="smollm2", input=QUESTION, generation_config=CONFIG)
    assert first.output_text == expected.text
    assert first.status in ("completed", "incomplete")
    usage = first.usage
    assert usage is not None and usage.total_input_tokens and usage.total_output_tokens
    assert usage.total_output_tokens == expected.completion_tokens

    events = list(
        client.interactions.create(
            model="smollm2", input=QUESTION, generation_config=CONFIG, stream=True
        )
    )
    kinds = [event.event_type for event in events]
    assert kinds[0] == "interaction.created" and kinds[-1] == "interaction.completed"
    assert kinds[1] == "step.start" and kinds[-2] == "step.stop"
    text = "".join(
        e.delta.text for e in events if e.event_type == "step.delta" and e.delta.type == "text"
    )
    assert text == expected.text

    assert first.id is not None
    second = client.interactions.create(
        model="smollm2",
        input="And of Italy?",
        previous_interaction_id=first.id,
        generation_config=CONFIG,
    )
    assert second.output_text and second.output_text.strip()
    assert second.usage is not None and second.usage.total_input_tokens
    # The continued prompt holds the first turn: it is longer.
    assert second.usage.total_input_tokens > usage.total_input_tokens

    assert client.interactions.get(first.id).output_text == first.output_text
    client.interactions.delete(first.id)
    with pytest.raises(interaction_errors.NotFoundError):
        client.interactions.get(first.id)


def test_a_function_call_and_its_result(client: genai.Client) -> None:
    """Tools are emulated (the model has none of its own); a forced choice with one
    tool leaves the emulation's grammar only a call, so a call comes back whatever the
    model's wording; what it answers to the result is the model's choice."""
    called = client.interactions.create(
        model="smollm2",
        input="What is the weather in Oslo? Use the tool.",
        tools=[WEATHER],
        generation_config={"temperature": 0, "max_output_tokens": 128, "tool_choice": "any"},
    )
    assert called.status == "requires_action"
    calls = [step for step in called.steps or () if step.type == "function_call"]
    assert [call.name for call in calls] == ["get_weather"]
    assert isinstance(calls[0].arguments, dict)
    answered = client.interactions.create(
        model="smollm2",
        previous_interaction_id=called.id,
        input=[{"type": "function_result", "call_id": calls[0].id, "result": "sunny"}],
        tools=[WEATHER],
        generation_config={"temperature": 0, "max_output_tokens": 64},
    )
    assert answered.status in ("completed", "incomplete", "requires_action")
    assert answered.steps
    assert answered.usage is not None and answered.usage.total_output_tokens
    if answered.status == "completed":
        assert answered.output_text and answered.output_text.strip()
