"""The ``opencode`` backend: a chat request as one OpenCode prompt (the body sent to
``prompt_async``) and model names resolved to OpenCode providers."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from llmbridge.backends.opencode.prompt import (
    ModelRef,
    parse_model_ref,
    prompt_body,
    resolve_model,
)
from llmbridge.backends.opencode.server import AGENT_NAME
from llmbridge.core.errors import (
    InvalidRequestError,
)
from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest, ResponseFormat

MODEL = ModelRef("p", "m")


def user(text: str) -> Message:
    return Message(role="user", parts=(TextPart(text),))


def request(*messages: Message, **kwargs: Any) -> ChatRequest:
    return ChatRequest(model="anything", messages=messages, **kwargs)


# -- prompt_body ------------------------------------------------------------------------


def test_a_single_user_message_is_sent_as_its_text_alone() -> None:
    body = prompt_body(request(user("What is 2+2?")), MODEL, None)
    assert body == {
        "model": {"providerID": "p", "modelID": "m"},
        "tools": {"*": False},
        "parts": [{"type": "text", "text": "What is 2+2?"}],
    }


def test_a_conversation_becomes_a_labelled_transcript() -> None:
    body = prompt_body(
        request(
            user("Hi"),
            Message(role="assistant", parts=(TextPart("Hello! How can I help?"),)),
            user("Name a colour."),
        ),
        MODEL,
        None,
    )
    assert [p["type"] for p in body["parts"]] == ["text"]
    assert body["parts"][0]["text"] == (
        "The conversation so far, oldest first:\n\n"
        "User: Hi\n\n"
        "Assistant: Hello! How can I help?\n\n"
        "User: Name a colour.\n\n"
        "Reply to the user's last message as the assistant."
    )


def test_a_conversation_ending_with_the_assistant_asks_for_a_continuation() -> None:
    body = prompt_body(
        request(user("Count to three"), Message(role="assistant", parts=(TextPart("One,"),))),
        MODEL,
        None,
    )
    assert body["parts"][0]["text"].endswith(
        "Assistant: One,\n\nContinue the assistant's last message."
    )


def test_system_messages_are_joined_into_system() -> None:
    body = prompt_body(
        request(
            Message(role="system", parts=(TextPart("Be brief."),)),
            Message(role="system", parts=(TextPart("Answer in French."),)),
            user("Hello"),
        ),
        MODEL,
        None,
    )
    assert body["system"] == "Be brief.\n\nAnswer in French."
    assert body["parts"][0]["text"] == "Hello"  # system text never enters the message


def test_no_system_key_without_system_text() -> None:
    assert "system" not in prompt_body(request(user("x")), MODEL, None)


def test_tool_calls_and_results_are_rendered_as_text() -> None:
    body = prompt_body(
        request(
            user("Weather in Paris?"),
            Message(
                role="assistant",
                parts=(ToolCallPart(id="call_1", name="get_weather", arguments={"city": "Paris"}),),
            ),
            Message(role="tool", parts=(ToolResultPart(tool_call_id="call_1", content="sunny"),)),
            Message(
                role="tool",
                parts=(
                    ToolResultPart(tool_call_id="call_2", content="boom", is_error=True, name="x"),
                ),
            ),
        ),
        MODEL,
        None,
    )
    text = body["parts"][0]["text"]
    assert 'Assistant: [called get_weather with {"city":"Paris"}]' in text
    # The result is named after its call when it carries no name of its own.
    assert "Tool: [get_weather result: sunny]" in text
    assert "Tool: [x error: boom]" in text
    assert text.endswith("Reply to the user's last message as the assistant.")


def test_thinking_is_omitted() -> None:
    body = prompt_body(
        request(
            user("Hi"),
            Message(
                role="assistant",
                parts=(ThinkingPart("secret scratch work"), TextPart("Hello")),
            ),
            user("Again"),
        ),
        MODEL,
        None,
    )
    text = body["parts"][0]["text"]
    assert "secret scratch work" not in text
    assert "Assistant: Hello" in text


def test_json_response_format_becomes_a_system_instruction() -> None:
    body = prompt_body(
        request(
            Message(role="system", parts=(TextPart("You list fruit."),)),
            user("Three fruit"),
            response_format=ResponseFormat(type="json"),
        ),
        MODEL,
        None,
    )
    first, instruction = body["system"].split("\n\n")
    assert first == "You list fruit."
    assert "JSON object only" in instruction


def test_json_schema_response_format_puts_the_schema_in_system() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    body = prompt_body(
        request(user("A name"), response_format=ResponseFormat(type="json_schema", schema=schema)),
        MODEL,
        None,
    )
    assert "JSON object only" in body["system"]
    assert orjson.dumps(schema).decode() in body["system"]


def test_text_response_format_adds_nothing() -> None:
    body = prompt_body(request(user("x"), response_format=ResponseFormat(type="text")), MODEL, None)
    assert "system" not in body


def test_an_image_becomes_a_file_part_with_a_data_url() -> None:
    body = prompt_body(
        request(
            Message(
                role="user",
                parts=(TextPart("What is this?"), ImagePart(data="QUJD", media_type="image/jpeg")),
            )
        ),
        MODEL,
        None,
    )
    assert body["parts"][1:] == [
        {"type": "file", "mime": "image/jpeg", "url": "data:image/jpeg;base64,QUJD"}
    ]
    assert body["parts"][0]["text"].startswith("What is this?")


def test_an_image_url_is_passed_as_is() -> None:
    url = "https://example.invalid/cat.png"
    body = prompt_body(
        request(
            Message(role="user", parts=(TextPart("?"), ImagePart(url=url, media_type="image/png")))
        ),
        MODEL,
        None,
    )
    assert body["parts"][1] == {"type": "file", "mime": "image/png", "url": url}


@pytest.mark.parametrize(
    "req",
    [
        request(user("plain")),
        request(
            user("with tools"),
            tools=(ToolDefinition(name="get_weather", description="Weather"),),
        ),
        request(user("a"), Message(role="assistant", parts=(TextPart("b"),)), user("c")),
        request(user("json"), response_format=ResponseFormat(type="json")),
    ],
    ids=["plain", "tools-offered", "multi-turn", "json"],
)
@pytest.mark.parametrize("agent", [None, "llmbridge"])
def test_opencode_tools_are_always_off(req: ChatRequest, agent: str | None) -> None:
    body = prompt_body(req, MODEL, agent)
    assert body["tools"] == {"*": False}
    # Offered tools are emulated above this backend: none reach OpenCode as tools.
    assert "get_weather" not in orjson.dumps(body).decode()


def test_agent_is_sent_only_when_given() -> None:
    assert prompt_body(request(user("x")), MODEL, AGENT_NAME)["agent"] == AGENT_NAME
    assert "agent" not in prompt_body(request(user("x")), MODEL, None)
    assert "agent" not in prompt_body(request(user("x")), MODEL, "")


@pytest.mark.parametrize(
    "messages",
    [(), (Message(role="system", parts=(TextPart("Only a system prompt."),)),)],
    ids=["empty", "system-only"],
)
def test_a_request_without_a_user_message_is_invalid(messages: tuple[Message, ...]) -> None:
    with pytest.raises(InvalidRequestError) as info:
        prompt_body(request(*messages), MODEL, None)
    assert info.value.status_code == 400
    assert info.value.param == "messages"


# -- model names --------------------------------------------------------------------------


def test_a_known_provider_model_is_taken() -> None:
    assert resolve_model("openrouter/llama-3", None, {"openrouter", "p"}) == ModelRef(
        "openrouter", "llama-3"
    )


def test_an_unknown_provider_falls_back_to_the_default() -> None:
    assert resolve_model("other/model", MODEL, {"p"}) == MODEL
    assert resolve_model("homeassistant", MODEL, {"p"}) == MODEL


def test_with_providers_unknown_a_provider_model_is_taken_as_is() -> None:
    assert resolve_model("x/y", None, None) == ModelRef("x", "y")
    assert resolve_model("x/y", MODEL, None) == ModelRef("x", "y")


@pytest.mark.parametrize("providers", [{"p"}, set(), None])
def test_no_default_model_is_an_invalid_request_naming_the_flag(
    providers: set[str] | None,
) -> None:
    with pytest.raises(InvalidRequestError) as info:
        resolve_model("homeassistant", None, providers)
    assert "--opencode-model" in info.value.message
    assert "'homeassistant'" in info.value.message
    assert info.value.param == "model"


def test_parse_model_ref() -> None:
    assert parse_model_ref("p/m") == ModelRef("p", "m")
    # Model ids may hold slashes themselves (openrouter/meta-llama/...).
    assert parse_model_ref("openrouter/meta/llama") == ModelRef("openrouter", "meta/llama")
    assert str(ModelRef("p", "m")) == "p/m"


@pytest.mark.parametrize("bad", ["model", "p/", "/m", "", "/"])
def test_parse_model_ref_rejects_what_is_not_provider_slash_model(bad: str) -> None:
    with pytest.raises(ValueError, match="PROVIDER/MODEL"):
        parse_model_ref(bad)
