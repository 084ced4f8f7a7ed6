"""Gemini request encoding (the ``gemini`` backend's side): a golden body for a whole
conversation, each decision on its own, the google-genai SDK's own types reading what
we send, and a property test: decoding what we encode gives the request back."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolChoice,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import (
    ChatRequest,
    EmbedRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
)
from llmbridge.dialects.gemini.request import (
    decode_chat_request,
    encode_chat_request,
    encode_embed_request,
)
from llmbridge.dialects.gemini.thoughts import GEMINI

FIXTURES = Path(__file__).parents[2] / "fixtures" / "gemini"
PNG = base64.b64encode(b"\x89PNG\r\n\x1a\n-not-really-").decode()
SAFETY = [{"category": "HARM_CATEGORY_HARASSMENT", "threshold": "BLOCK_NONE"}]


def conversation() -> ChatRequest:
    """Everything the encoder decides in one request: system prompt, an image, tools,
    calls and results (one result without a name, one an error), thinking signed by this
    backend ("g"), by another Gemini backend and by Anthropic, params, a schema."""
    return ChatRequest(
        model="gemini-2.5-pro",
        messages=(
            Message(role="system", parts=(TextPart("You are terse."),)),
            Message(
                role="user",
                parts=(
                    TextPart("List the files, then read the README."),
                    ImagePart(data=PNG, media_type="image/png"),
                ),
            ),
            Message(
                role="assistant",
                parts=(
                    ThinkingPart(
                        "I should list.", signature=GEMINI.carry("g", "c2lnQQ=="), provider="gemini"
                    ),
                    TextPart("Looking."),
                    ThinkingPart(
                        "", signature=GEMINI.carry("other", "c2lnQg=="), provider="gemini"
                    ),
                    ToolCallPart(id="call_x1", name="ls", arguments={"path": "."}),
                    ThinkingPart("claude's", signature="anthropic-signature", provider="anthropic"),
                    ToolCallPart(id="toolu_9", name="read", arguments={"file": "README"}),
                ),
            ),
            Message(
                role="tool",
                parts=(ToolResultPart("call_x1", "README\nsrc", name="ls"),),
            ),
            Message(
                role="tool",
                parts=(ToolResultPart("toolu_9", "no such file", is_error=True),),
            ),
            Message(role="user", parts=(TextPart("Thanks."),)),
            Message(
                role="assistant",
                parts=(
                    TextPart("Done."),
                    ThinkingPart("", signature=GEMINI.carry("g", "c2lnQw=="), provider="gemini"),
                ),
            ),
            Message(role="user", parts=(TextPart("And now?"),)),
        ),
        stream=True,
        params=GenerationParams(
            max_tokens=512,
            temperature=0.2,
            top_p=0.9,
            top_k=20,
            min_p=0.05,
            stop=("END",),
            seed=3,
            presence_penalty=0.1,
            frequency_penalty=0.2,
        ),
        tools=(
            ToolDefinition(
                "ls",
                "List a directory.",
                {"type": "object", "properties": {"path": {"type": "string"}}},
            ),
            ToolDefinition(
                "read", "", {"type": "object", "properties": {"file": {"type": "string"}}}
            ),
        ),
        tool_choice=ToolChoice("tool", "read"),
        thinking=ThinkingConfig(effort="medium"),
        response_format=ResponseFormat("json_schema", {"type": "object"}),
        provider_details={
            "gemini": {
                "safetySettings": SAFETY,
                "include_thoughts": True,
                "call_ids": True,
                "generationConfig": {"responseLogprobs": True},
            }
        },
    )


def test_golden_conversation_body() -> None:
    body = encode_chat_request(conversation(), origin="g")
    golden = FIXTURES / "request_encode_conversation.json"
    assert body == json.loads(golden.read_text())


def test_golden_body_reads_as_the_sdks_own_types() -> None:
    # google-genai's pydantic types (camelCase aliases) parse every piece we send.
    from google.genai import types

    body = encode_chat_request(conversation(), origin="g")
    for content in body["contents"]:
        parsed = types.Content.model_validate(content)
        assert len(parsed.parts or []) == len(content["parts"])
    types.Content.model_validate(body["systemInstruction"])
    config = types.GenerationConfig.model_validate(body["generationConfig"])
    assert config.thinking_config is not None
    assert config.thinking_config.thinking_budget == 8192
    tool = types.Tool.model_validate(body["tools"][0])
    assert [d.name for d in tool.function_declarations or []] == ["ls", "read"]
    tool_config = types.ToolConfig.model_validate(body["toolConfig"])
    assert tool_config.function_calling_config is not None


def test_only_this_backends_signatures_go_back_on_the_next_part() -> None:
    body = encode_chat_request(conversation(), origin="g")
    first_model, second_model = (c for c in body["contents"] if c["role"] == "model")
    assert first_model["parts"] == [
        {"text": "Looking.", "thoughtSignature": "c2lnQQ=="},
        {"functionCall": {"name": "ls", "args": {"path": "."}}},
        {"functionCall": {"name": "read", "args": {"file": "README"}}},
    ]
    # A signature with nothing after it goes back on an empty text part, as Gemini sent it.
    assert second_model["parts"] == [
        {"text": "Done."},
        {"text": "", "thoughtSignature": "c2lnQw=="},
    ]


def test_without_an_origin_every_carried_gemini_signature_goes_back() -> None:
    body = encode_chat_request(conversation())
    first_model = next(c for c in body["contents"] if c["role"] == "model")
    signatures = [p.get("thoughtSignature") for p in first_model["parts"]]
    assert signatures == ["c2lnQQ==", "c2lnQg==", None]


def test_thought_text_is_never_sent() -> None:
    text = json.dumps(encode_chat_request(conversation(), origin="g"))
    assert "I should list." not in text
    assert "claude's" not in text
    assert '"thought"' not in text


def test_results_and_user_text_share_one_user_turn_results_first() -> None:
    body = encode_chat_request(conversation(), origin="g")
    results_turn = body["contents"][2]
    assert results_turn == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "ls", "response": {"output": "README\nsrc"}}},
            {"functionResponse": {"name": "read", "response": {"error": "no such file"}}},
            {"text": "Thanks."},
        ],
    }


def req(*messages: Message, **fields: Any) -> ChatRequest:
    return ChatRequest(
        model="m", messages=messages or (Message("user", (TextPart("hi"),)),), **fields
    )


@pytest.mark.parametrize(
    ("thinking", "expected"),
    [
        (ThinkingConfig(enabled=False), {"thinkingBudget": 0}),
        (ThinkingConfig(), {"includeThoughts": True, "thinkingBudget": -1}),
        (ThinkingConfig(budget_tokens=300), {"includeThoughts": True, "thinkingBudget": 300}),
        (ThinkingConfig(effort="low"), {"includeThoughts": True, "thinkingBudget": 1024}),
        (ThinkingConfig(effort="high"), {"includeThoughts": True, "thinkingBudget": 24576}),
        (ThinkingConfig(effort="max"), {"includeThoughts": True, "thinkingBudget": 32768}),
        (
            ThinkingConfig(budget_tokens=999, effort="high"),
            {"includeThoughts": True, "thinkingBudget": 999},
        ),
    ],
)
def test_thinking(thinking: ThinkingConfig, expected: dict[str, Any]) -> None:
    assert encode_chat_request(req(thinking=thinking))["generationConfig"] == {
        "thinkingConfig": expected
    }


@pytest.mark.parametrize(
    ("choice", "expected"),
    [
        (ToolChoice("auto"), {"mode": "AUTO"}),
        (ToolChoice("any"), {"mode": "ANY"}),
        (ToolChoice("none"), {"mode": "NONE"}),
        (ToolChoice("tool", "ls"), {"mode": "ANY", "allowedFunctionNames": ["ls"]}),
        (ToolChoice("auto", disable_parallel=True), {"mode": "AUTO"}),
    ],
)
def test_tool_choice(choice: ToolChoice, expected: dict[str, Any]) -> None:
    body = encode_chat_request(req(tools=(ToolDefinition("ls"),), tool_choice=choice))
    assert body["toolConfig"] == {"functionCallingConfig": expected}


def test_minimal_body_has_only_contents() -> None:
    assert encode_chat_request(req()) == {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}


def test_json_without_schema() -> None:
    body = encode_chat_request(req(response_format=ResponseFormat("json")))
    assert body["generationConfig"] == {"responseMimeType": "application/json"}
    assert "generationConfig" not in encode_chat_request(req(response_format=ResponseFormat()))


def test_a_later_system_message_is_user_text_where_it_was() -> None:
    body = encode_chat_request(
        req(
            Message("system", (TextPart("first"),)),
            Message("system", (TextPart("second"),)),
            Message("user", (TextPart("hi"),)),
            Message("assistant", (TextPart("hello"),)),
            Message("system", (TextPart("be brief now"),)),
            Message("user", (TextPart("go"),)),
        )
    )
    assert body["systemInstruction"] == {"parts": [{"text": "first\n\nsecond"}]}
    assert body["contents"][-1] == {
        "role": "user",
        "parts": [{"text": "be brief now"}, {"text": "go"}],
    }


def test_images_inline_by_data_url_and_by_url() -> None:
    body = encode_chat_request(
        req(
            Message(
                "user",
                (
                    ImagePart(url=f"data:image/webp;base64,{PNG}"),
                    ImagePart(url="https://x.test/a.png"),
                    ImagePart(url="https://x.test/photo"),
                ),
            )
        )
    )
    assert body["contents"][0]["parts"] == [
        {"inlineData": {"mimeType": "image/webp", "data": PNG}},
        {"fileData": {"mimeType": "image/png", "fileUri": "https://x.test/a.png"}},
        {"fileData": {"mimeType": "image/jpeg", "fileUri": "https://x.test/photo"}},
    ]


def test_empty_turns_are_dropped_and_same_roles_merged() -> None:
    body = encode_chat_request(
        req(
            Message("user", (TextPart("a"),)),
            Message("assistant", (TextPart(""), ThinkingPart("only thoughts"))),
            Message("user", (TextPart("b"),)),
        )
    )
    assert body["contents"] == [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}]


def test_unknown_tool_details_ride_along_in_camel_case() -> None:
    tool = ToolDefinition(
        "f", provider_details={"gemini": {"response_json_schema": {"type": "string"}}}
    )
    body = encode_chat_request(req(tools=(tool,)))
    assert body["tools"] == [
        {
            "functionDeclarations": [
                {
                    "name": "f",
                    "parametersJsonSchema": {"type": "object"},
                    "responseJsonSchema": {"type": "string"},
                }
            ]
        }
    ]


def test_embed_request() -> None:
    body = encode_embed_request(
        EmbedRequest(model="text-embedding-004", inputs=("a", "b"), dimensions=8)
    )
    assert body == {
        "requests": [
            {
                "model": "models/text-embedding-004",
                "content": {"parts": [{"text": text}]},
                "outputDimensionality": 8,
            }
            for text in ("a", "b")
        ]
    }
    plain = encode_embed_request(EmbedRequest(model="models/e", inputs=("x",)))
    assert plain == {"requests": [{"model": "models/e", "content": {"parts": [{"text": "x"}]}}]}


# -- decode(encode(request)) -------------------------------------------------------------

texts = st.text(st.characters(blacklist_categories=("Cs",)), min_size=1, max_size=30)
names = st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | texts,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(names, inner, max_size=3),
    max_leaves=6,
)
arguments = st.dictionaries(names, json_values, max_size=3)
images = st.builds(
    ImagePart,
    data=st.binary(min_size=1, max_size=12).map(lambda b: base64.b64encode(b).decode()),
    media_type=st.sampled_from(["image/png", "image/jpeg"]),
)
floats = st.none() | st.floats(0, 2, allow_nan=False)


@st.composite
def conversations(draw: st.DrawFn) -> tuple[Message, ...]:
    """A system prompt (maybe), then rounds of user text, an assistant turn of text and
    calls, and one result per call in order (with the user's next text maybe)."""
    messages: list[Message] = []
    if draw(st.booleans()):
        messages.append(Message("system", (TextPart(draw(texts)),)))
    owed_user = True
    for round_ in range(draw(st.integers(1, 3))):
        if owed_user or draw(st.booleans()):
            user_parts: list[Part] = draw(
                st.lists(texts.map(TextPart) | images, min_size=1, max_size=3)
            )
            messages.append(Message("user", tuple(user_parts)))
        calls = [
            ToolCallPart(
                id=f"id-{round_}-{i}-{draw(names)}", name=draw(names), arguments=draw(arguments)
            )
            for i in range(draw(st.integers(0, 2)))
        ]
        said = draw(st.lists(texts.map(TextPart), min_size=0 if calls else 1, max_size=2))
        messages.append(Message("assistant", (*said, *calls)))
        for made in calls:
            result = ToolResultPart(
                made.id,
                draw(texts),
                is_error=draw(st.booleans()),
                name=draw(st.sampled_from([None, made.name])),
            )
            messages.append(Message("tool", (result,)))
        owed_user = not calls
    return tuple(messages)


@st.composite
def requests(draw: st.DrawFn) -> ChatRequest:
    messages = draw(conversations())
    tools = tuple(
        ToolDefinition(name, draw(st.just("") | texts), {"type": "object", "properties": {}})
        for name in draw(st.lists(names, max_size=3, unique=True))
    )
    choices = [None, ToolChoice("auto"), ToolChoice("any"), ToolChoice("none")]
    choices += [ToolChoice("tool", tool.name) for tool in tools]
    params = GenerationParams(
        max_tokens=draw(st.none() | st.integers(1, 10**5)),
        temperature=draw(floats),
        top_p=draw(st.none() | st.floats(0, 1, allow_nan=False)),
        top_k=draw(st.none() | st.integers(1, 100)),
        stop=tuple(draw(st.lists(texts, max_size=2))),
        seed=draw(st.none() | st.integers(0, 2**31 - 1)),
        presence_penalty=draw(floats),
        frequency_penalty=draw(floats),
    )
    thinking = draw(
        st.sampled_from(
            [
                None,
                ThinkingConfig(enabled=False),
                ThinkingConfig(),
                ThinkingConfig(budget_tokens=777),
            ]
        )
    )
    response_format = draw(
        st.sampled_from(
            [None, ResponseFormat("json"), ResponseFormat("json_schema", {"type": "object"})]
        )
    )
    return ChatRequest(
        model="gemini-x",
        messages=messages,
        params=params,
        tools=tools,
        tool_choice=draw(st.sampled_from(choices)),
        thinking=thinking,
        response_format=response_format,
    )


def normalised(request: ChatRequest) -> tuple[Message, ...]:
    """The documented normalisations: Google gets no call ids, so the decoder numbers
    the calls (``call_1``...) and every result names its function."""
    ids: dict[str, str] = {}
    calls: dict[str, str] = {}
    out: list[Message] = []
    for message in request.messages:
        parts: list[Part] = []
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                ids[part.id] = f"call_{len(ids) + 1}"
                calls[part.id] = part.name
                part = ToolCallPart(id=ids[part.id], name=part.name, arguments=part.arguments)
            elif isinstance(part, ToolResultPart):
                part = ToolResultPart(
                    ids[part.tool_call_id],
                    part.content,
                    part.is_error,
                    name=calls[part.tool_call_id],
                )
            parts.append(part)
        out.append(Message(message.role, tuple(parts)))
    return tuple(out)


@settings(max_examples=100, deadline=None)
@given(requests())
def test_decode_of_encode_gives_the_request_back(request: ChatRequest) -> None:
    wire = orjson.loads(orjson.dumps(encode_chat_request(request, origin="g")))
    back = decode_chat_request(wire, model=request.model, stream=request.stream)
    assert back.messages == normalised(request)
    assert back.params == request.params
    assert back.tools == request.tools
    assert back.tool_choice == request.tool_choice
    assert back.thinking == request.thinking
    assert back.response_format == request.response_format
    assert back.model == request.model


def test_a_signature_a_gemini_client_sends_back_reaches_the_backend_that_issued_it() -> None:
    # Gemini CLI -> gateway -> gemini backend "g": the client holds the carried signature
    # the gateway gave it; decoded byte for byte, it goes to "g" as Google's own token.
    carried = GEMINI.carry("g", "dG9rZW4=")
    client_body = {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {
                "role": "model",
                "parts": [
                    {"text": "plan", "thought": True},
                    {"functionCall": {"name": "ls", "args": {}}, "thoughtSignature": carried},
                ],
            },
            {
                "role": "user",
                "parts": [{"functionResponse": {"name": "ls", "response": {"output": "a"}}}],
            },
        ]
    }
    request = decode_chat_request(client_body, model="gemini-2.5-pro", stream=True)
    sent = encode_chat_request(request, origin="g")
    assert sent["contents"][1] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "ls", "args": {}}, "thoughtSignature": "dG9rZW4="}],
    }
    elsewhere = encode_chat_request(request, origin="another-gemini")
    assert elsewhere["contents"][1] == {
        "role": "model",
        "parts": [{"functionCall": {"name": "ls", "args": {}}}],
    }
