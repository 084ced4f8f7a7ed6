"""Function results as the clients wrap them, sent with the official ``google-genai``
client to the gateway on loopback: the backend (scripted, which records the request it
was given) receives the result itself, not the client's wrapper as JSON text.

The shapes are the ones these clients send (docs/GEMINI.md, "Function results"):
@ai-sdk/google and OpenCode ``{"name", "content"}``, Google ADK and agno
``{"result"}``, Strands ``{"output": [{"text"}]}``, Gemini CLI ``{"output"}``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from google import genai
from google.genai import types

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ToolCallPart, ToolResultPart
from tests.conftest import RunningServer

NO_AUTO_CALLS = types.AutomaticFunctionCallingConfig(disable=True)
WEATHER = types.FunctionDeclaration(
    name="get_weather",
    description="The weather in a city.",
    parameters_json_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
)
CONFIG = types.GenerateContentConfig(
    automatic_function_calling=NO_AUTO_CALLS,
    tools=[types.Tool(function_declarations=[WEATHER])],
)


@pytest.fixture
def client(gateway: RunningServer) -> Iterator[genai.Client]:
    client = genai.Client(api_key="x", http_options=types.HttpOptions(base_url=gateway.url))
    yield client
    client.close()


@pytest.mark.parametrize(
    ("response", "seen"),
    [
        pytest.param({"name": "get_weather", "content": "sunny"}, "sunny", id="ai-sdk"),
        pytest.param(
            {"name": "get_weather", "content": {"temp": 21}}, '{"temp":21}', id="ai-sdk-json"
        ),
        pytest.param({"result": "sunny"}, "sunny", id="adk-agno"),
        pytest.param({"result": 21}, "21", id="adk-number"),
        pytest.param({"output": [{"text": "sunny"}]}, "sunny", id="strands"),
        pytest.param({"output": "sunny"}, "sunny", id="gemini-cli"),
        pytest.param(
            {"result": "sunny", "source": "met.no"},
            '{"result":"sunny","source":"met.no"}',
            id="other-keys-stay-json",
        ),
    ],
)
def test_the_backend_gets_the_result_not_the_wrapper(
    client: genai.Client, scripted: ScriptedBackend, response: dict[str, Any], seen: str
) -> None:
    question = types.Content(role="user", parts=[types.Part(text="weather in Oslo?")])
    asked = types.Content(
        role="model",
        parts=[types.Part.from_function_call(name="get_weather", args={"city": "Oslo"})],
    )
    answer = types.Part.from_function_response(name="get_weather", response=response)
    scripted.enqueue(Script(text=["Sunny."]))
    reply = client.models.generate_content(
        model="scripted",
        contents=[question, asked, types.Content(role="user", parts=[answer])],
        config=CONFIG,
    )
    assert reply.text == "Sunny."
    messages = scripted.requests[-1].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    (call,) = messages[1].parts
    (result,) = messages[2].parts
    assert isinstance(call, ToolCallPart) and isinstance(result, ToolResultPart)
    assert result.tool_call_id == call.id and result.name == "get_weather"
    assert (result.content, result.is_error) == (seen, False)


def test_an_error_reaches_the_backend_marked(
    client: genai.Client, scripted: ScriptedBackend
) -> None:
    question = types.Content(role="user", parts=[types.Part(text="weather in Oslo?")])
    asked = types.Content(
        role="model",
        parts=[types.Part.from_function_call(name="get_weather", args={"city": "Oslo"})],
    )
    failed = types.Part.from_function_response(
        name="get_weather", response={"error": "no such city"}
    )
    scripted.enqueue(Script(text=["Sorry."]))
    client.models.generate_content(
        model="scripted",
        contents=[question, asked, types.Content(role="user", parts=[failed])],
        config=CONFIG,
    )
    (result,) = scripted.requests[-1].messages[2].parts
    assert isinstance(result, ToolResultPart)
    assert (result.content, result.is_error) == ("no such city", True)
