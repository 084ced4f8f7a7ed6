"""Gemini request decoding: what Gemini CLI and the google-genai SDKs send, mapped onto
the core. Refused bodies and the error body are in test_request_errors.py."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from llmbridge.core.errors import (
    InvalidRequestError,
)
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
from llmbridge.dialects.gemini.request import (
    decode_batch_embed_request,
    decode_chat_request,
    decode_count_tokens_request,
    decode_embed_request,
)
from tests.dialects.gemini.bodies import (
    CAPTURED,
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


@pytest.mark.parametrize(
    ("response", "content"),
    [
        # @ai-sdk/google (and OpenCode over it): {name: <the function>, content: <output>}
        ({"name": "f", "content": "3 files"}, "3 files"),
        ({"name": "f", "content": {"files": ["a"]}}, '{"files":["a"]}'),
        ({"name": "f", "content": ["a", "b"]}, '["a","b"]'),
        # Google ADK (a non-dict return) and agno: {result: <output>}
        ({"result": "sunny"}, "sunny"),
        ({"result": 21.5}, "21.5"),
        ({"result": {"temp": 21}}, '{"temp":21}'),
        ({"result": None}, "null"),
        # Strands: {output: [{text}|{json}, ...]}
        ({"output": [{"text": "sunny"}]}, "sunny"),
        ({"output": [{"text": "a"}, {"json": {"b": 1}}, {"text": "c"}]}, 'a\n{"b":1}\nc'),
    ],
)
def test_client_wrappers_are_taken_off(response: dict[str, Any], content: str) -> None:
    req = decode(body(user({"text": "go"}), model(call("f")), user(result("f", response))))
    assert req.messages[2].parts == (ToolResultPart("call_1", content, name="f"),)


@pytest.mark.parametrize(
    "response",
    [
        {"name": "other", "content": "x"},  # not this function's name
        {"name": "f", "content": "x", "status": "ok"},  # another key too
        {"result": "x", "status": "ok"},
        {"content": "x", "isError": False},  # an MCP result, not a wrapper
        {"output": [{"text": "a"}, {"image": {"format": "png"}}]},  # media in it
        {"output": [{"text": "a", "extra": 1}]},
        {"output": []},
        {"output": ["a"]},
    ],
)
def test_objects_that_only_look_like_wrappers_stay_json(response: dict[str, Any]) -> None:
    req = decode(body(user({"text": "go"}), model(call("f")), user(result("f", response))))
    (part,) = req.messages[2].parts
    assert isinstance(part, ToolResultPart) and json.loads(part.content) == response


def test_an_error_key_marks_the_result_an_error_wrapped_or_not() -> None:
    errors: list[dict[str, Any]] = [{"error": "boom"}, {"error": {"code": 2}, "result": None}]
    contents = [user({"text": "go"}), model(call("f"), call("f"))]
    contents.append(user(*(result("f", e) for e in errors)))
    req = decode(body(*contents))
    first, second = (m.parts[0] for m in req.messages[2:4])
    assert isinstance(first, ToolResultPart) and (first.content, first.is_error) == ("boom", True)
    assert isinstance(second, ToolResultPart) and second.is_error
    assert json.loads(second.content) == errors[1]


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


def test_a_minimal_level_is_low_effort_and_rides_along_for_gemini() -> None:
    req = decode(body(generationConfig={"thinkingConfig": {"thinkingLevel": "minimal"}}))
    assert req.thinking == ThinkingConfig(enabled=True, effort="low")
    # No core effort says MINIMAL: a Gemini model that takes levels gets it as asked.
    assert req.provider_details == {
        "gemini": {"include_thoughts": False, "thinking_level": "MINIMAL"}
    }


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
