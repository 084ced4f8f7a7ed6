"""Gemini request decoding: what Gemini CLI and the google-genai SDKs send, mapped onto
the core, and bad bodies answered with a 400 naming the field."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from llmbridge.core.errors import (
    InvalidRequestError,
    LLMBridgeError,
    NotFoundError,
    RateLimitError,
    UnsupportedFeatureError,
)
from llmbridge.core.limits import RequestLimits
from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolChoice,
    ToolResultPart,
)
from llmbridge.core.request import GenerationParams, ResponseFormat, ThinkingConfig
from llmbridge.dialects.gemini.errors import error_body, status_for_http
from llmbridge.dialects.gemini.request import (
    decode_batch_embed_request,
    decode_chat_request,
    decode_count_tokens_request,
    decode_embed_request,
)

FIXTURES = Path(__file__).parents[2] / "fixtures" / "gemini"
CAPTURED = FIXTURES / "request_gemini_cli_0_61_0_stream.json"
"""Gemini CLI 0.61.0's request as captured (shared/reference/captured/)."""
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-").decode()


def user(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "user", "parts": list(parts)}


def model(*parts: dict[str, Any]) -> dict[str, Any]:
    return {"role": "model", "parts": list(parts)}


def body(*contents: dict[str, Any], **fields: Any) -> dict[str, Any]:
    return {"contents": list(contents) or [user({"text": "Hello"})], **fields}


def decode(payload: dict[str, Any], *, stream: bool = False) -> Any:
    return decode_chat_request(payload, model="gemini-2.5-flash", stream=stream)


def call(name: str, args: dict[str, Any] | None = None, **extra: Any) -> dict[str, Any]:
    return {"functionCall": {"name": name, "args": args or {}, **extra}}


def result(name: str, response: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"functionResponse": {"name": name, "response": response, **extra}}


# -- the captured Gemini CLI request ---------------------------------------------------


def test_captured_gemini_cli_request_decodes() -> None:
    wire = json.loads(CAPTURED.read_text())
    req = decode_chat_request(wire, model="gemini-2.5-pro", stream=True)
    assert req.model == "gemini-2.5-pro"
    assert req.stream is True
    system, turn = req.messages
    assert system.role == "system"
    assert system.text == wire["systemInstruction"]["parts"][0]["text"]
    assert turn.role == "user"
    assert turn.parts == tuple(TextPart(p["text"]) for p in wire["contents"][0]["parts"])
    declarations = wire["tools"][0]["functionDeclarations"]
    assert [t.name for t in req.tools] == [d["name"] for d in declarations]
    assert [t.input_schema for t in req.tools] == [d["parametersJsonSchema"] for d in declarations]
    assert [t.description for t in req.tools] == [d["description"] for d in declarations]
    assert req.params == GenerationParams(temperature=1.0, top_p=0.95, top_k=64)
    assert req.thinking == ThinkingConfig(enabled=True)
    assert req.provider_details == {"gemini": {"include_thoughts": True}}
    assert req.tool_choice is None
    assert req.response_format is None


# -- turns and parts ---------------------------------------------------------------------


def test_minimal_body() -> None:
    req = decode(body())
    assert req.messages == (Message(role="user", parts=(TextPart("Hello"),)),)
    assert req.params == GenerationParams()
    assert req.thinking is None
    assert req.provider_details is None
    assert req.stream is False


def test_roles_and_a_content_without_role_is_the_user() -> None:
    req = decode(body({"parts": [{"text": "a"}]}, model({"text": "b"}), user({"text": "c"})))
    assert [(m.role, m.text) for m in req.messages] == [
        ("user", "a"),
        ("assistant", "b"),
        ("user", "c"),
    ]


def test_system_instruction_parts_joined_in_any_role_and_snake_case() -> None:
    instruction = {"role": "system", "parts": [{"text": "Be brief."}, {"text": "Be kind."}]}
    for key in ("systemInstruction", "system_instruction"):
        req = decode(body(**{key: instruction}))
        assert req.messages[0] == Message(role="system", parts=(TextPart("Be brief.\n\nBe kind."),))


def test_empty_system_instruction_is_no_message() -> None:
    req = decode(body(systemInstruction={"parts": []}))
    assert [m.role for m in req.messages] == ["user"]


def test_function_results_become_tool_messages_before_the_users_text() -> None:
    req = decode(
        body(
            user({"text": "Weather in Paris and Rome?"}),
            model(call("weather", {"city": "Paris"}), call("weather", {"city": "Rome"})),
            user(
                {"text": "also hurry"},
                result("weather", {"output": "sunny"}),
                result("weather", {"output": "rain"}),
            ),
        )
    )
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "tool", "user"]
    assistant, first, second, last = req.messages[1:]
    assert assistant.parts == (
        ToolCallPart(id="call_1", name="weather", arguments={"city": "Paris"}),
        ToolCallPart(id="call_2", name="weather", arguments={"city": "Rome"}),
    )
    assert first.parts == (ToolResultPart("call_1", "sunny", name="weather"),)
    assert second.parts == (ToolResultPart("call_2", "rain", name="weather"),)
    assert last.parts == (TextPart("also hurry"),)
    assert req.provider_details is None  # the client sent no ids


def test_results_without_ids_match_the_first_unanswered_call_of_their_name() -> None:
    req = decode(
        body(
            user({"text": "go"}),
            model(call("ls"), call("cat"), call("ls")),
            user(
                result("ls", {"output": "1"}),
                result("ls", {"output": "2"}),
                result("cat", {"output": "3"}),
            ),
        )
    )
    calls = {c.id: c.name for c in req.messages[1].tool_calls}
    assert calls == {"call_1": "ls", "call_2": "cat", "call_3": "ls"}
    answered = [m.parts[0] for m in req.messages[2:]]
    assert [(r.tool_call_id, r.content) for r in answered] == [
        ("call_1", "1"),
        ("call_3", "2"),
        ("call_2", "3"),
    ]


def test_ids_sent_by_the_client_are_kept_and_matched_by_id() -> None:
    req = decode(
        body(
            user({"text": "go"}),
            model(call("ls", id="a1"), call("ls", id="b2")),
            user(
                result("ls", {"output": "second"}, id="b2"),
                result("ls", {"output": "first"}, id="a1"),
            ),
        )
    )
    assert [c.id for c in req.messages[1].tool_calls] == ["a1", "b2"]
    assert [(m.parts[0].tool_call_id, m.parts[0].content) for m in req.messages[2:]] == [  # type: ignore[union-attr]
        ("b2", "second"),
        ("a1", "first"),
    ]
    assert req.provider_details == {"gemini": {"call_ids": True}}


def test_synthetic_ids_never_reuse_an_id_the_client_sent() -> None:
    req = decode(
        body(
            user({"text": "go"}),
            model(call("a", id="call_1"), call("b")),
            user(result("a", {"output": "x"}, id="call_1"), result("b", {"output": "y"})),
        )
    )
    ids = [c.id for c in req.messages[1].tool_calls]
    assert ids[0] == "call_1"
    assert ids[1] != "call_1"
    assert req.messages[3].parts[0].tool_call_id == ids[1]  # type: ignore[union-attr]


def test_a_result_for_a_call_not_in_the_history_keeps_its_id_or_gets_a_fresh_one() -> None:
    req = decode(
        body(user(result("ls", {"output": "x"}, id="gone"), result("ls", {"output": "y"})))
    )
    first, second = (m.parts[0] for m in req.messages)
    assert first.tool_call_id == "gone"  # type: ignore[union-attr]
    assert second.tool_call_id.startswith("call_")  # type: ignore[union-attr]


def test_results_in_function_and_tool_roles_from_older_clients() -> None:
    for role in ("function", "tool"):
        req = decode(
            body(
                user({"text": "go"}),
                model(call("ls")),
                {"role": role, "parts": [result("ls", {"output": "x"})]},
            )
        )
        assert req.messages[2] == Message(
            role="tool", parts=(ToolResultPart("call_1", "x", name="ls"),)
        )


@pytest.mark.parametrize(
    ("response", "content", "is_error"),
    [
        ({"output": "done"}, "done", False),
        ({"content": "done"}, "done", False),
        ({"error": "boom"}, "boom", True),
        ({"error": {"code": 2}}, '{"error":{"code":2}}', True),
        ({"files": ["a", "b"], "count": 2}, '{"files":["a","b"],"count":2}', False),
        ({"output": 3}, '{"output":3}', False),
        ({}, "", False),
    ],
)
def test_function_response_content(response: dict[str, Any], content: str, is_error: bool) -> None:
    req = decode(body(user({"text": "go"}), model(call("f")), user(result("f", response))))
    assert req.messages[2].parts == (ToolResultPart("call_1", content, is_error, name="f"),)


def test_function_response_without_response_is_empty() -> None:
    req = decode(body(user({"functionResponse": {"name": "f"}})))
    assert req.messages[0].parts[0].content == ""  # type: ignore[union-attr]


def test_media_a_function_returned_follows_in_the_user_turn() -> None:
    image = {"inlineData": {"mimeType": "image/png", "data": PNG}}
    req = decode(
        body(
            user({"text": "look"}),
            model(call("screenshot")),
            user(result("screenshot", {"output": "here"}, parts=[image])),
        )
    )
    assert [m.role for m in req.messages] == ["user", "assistant", "tool", "user"]
    assert req.messages[3].parts == (ImagePart(data=PNG, media_type="image/png"),)


def test_thought_signature_on_a_function_call_is_a_thinking_part_before_it() -> None:
    req = decode(
        body(
            user({"text": "go"}),
            model({**call("ls"), "thoughtSignature": "c2ln"}, call("cat")),
            user(result("ls", {"output": "1"}), result("cat", {"output": "2"})),
        )
    )
    assert req.messages[1].parts == (
        ThinkingPart("", signature="c2ln", provider="gemini"),
        ToolCallPart(id="call_1", name="ls"),
        ToolCallPart(id="call_2", name="cat"),
    )


def test_thought_part_text_and_its_signature_are_one_thinking_part() -> None:
    req = decode(
        body(
            user({"text": "go"}),
            model(
                {"text": "Let me think.", "thought": True, "thoughtSignature": "c2ln"},
                {"text": "Answer."},
            ),
        )
    )
    assert req.messages[1].parts == (
        ThinkingPart("Let me think.", signature="c2ln", provider="gemini"),
        TextPart("Answer."),
    )


def test_unsigned_thought_claims_no_provider_and_signed_text_keeps_its_text() -> None:
    req = decode(
        body(
            user({"text": "go"}),
            model(
                {"text": "hmm", "thought": True}, {"text": "Answer.", "thoughtSignature": "c2ln"}
            ),
        )
    )
    assert req.messages[1].parts == (
        ThinkingPart("hmm"),
        ThinkingPart("", signature="c2ln", provider="gemini"),
        TextPart("Answer."),
    )


def test_signature_on_an_empty_last_part_is_kept_alone() -> None:
    req = decode(
        body(user({"text": "go"}), model({"text": "Hi."}, {"text": "", "thoughtSignature": "c2ln"}))
    )
    assert req.messages[1].parts == (
        TextPart("Hi."),
        ThinkingPart("", signature="c2ln", provider="gemini"),
    )


def test_thought_parts_in_a_user_turn_are_dropped() -> None:
    req = decode(body(user({"text": "x", "thought": True}, {"text": "y"})))
    assert req.messages == (Message(role="user", parts=(TextPart("y"),)),)


def test_model_turn_of_only_empty_text_is_no_message() -> None:
    req = decode(body(user({"text": "a"}), model({"text": ""}), user({"text": "b"})))
    assert [m.role for m in req.messages] == ["user", "user"]


def test_inline_images_text_and_file_data() -> None:
    text = base64.b64encode("héllo".encode()).decode()
    req = decode(
        body(
            user(
                {"inlineData": {"mimeType": "image/png", "data": PNG}},
                {"inline_data": {"mime_type": "text/plain", "data": text}},
                {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x.test/a.jpg"}},
                {"fileData": {"fileUri": "https://x.test/b.png"}},
            )
        )
    )
    assert req.messages[0].parts == (
        ImagePart(data=PNG, media_type="image/png"),
        TextPart("héllo"),
        ImagePart(url="https://x.test/a.jpg", media_type="image/jpeg"),
        ImagePart(url="https://x.test/b.png", media_type="image/png"),
    )


def test_part_metadata_is_ignored() -> None:
    req = decode(
        body(user({"text": "a", "videoMetadata": {"startOffset": "1s"}, "partMetadata": {}}))
    )
    assert req.messages[0].parts == (TextPart("a"),)


# -- tools -------------------------------------------------------------------------------


def test_tool_schemas_json_schema_openapi_or_none() -> None:
    tools = [
        {
            "functionDeclarations": [
                {"name": "a", "description": "A", "parametersJsonSchema": {"type": "object"}},
                {
                    "name": "b",
                    "parameters": {"type": "OBJECT", "properties": {"x": {"type": "STRING"}}},
                },
                {"name": "c"},
                {"name": "d", "response": {"type": "STRING"}, "behavior": "BLOCKING"},
            ]
        },
        {"function_declarations": [{"name": "e", "parameters_json_schema": {"type": "object"}}]},
    ]
    req = decode(body(tools=tools))
    assert [(t.name, t.description, t.input_schema) for t in req.tools] == [
        ("a", "A", {"type": "object"}),
        ("b", "", {"type": "object", "properties": {"x": {"type": "string"}}}),
        ("c", "", {"type": "object", "properties": {}}),
        ("d", "", {"type": "object", "properties": {}}),
        ("e", "", {"type": "object"}),
    ]
    assert req.tools[3].provider_details == {
        "gemini": {"response": {"type": "STRING"}, "behavior": "BLOCKING"}
    }


def test_an_empty_tool_entry_is_no_tool() -> None:
    assert decode(body(tools=[{}])).tools == ()


TOOLS = [{"functionDeclarations": [{"name": n} for n in ("ls", "cat", "rm")]}]


@pytest.mark.parametrize(
    ("config", "choice", "names"),
    [
        ({"mode": "AUTO"}, ToolChoice("auto"), ["ls", "cat", "rm"]),
        ({"mode": "any"}, ToolChoice("any"), ["ls", "cat", "rm"]),
        ({"mode": "NONE"}, ToolChoice("none"), ["ls", "cat", "rm"]),
        ({"mode": "VALIDATED"}, ToolChoice("auto"), ["ls", "cat", "rm"]),
        ({"mode": "MODE_UNSPECIFIED"}, ToolChoice("auto"), ["ls", "cat", "rm"]),
        ({}, ToolChoice("auto"), ["ls", "cat", "rm"]),
        (
            {"mode": "ANY", "allowedFunctionNames": ["cat"]},
            ToolChoice("tool", "cat"),
            ["ls", "cat", "rm"],
        ),
        ({"mode": "ANY", "allowedFunctionNames": ["cat", "rm"]}, ToolChoice("any"), ["cat", "rm"]),
        ({"mode": "AUTO", "allowedFunctionNames": ["ls"]}, ToolChoice("auto"), ["ls"]),
        ({"mode": "NONE", "allowedFunctionNames": ["ls"]}, ToolChoice("none"), ["ls", "cat", "rm"]),
    ],
)
def test_function_calling_config(
    config: dict[str, Any], choice: ToolChoice, names: list[str]
) -> None:
    req = decode(body(tools=TOOLS, toolConfig={"functionCallingConfig": config}))
    assert req.tool_choice == choice
    assert [t.name for t in req.tools] == names


def test_tool_config_without_function_calling_config_is_no_choice() -> None:
    assert decode(body(tools=TOOLS, toolConfig={})).tool_choice is None


# -- generation settings ---------------------------------------------------------------


def test_generation_config_parameters() -> None:
    config = {
        "temperature": 0.3,
        "topP": 0.8,
        "topK": 40.0,
        "maxOutputTokens": 256,
        "stopSequences": ["END"],
        "seed": 7,
        "presencePenalty": 0.5,
        "frequencyPenalty": -0.5,
        "candidateCount": 1,
    }
    req = decode(body(generationConfig=config))
    assert req.params == GenerationParams(
        max_tokens=256,
        temperature=0.3,
        top_p=0.8,
        top_k=40,
        stop=("END",),
        seed=7,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
    )


def test_snake_case_generation_config() -> None:
    req = decode(body(generation_config={"max_output_tokens": 9, "top_k": 3}))
    assert req.params == GenerationParams(max_tokens=9, top_k=3)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        ({"responseMimeType": "application/json"}, ResponseFormat("json")),
        ({"responseMimeType": "text/plain"}, None),
        (
            {"responseMimeType": "application/json", "responseJsonSchema": {"type": "object"}},
            ResponseFormat("json_schema", {"type": "object"}),
        ),
        (
            {"responseMimeType": "application/json", "responseSchema": {"type": "OBJECT"}},
            ResponseFormat("json_schema", {"type": "object"}),
        ),
    ],
)
def test_response_format(config: dict[str, Any], expected: ResponseFormat | None) -> None:
    assert decode(body(generationConfig=config)).response_format == expected


def test_response_format_names_the_field_that_carried_it() -> None:
    fields = {
        "responseSchema": "generationConfig.responseSchema",
        "responseJsonSchema": "generationConfig.responseJsonSchema",
    }
    for key, param in fields.items():
        config = {"responseMimeType": "application/json", key: {"type": "object"}}
        fmt = decode(body(generationConfig=config)).response_format
        assert fmt is not None
        assert fmt.param == param
    fmt = decode(body(generationConfig={"responseMimeType": "application/json"})).response_format
    assert fmt is not None
    assert fmt.param == "generationConfig.responseMimeType"


@pytest.mark.parametrize(
    ("thinking", "expected", "include"),
    [
        ({"thinkingBudget": 0}, ThinkingConfig(enabled=False), False),
        ({"thinkingBudget": 0, "includeThoughts": True}, ThinkingConfig(enabled=False), True),
        ({"thinkingBudget": -1}, ThinkingConfig(enabled=True), False),
        ({"thinkingBudget": 2048}, ThinkingConfig(enabled=True, budget_tokens=2048), False),
        ({"thinkingLevel": "high"}, ThinkingConfig(enabled=True, effort="high"), False),
        ({"thinkingLevel": "LOW"}, ThinkingConfig(enabled=True, effort="low"), False),
        ({"thinkingLevel": "minimal"}, ThinkingConfig(enabled=True, effort="low"), False),
        (
            {"thinkingLevel": "MEDIUM", "includeThoughts": True},
            ThinkingConfig(effort="medium"),
            True,
        ),
        ({"includeThoughts": True}, ThinkingConfig(enabled=True), True),
        ({"includeThoughts": False}, None, False),
        ({}, None, False),
    ],
)
def test_thinking_config(
    thinking: dict[str, Any], expected: ThinkingConfig | None, include: bool
) -> None:
    req = decode(body(generationConfig={"thinkingConfig": thinking}))
    assert req.thinking == expected
    assert req.provider_details == {"gemini": {"include_thoughts": include}}


def test_no_thinking_config_is_no_thinking() -> None:
    req = decode(body(generationConfig={"temperature": 1}))
    assert req.thinking is None
    assert req.provider_details is None


def test_unknown_fields_and_safety_settings_are_carried() -> None:
    safety = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]
    req = decode(
        body(
            safetySettings=safety,
            labels={"team": "a"},
            generationConfig={"responseLogprobs": True, "temperature": 0.1},
        )
    )
    assert req.provider_details == {
        "gemini": {
            "safetySettings": safety,
            "labels": {"team": "a"},
            "generationConfig": {"responseLogprobs": True},
        }
    }


def test_text_modality_is_fine() -> None:
    assert (
        decode(body(generationConfig={"responseModalities": ["text"]})).params == GenerationParams()
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


SMALL = RequestLimits(max_messages=3, max_tools=2, max_parts_per_message=2)


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


# -- countTokens -------------------------------------------------------------------------


def test_count_tokens_with_contents() -> None:
    req = decode_count_tokens_request({"contents": [user({"text": "count me"})]}, model="m")
    assert req.model == "m"
    assert req.messages == (Message(role="user", parts=(TextPart("count me"),)),)
    assert req.stream is False


def test_count_tokens_with_a_whole_request() -> None:
    inner = body(
        user({"text": "count me"}),
        systemInstruction={"parts": [{"text": "sys"}]},
        tools=TOOLS,
        model="models/m",
    )
    req = decode_count_tokens_request({"generateContentRequest": inner}, model="m")
    assert [m.role for m in req.messages] == ["system", "user"]
    assert [t.name for t in req.tools] == ["ls", "cat", "rm"]


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({}, "contents"),
        ({"contents": []}, "contents"),
        (
            {"generateContentRequest": {"contents": [{"role": "x", "parts": [{"text": "a"}]}]}},
            "generateContentRequest.contents.0.role",
        ),
        (
            {"generateContentRequest": {"contents": [{"parts": [{"text": 1}]}]}},
            "generateContentRequest.contents.0.parts.0.text",
        ),
        ({"generateContentRequest": {}}, "generateContentRequest.contents"),
        (
            {"generateContentRequest": body(cachedContent="c/1")},
            "generateContentRequest.cachedContent",
        ),
    ],
)
def test_count_tokens_bad_bodies(payload: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_count_tokens_request(payload, model="m")
    assert caught.value.param == param


def test_count_tokens_limits_apply_inside_a_whole_request() -> None:
    inner = body(*[user({"text": "x"})] * 4)
    with pytest.raises(InvalidRequestError) as caught:
        decode_count_tokens_request({"generateContentRequest": inner}, SMALL, model="m")
    assert caught.value.param == "generateContentRequest.contents"


# -- embeddings --------------------------------------------------------------------------


def test_embed_content() -> None:
    req = decode_embed_request(
        {"content": {"parts": [{"text": "a"}, {"text": "b"}]}, "taskType": "RETRIEVAL_QUERY"},
        model="embed",
    )
    assert (req.model, req.inputs, req.dimensions) == ("embed", ("a\nb",), None)


def test_batch_embed_contents() -> None:
    requests = [
        {"model": "models/embed", "content": {"parts": [{"text": t}]}, "outputDimensionality": 8}
        for t in ("one", "two")
    ]
    req = decode_batch_embed_request({"requests": requests}, model="embed")
    assert (req.model, req.inputs, req.dimensions) == ("embed", ("one", "two"), 8)


@pytest.mark.parametrize(
    ("payload", "param"),
    [
        ({"requests": []}, "requests"),
        ({}, "requests"),
        (
            {"requests": [{"model": "models/other", "content": {"parts": [{"text": "a"}]}}]},
            "requests.0.model",
        ),
        (
            {
                "requests": [
                    {"content": {"parts": [{"text": "a"}]}, "outputDimensionality": 8},
                    {"content": {"parts": [{"text": "b"}]}},
                ]
            },
            "requests.1.outputDimensionality",
        ),
        (
            {
                "requests": [
                    {"content": {"parts": [{"inlineData": {"mimeType": "image/png", "data": PNG}}]}}
                ]
            },
            "requests.0.content.parts.0",
        ),
        ({"requests": [{"content": {}}]}, "requests.0.content.parts"),
    ],
)
def test_batch_embed_bad_bodies(payload: dict[str, Any], param: str) -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_batch_embed_request(payload, model="embed")
    assert caught.value.param == param


def test_embed_bad_body() -> None:
    with pytest.raises(InvalidRequestError) as caught:
        decode_embed_request({"content": "text"}, model="embed")
    assert caught.value.param == "content"


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
