"""The ``opencode`` backend's pure parts: the prompt body, model names, the event
translator (``Turn``), the spawned server's configuration, and the settings and flags
that create the backend.

Event dicts are in the shapes verified against OpenCode 1.18.33
(shared/reference/opencode-server.md); the real server is exercised end to end in
tests/e2e/test_opencode.py and a misbehaving one in test_opencode_faults.py.
"""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import orjson
import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from llmbridge.backends.opencode import OpenCodeBackend, OpenCodeProvider, SpawnSettings
from llmbridge.backends.opencode.prompt import (
    ModelRef,
    parse_model_ref,
    prompt_body,
    resolve_model,
)
from llmbridge.backends.opencode.server import AGENT_NAME, basic_auth, server_config
from llmbridge.backends.opencode.turn import Turn, opencode_error
from llmbridge.cli import cli
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    ContextLengthError,
    InvalidRequestError,
    LLMBridgeError,
)
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    ResponseEnd,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
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
from llmbridge.core.response import StopReason
from llmbridge.gateway.app import build_backend
from llmbridge.gateway.config import (
    ConfigError,
    OpenCodeBackendConfig,
    ServerConfig,
    load_config,
)

MODEL = ModelRef("p", "m")
SID = "ses_1"


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


# -- Turn: OpenCode events as stream events ---------------------------------------------


def event(kind: str, **props: Any) -> dict[str, Any]:
    return {"id": f"evt_{kind}", "type": kind, "properties": props}


def message_updated(mid: str, role: str, **info: Any) -> dict[str, Any]:
    return event("message.updated", info={"id": mid, "sessionID": SID, "role": role, **info})


def part_updated(pid: str, mid: str, kind: str, **fields: Any) -> dict[str, Any]:
    part = {"id": pid, "sessionID": SID, "messageID": mid, "type": kind, **fields}
    return event("message.part.updated", part=part)


def delta(pid: str, mid: str, text: str) -> dict[str, Any]:
    return event(
        "message.part.delta", sessionID=SID, messageID=mid, partID=pid, field="text", delta=text
    )


def status(kind: str, **fields: Any) -> dict[str, Any]:
    return event("session.status", sessionID=SID, status={"type": kind, **fields})


def feed_all(turn: Turn, events: list[dict[str, Any]]) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    for item in events:
        out.extend(turn.feed(item))
    return out


def texts(events: list[StreamEvent]) -> list[str]:
    return [
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    ]


def thoughts(events: list[StreamEvent]) -> list[str]:
    return [
        e.delta.text
        for e in events
        if isinstance(e, PartDelta) and isinstance(e.delta, ThinkingDelta)
    ]


def prologue() -> list[dict[str, Any]]:
    """What OpenCode sends before the reply: the user's message and its text."""
    return [
        message_updated("msg_u", "user"),
        part_updated("prt_u", "msg_u", "text", text="Say hello"),
        status("busy"),
        message_updated("msg_a", "assistant", tokens={"input": 0, "output": 0}),
        part_updated("prt_s", "msg_a", "step-start"),
    ]


def test_text_deltas_stream_as_text_events() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_t", "msg_a", "text", text=""),
            delta("prt_t", "msg_a", "Hel"),
            delta("prt_t", "msg_a", "lo"),
            part_updated("prt_t", "msg_a", "text", text="Hello"),
            part_updated("prt_f", "msg_a", "step-finish", reason="stop"),
            message_updated("msg_a", "assistant", finish="stop"),
        ],
    )
    assert texts(out) == ["Hel", "lo"]  # the final part.updated repeats nothing
    assert turn.produced and not turn.done
    feed_all(turn, [status("idle")])
    assert turn.done and turn.failure is None
    end = turn.finish()
    assert isinstance(end[-1], ResponseEnd) and end[-1].stop_reason == StopReason.END_TURN
    assert [e.part for e in end if isinstance(e, PartEnd)] == [TextPart("Hello")]


def test_reasoning_streams_as_thinking() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_r", "msg_a", "reasoning", text=""),
            delta("prt_r", "msg_a", "Let me "),
            delta("prt_r", "msg_a", "think."),
            part_updated("prt_r", "msg_a", "reasoning", text="Let me think."),
            part_updated("prt_t", "msg_a", "text", text=""),
            delta("prt_t", "msg_a", "Hi"),
        ],
    )
    assert thoughts(out) == ["Let me ", "think."]
    assert texts(out) == ["Hi"]


def test_the_users_message_is_never_emitted() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            message_updated("msg_u", "user"),
            part_updated("prt_u", "msg_u", "text", text="Say hello"),
            delta("prt_u", "msg_u", "Say hello"),
        ],
    )
    assert out == [] and not turn.produced


def test_a_final_text_longer_than_its_deltas_sends_only_the_missing_tail() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_t", "msg_a", "text", text=""),
            delta("prt_t", "msg_a", "Hello"),
            part_updated("prt_t", "msg_a", "text", text="Hello, world"),
            part_updated("prt_t", "msg_a", "text", text="Hello, world"),
        ],
    )
    assert texts(out) == ["Hello", ", world"]


def test_a_provider_that_does_not_stream_still_yields_the_whole_text() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_t", "msg_a", "text", text="The whole reply."),
            status("idle"),
        ],
    )
    assert texts(out) == ["The whole reply."]
    assert turn.done


def test_a_delta_before_its_part_is_text() -> None:
    turn = Turn("oc")
    out = feed_all(turn, [*prologue(), delta("prt_t", "msg_a", "early")])
    assert texts(out) == ["early"]


def test_idle_twice_is_harmless() -> None:
    turn = Turn("oc")
    feed_all(turn, [*prologue(), part_updated("prt_t", "msg_a", "text", text="ok")])
    assert feed_all(turn, [status("idle"), event("session.idle", sessionID=SID)]) == []
    assert feed_all(turn, [status("idle"), event("session.idle", sessionID=SID)]) == []
    assert turn.done and turn.failure is None
    end = turn.finish()
    assert sum(isinstance(e, ResponseEnd) for e in end) == 1


def test_session_idle_alone_ends_the_turn() -> None:
    turn = Turn("oc")
    feed_all(turn, [event("session.idle", sessionID=SID)])
    assert turn.done


def test_busy_and_retry_do_not_end_the_turn_and_retry_is_remembered() -> None:
    turn = Turn("oc")
    feed_all(
        turn,
        [
            status("busy"),
            status("retry", attempt=2, message="Cannot connect to API", next=1700000000000),
        ],
    )
    assert not turn.done
    assert turn.retry_message == "Cannot connect to API"


def test_usage_is_summed_over_the_steps_of_a_turn() -> None:
    turn = Turn("oc")
    first = {"input": 100, "output": 10, "reasoning": 5, "cache": {"read": 40, "write": 8}}
    second = {"input": 130, "output": 20, "reasoning": 0, "cache": {"read": 60, "write": 0}}
    feed_all(
        turn,
        [
            message_updated("msg_1", "assistant", tokens=first, finish="tool-calls"),
            # The same message reported again (finish, then time.completed): not double-counted.
            message_updated("msg_1", "assistant", tokens=first, finish="tool-calls"),
            message_updated("msg_2", "assistant", tokens=second, finish="stop"),
            status("idle"),
        ],
    )
    usage = turn.usage()
    assert usage.input_tokens == 230
    assert usage.output_tokens == 35  # reasoning counts as output
    assert usage.cache_read_input_tokens == 100
    assert usage.cache_creation_input_tokens == 8
    assert turn.stop_reason() == StopReason.END_TURN  # the last step's finish


def test_usage_without_tokens_is_unknown() -> None:
    turn = Turn("oc")
    feed_all(turn, [message_updated("msg_1", "assistant")])
    usage = turn.usage()
    assert usage.input_tokens is None and usage.output_tokens is None


def test_finish_length_is_max_tokens() -> None:
    turn = Turn("oc")
    feed_all(turn, [message_updated("msg_1", "assistant", finish="length"), status("idle")])
    assert turn.failure is None
    assert turn.stop_reason() == StopReason.MAX_TOKENS


def test_output_length_error_is_max_tokens_not_a_failure() -> None:
    turn = Turn("oc")
    error = {"name": "MessageOutputLengthError", "data": {}}
    feed_all(turn, [message_updated("msg_1", "assistant", error=error), status("idle")])
    assert turn.failure is None
    assert turn.finish()[-1] == ResponseEnd(stop_reason=StopReason.MAX_TOKENS, usage=turn.usage())


def test_content_filter_finish() -> None:
    turn = Turn("oc")
    feed_all(turn, [message_updated("msg_1", "assistant", finish="content-filter")])
    assert turn.stop_reason() == StopReason.CONTENT_FILTER


def _api_error(status: int | None, retryable: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"message": "provider said no", "isRetryable": retryable}
    if status is not None:
        data["statusCode"] = status
    return {"name": "APIError", "data": data}


@pytest.mark.parametrize(
    ("status", "retryable", "mapped"),
    [(400, False, 400), (429, True, 429), (500, True, 502), (503, False, 503), (401, False, 401)],
)
def test_api_errors_keep_the_providers_status(status: int, retryable: bool, mapped: int) -> None:
    failure = opencode_error(_api_error(status, retryable), "oc")
    assert failure is not None
    assert isinstance(failure.error, BackendHTTPError)
    assert failure.error.backend_status == status
    assert failure.error.status_code == mapped
    assert failure.error.backend == "oc"
    assert failure.retryable is retryable
    assert "provider said no" in failure.error.message


def test_an_api_error_without_a_status_is_a_backend_error() -> None:
    failure = opencode_error(_api_error(None, True), "oc")
    assert failure is not None
    assert type(failure.error) is BackendError
    assert failure.error.status_code == 502
    assert failure.retryable
    assert "provider said no" in failure.error.message


@pytest.mark.parametrize(
    ("error", "cls", "status", "words"),
    [
        (
            {"name": "ContextOverflowError", "data": {"message": "too long by 300 tokens"}},
            ContextLengthError,
            400,
            "too long by 300 tokens",
        ),
        (
            {"name": "ProviderAuthError", "data": {"providerID": "gw", "message": "bad key"}},
            BackendError,
            502,
            "provider 'gw' rejected its credentials: bad key",
        ),
        (
            {"name": "MessageAbortedError", "data": {"message": "Aborted"}},
            BackendError,
            502,
            "aborted",
        ),
        (
            {"name": "UnknownError", "data": {"message": "kaput"}},
            BackendError,
            502,
            "UnknownError: kaput",
        ),
        (
            {"name": "ContentFilterError", "data": {"message": "filtered"}},
            BackendError,
            502,
            "ContentFilterError: filtered",
        ),
        ({"message": "no name at all"}, BackendError, 502, "UnknownError: no name at all"),
    ],
    ids=["context", "auth", "aborted", "unknown-error", "unknown-name", "nameless"],
)
def test_opencode_errors_map_to_gateway_errors(
    error: dict[str, Any], cls: type[LLMBridgeError], status: int, words: str
) -> None:
    failure = opencode_error(error, "oc")
    assert failure is not None
    assert type(failure.error) is cls
    assert failure.error.status_code == status
    assert words in failure.error.message
    assert not failure.retryable


@pytest.mark.parametrize("error", [None, "text", {"name": "MessageOutputLengthError"}])
def test_what_is_not_a_failure(error: Any) -> None:
    assert opencode_error(error, "oc") is None


def test_session_error_fails_and_ends_the_turn() -> None:
    turn = Turn("oc")
    feed_all(turn, [event("session.error", sessionID=SID, error=_api_error(400, False))])
    assert turn.done
    assert turn.failure is not None and isinstance(turn.failure.error, BackendHTTPError)


def test_an_assistant_message_error_is_the_failure_and_the_first_one_wins() -> None:
    turn = Turn("oc")
    feed_all(
        turn,
        [
            message_updated("msg_a", "assistant", error=_api_error(429, True)),
            event("session.error", sessionID=SID, error=_api_error(500, False)),
        ],
    )
    assert turn.failure is not None
    assert isinstance(turn.failure.error, BackendHTTPError)
    assert turn.failure.error.backend_status == 429 and turn.failure.retryable


def test_permission_and_question_requests_are_collected_to_reject() -> None:
    turn = Turn("oc")
    feed_all(
        turn,
        [
            event(
                "permission.asked",
                id="per_1",
                sessionID=SID,
                permission="bash",
                patterns=["*"],
                metadata={},
                always=[],
                tool={"messageID": "msg_a", "callID": "call_1"},
            ),
            event("question.asked", id="que_1", sessionID=SID, questions=[]),
        ],
    )
    assert turn.to_reject == [("permission", "per_1"), ("question", "que_1")]
    assert not turn.done


def test_a_tool_part_is_not_emitted() -> None:
    turn = Turn("oc")
    tool = part_updated(
        "prt_x",
        "msg_a",
        "tool",
        callID="call_1",
        tool="bash",
        state={"status": "pending", "input": {"command": "ls"}, "raw": ""},
    )
    assert feed_all(turn, [*prologue(), tool]) == []
    assert not turn.produced


@pytest.mark.parametrize(
    "junk",
    [
        {"type": "message.part.delta"},
        {"type": "message.part.updated", "properties": {"part": "x"}},
        {"type": "message.updated", "properties": {"info": {"role": "assistant"}}},
        {"type": "session.status", "properties": {"status": "idle"}},
        {"type": "server.heartbeat", "properties": {}},
        {"type": "message.part.delta", "properties": {"field": "text", "delta": 3}},
    ],
)
def test_malformed_events_are_ignored(junk: dict[str, Any]) -> None:
    turn = Turn("oc")
    assert turn.feed(junk) == []
    assert not turn.done and turn.failure is None


# -- the spawned server's configuration ------------------------------------------------


def test_server_config_makes_opencode_a_plain_llm() -> None:
    config = server_config(SpawnSettings())
    assert config["agent"] == {
        AGENT_NAME: {
            "mode": "primary",
            "prompt": config["agent"][AGENT_NAME]["prompt"],
            "tools": {"*": False},
            "permission": "deny",
        }
    }
    assert config["permission"] == "deny"
    assert config["autoupdate"] is False
    assert config["share"] == "disabled"
    assert config["plugin"] == [] and config["instructions"] == []
    assert "model" not in config and "provider" not in config


def test_server_config_providers_and_default_model() -> None:
    settings = SpawnSettings(
        default_model="local/big",
        providers={
            "local": OpenCodeProvider(
                base_url="http://127.0.0.1:9999/v1",
                models={"big": {"context": 32768, "output": 4096}, "small": {}},
                api_key="k",
                name="Local",
            ),
            "other": OpenCodeProvider(base_url="http://127.0.0.1:9998/v1"),
        },
    )
    config = server_config(settings)
    assert config["model"] == config["small_model"] == "local/big"
    assert config["provider"] == {
        "local": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Local",
            "options": {"baseURL": "http://127.0.0.1:9999/v1", "apiKey": "k"},
            "models": {"big": {"limit": {"context": 32768, "output": 4096}}, "small": {}},
        },
        "other": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "other",
            "options": {"baseURL": "http://127.0.0.1:9998/v1", "apiKey": "none"},
            "models": {},
        },
    }


def test_extra_config_is_deep_merged() -> None:
    extra = {
        "provider": {"mine": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": "u"}}},
        "agent": {AGENT_NAME: {"prompt": "Custom."}},
        "autoupdate": True,
        "username": "me",
    }
    settings = SpawnSettings(
        providers={"local": OpenCodeProvider(base_url="http://127.0.0.1:9999/v1")},
        extra_config=extra,
    )
    config = server_config(settings)
    assert set(config["provider"]) == {"local", "mine"}
    agent = config["agent"][AGENT_NAME]
    assert agent["prompt"] == "Custom."
    assert agent["tools"] == {"*": False} and agent["permission"] == "deny"
    assert config["autoupdate"] is True and config["username"] == "me"
    assert config["permission"] == "deny"
    assert extra["agent"] == {AGENT_NAME: {"prompt": "Custom."}}  # the input is untouched


def test_basic_auth() -> None:
    header = basic_auth("s3cret")["authorization"]
    scheme, token = header.split(" ")
    assert scheme == "Basic"
    assert base64.b64decode(token).decode() == "opencode:s3cret"
    assert base64.b64decode(basic_auth("pw", "me")["authorization"][6:]) == b"me:pw"
    assert basic_auth(None) == {} and basic_auth("") == {}


# -- settings, flags and construction ---------------------------------------------------


@pytest.mark.parametrize("model", ["nomodel", "p/", "/m"])
def test_opencode_config_rejects_a_model_without_provider_and_slash(model: str) -> None:
    with pytest.raises(ValidationError, match="PROVIDER/MODEL"):
        OpenCodeBackendConfig(type="opencode", model=model)


def test_opencode_config_defaults() -> None:
    config = OpenCodeBackendConfig(type="opencode", model="p/m")
    assert config.url is None and config.command == "opencode" and config.pool_size == 2


def test_opencode_url_flag_makes_it_the_default_backend() -> None:
    config = load_config(None, {"opencode_url": "http://127.0.0.1:4096"})
    assert config.default_backend == "opencode"
    backend = config.backends["opencode"]
    assert isinstance(backend, OpenCodeBackendConfig)
    assert backend.url == "http://127.0.0.1:4096" and backend.model is None


def test_opencode_flag_spawns_one_with_the_model() -> None:
    config = load_config(None, {"opencode": True, "opencode_model": "p/m"})
    assert config.default_backend == "opencode"
    backend = config.backends["opencode"]
    assert isinstance(backend, OpenCodeBackendConfig)
    assert backend.url is None and backend.model == "p/m"


def test_opencode_model_alone_needs_an_opencode_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--opencode-model needs an OpenCode backend"):
        load_config(None, {"opencode_model": "p/m"})
    other = tmp_path / "ollama.yaml"
    other.write_text("backends: {o: {type: ollama, url: 'http://127.0.0.1:11434'}}\n")
    with pytest.raises(ConfigError, match="--opencode-model needs an OpenCode backend"):
        load_config(other, {"opencode_model": "p/m"})


def test_opencode_model_sets_the_model_of_a_configured_opencode_backend(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "backends:\n"
        "  oc: {type: opencode, url: 'http://127.0.0.1:4096', model: old/model}\n"
        "  o: {type: ollama, url: 'http://127.0.0.1:11434'}\n"
    )
    config = load_config(path, {"opencode_model": "p/m"})
    backend = config.backends["oc"]
    assert isinstance(backend, OpenCodeBackendConfig) and backend.model == "p/m"


def test_a_bad_opencode_model_flag_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="PROVIDER/MODEL"):
        load_config(None, {"opencode": True, "opencode_model": "nomodel"})


def test_a_self_provider_points_at_the_gateway_with_its_first_key() -> None:
    config = OpenCodeBackendConfig.model_validate(
        {
            "type": "opencode",
            "model": "gw/scripted",
            "pool_size": 0,
            "providers": {
                "gw": {"url": "self", "models": {"scripted": {"context": 4096}}},
                "own": {"url": "self", "api_key": "explicit"},
                "far": {"url": "http://10.0.0.1:8000/v1", "api_key": "far-key"},
            },
        }
    )
    server = ServerConfig(host="0.0.0.0", port=12345, api_keys=("first", "second"))
    backend = build_backend("oc", config, server)
    assert isinstance(backend, OpenCodeBackend)
    spawn = backend.server.spawn
    assert spawn is not None and backend.server.spawned and backend.server.url is None
    assert spawn.default_model == "gw/scripted"
    assert spawn.providers["gw"] == OpenCodeProvider(
        base_url="http://127.0.0.1:12345/v1",
        models={"scripted": {"context": 4096}},
        api_key="first",
    )
    assert spawn.providers["own"].api_key == "explicit"
    assert spawn.providers["own"].base_url == "http://127.0.0.1:12345/v1"
    assert spawn.providers["far"] == OpenCodeProvider(
        base_url="http://10.0.0.1:8000/v1", api_key="far-key"
    )
    assert backend.pool.size == 0 and backend.native_tools is False


def test_a_self_provider_without_gateway_keys_has_none() -> None:
    config = OpenCodeBackendConfig.model_validate(
        {"type": "opencode", "providers": {"gw": {"url": "self"}}}
    )
    backend = build_backend("oc", config, ServerConfig(host="127.0.0.2", port=8080))
    assert isinstance(backend, OpenCodeBackend) and backend.server.spawn is not None
    provider = backend.server.spawn.providers["gw"]
    assert provider.base_url == "http://127.0.0.2:8080/v1" and provider.api_key is None


def test_a_url_backend_takes_its_password_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("OPENCODE_SERVER_PASSWORD", "from-env")
    config = OpenCodeBackendConfig(type="opencode", url="http://127.0.0.1:4096/")
    backend = build_backend("oc", config)
    assert isinstance(backend, OpenCodeBackend)
    assert not backend.server.spawned and backend.server.url == "http://127.0.0.1:4096"
    assert backend.server.headers == basic_auth("from-env")
    configured = OpenCodeBackendConfig(type="opencode", url="http://h:1", password="mine")
    chosen = build_backend("oc", configured)
    assert isinstance(chosen, OpenCodeBackend) and chosen.server.headers == basic_auth("mine")


@pytest.mark.parametrize("command", ["models", "serve"])
def test_cli_help_lists_the_opencode_flags(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    for flag in ("--opencode-url", "--opencode", "--opencode-model"):
        assert f"{flag} " in result.output or f"{flag}\n" in result.output, flag
