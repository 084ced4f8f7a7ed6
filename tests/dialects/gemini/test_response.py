"""Gemini replies (``dialects/gemini/response.py``): golden bodies both directions, the
mapping tables, malformed replies as data, the google-genai SDK reading what the gateway
encodes, and a hypothesis round trip.

Golden files are ``tests/fixtures/gemini/reply_*.json``: the ones named ``reply_encoded_*``
are what the encoder writes (regenerate with ``UPDATE_SNAPSHOTS=1`` after a deliberate
change and review the diff); the others are Google-shaped replies the decoder reads.
"""

from __future__ import annotations

import base64
import dataclasses
import os
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from google import genai
from google.genai import models as genai_models
from google.genai import types as genai_types
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.core.errors import BackendHTTPError, BackendProtocolError
from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from llmbridge.core.request import ChatRequest, ThinkingConfig
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.gemini.call_ids import issued_call_id
from llmbridge.dialects.gemini.request import decode_chat_request, encode_chat_request
from llmbridge.dialects.gemini.response import (
    decode_chat_response,
    decode_finish_reason,
    decode_usage,
    encode_chat_response,
    encode_finish_reason,
    encode_usage,
    signature_from_wire,
    wire_signature,
)
from llmbridge.dialects.gemini.thoughts import GEMINI

FIXTURES = Path(__file__).parents[2] / "fixtures" / "gemini"
ORIGIN = "google"


def fixture(name: str) -> Any:
    return orjson.loads((FIXTURES / name).read_bytes())


def gemini_request(
    *, thoughts: bool = False, call_ids: bool = False, model: str = "gemini-2.5-pro"
) -> ChatRequest:
    """A request as the Gemini front decodes it: ``includeThoughts`` and whether the
    client sent call ids are recorded under ``provider_details["gemini"]``."""
    return ChatRequest(
        model=model,
        messages=(Message("user", (TextPart("hi"),)),),
        thinking=ThinkingConfig() if thoughts else None,
        provider_details={"gemini": {"include_thoughts": thoughts, "call_ids": call_ids}},
    )


def check_golden(name: str, actual: bytes) -> None:
    path = FIXTURES / name
    if os.environ.get("UPDATE_SNAPSHOTS"):
        path.write_bytes(actual)
    assert actual == path.read_bytes()


# -- decoding Google's replies (the gemini backend) -----------------------------------


def test_decode_thoughts_signature_and_calls_with_ids() -> None:
    resp = decode_chat_response(fixture("reply_generate_content.json"), origin=ORIGIN)
    signature = GEMINI.carry(ORIGIN, "Cs0BAVSoXO7sig==")
    assert resp.id == "resp-whole-1"
    assert resp.model == "gemini-2.5-pro"
    assert resp.message.parts == (
        # The signature was on the text part: it signs the thought just before it.
        ThinkingPart("The user wants two files.", signature=signature, provider="gemini"),
        TextPart("Reading both."),
        # Google's ids ride in the core's, tagged with the backend (call_ids.py).
        ToolCallPart(issued_call_id(ORIGIN, "fc-1"), "read_file", {"path": "a.txt"}),
        ToolCallPart(issued_call_id(ORIGIN, "fc-2"), "read_file", {"path": "b.txt"}),
    )
    assert GEMINI.recover(signature, ORIGIN) == "Cs0BAVSoXO7sig=="
    assert GEMINI.recover(signature, "another-backend") is None
    assert resp.stop_reason is StopReason.TOOL_USE  # Gemini says STOP with calls
    assert resp.usage == Usage(
        input_tokens=120, output_tokens=71, cache_read_input_tokens=64, reasoning_tokens=40
    )
    assert resp.provider_details is None


def test_decode_prompt_blocked_without_candidates() -> None:
    resp = decode_chat_response(fixture("reply_prompt_blocked.json"))
    assert resp.message.parts == ()
    assert resp.stop_reason is StopReason.CONTENT_FILTER
    assert resp.provider_details == {"gemini": {"finish_reason": "PROHIBITED_CONTENT"}}
    assert resp.usage.input_tokens == 7


def test_decode_malformed_function_call_is_an_error_stop() -> None:
    resp = decode_chat_response(fixture("reply_malformed_function_call.json"))
    assert resp.message.parts == (TextPart("I will call"),)
    assert resp.stop_reason is StopReason.ERROR
    assert resp.provider_details == {"gemini": {"finish_reason": "MALFORMED_FUNCTION_CALL"}}


def test_decode_function_call_without_id_gets_a_fresh_id() -> None:
    body = {
        "candidates": [
            {
                "content": {
                    "role": "model",
                    "parts": [
                        {"functionCall": {"name": "f", "args": {}}},
                        {"functionCall": {"name": "f"}},
                    ],
                },
                "finishReason": "STOP",
            }
        ]
    }
    calls = decode_chat_response(body).message.tool_calls
    assert [call.name for call in calls] == ["f", "f"]
    assert all(call.id.startswith("call_") and call.arguments == {} for call in calls)
    assert calls[0].id != calls[1].id


def test_decode_error_object_in_a_200_body() -> None:
    body = {"error": {"code": 503, "message": "The model is overloaded.", "status": "UNAVAILABLE"}}
    with pytest.raises(BackendHTTPError) as caught:
        decode_chat_response(body)
    assert caught.value.status_code == 503
    assert "overloaded" in caught.value.message


@pytest.mark.parametrize(
    ("body", "named"),
    [
        ([], "not a JSON object"),
        ({}, "no candidates"),
        ({"candidates": {}}, "candidates is not a list"),
        ({"candidates": ["x"]}, "candidates.0 is not a JSON object"),
        ({"candidates": [{"content": []}]}, "candidates.0.content is not a JSON object"),
        ({"candidates": [{"content": {"parts": {}}}]}, "candidates.0.content.parts is not a list"),
        (
            {"candidates": [{"content": {"parts": [{"text": 3}]}}]},
            "candidates.0.content.parts.0.text is not a string",
        ),
        (
            {"candidates": [{"content": {"parts": [{"functionCall": {"args": {}}}]}}]},
            "candidates.0.content.parts.0.functionCall.name is not a string",
        ),
        (
            {"candidates": [{"content": {"parts": [{"functionCall": {"name": "f", "args": []}}]}}]},
            "candidates.0.content.parts.0.functionCall.args is not a JSON object",
        ),
        (
            {"candidates": [{"content": {"parts": [{"text": "", "thoughtSignature": 1}]}}]},
            "candidates.0.content.parts.0.thoughtSignature is not a string",
        ),
    ],
)
def test_decode_malformed_replies_name_the_field(body: object, named: str) -> None:
    with pytest.raises(BackendProtocolError, match=named):
        decode_chat_response(body)


# -- the shared maps --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reason", "wire"),
    [
        (StopReason.END_TURN, "STOP"),
        (StopReason.TOOL_USE, "STOP"),
        (StopReason.STOP_SEQUENCE, "STOP"),
        (StopReason.MAX_TOKENS, "MAX_TOKENS"),
        (StopReason.CONTENT_FILTER, "SAFETY"),
        (StopReason.ERROR, "OTHER"),
    ],
)
def test_encode_finish_reason(reason: StopReason, wire: str) -> None:
    assert encode_finish_reason(reason) == wire


@pytest.mark.parametrize(
    ("wire", "called", "reason"),
    [
        ("STOP", False, StopReason.END_TURN),
        ("STOP", True, StopReason.TOOL_USE),
        (None, False, StopReason.END_TURN),
        ("MAX_TOKENS", True, StopReason.MAX_TOKENS),
        ("SAFETY", False, StopReason.CONTENT_FILTER),
        ("RECITATION", False, StopReason.CONTENT_FILTER),
        ("BLOCKLIST", False, StopReason.CONTENT_FILTER),
        ("PROHIBITED_CONTENT", False, StopReason.CONTENT_FILTER),
        ("SPII", False, StopReason.CONTENT_FILTER),
        ("IMAGE_SAFETY", False, StopReason.CONTENT_FILTER),
        ("MALFORMED_FUNCTION_CALL", False, StopReason.ERROR),
        ("OTHER", False, StopReason.END_TURN),
        ("FINISH_REASON_UNSPECIFIED", False, StopReason.END_TURN),
    ],
)
def test_decode_finish_reason(wire: str | None, called: bool, reason: StopReason) -> None:
    assert decode_finish_reason(wire, called_function=called) is reason


def test_usage_counts_thoughts_apart_from_candidates() -> None:
    usage = Usage(input_tokens=10, output_tokens=50, reasoning_tokens=30, cache_read_input_tokens=4)
    wire = encode_usage(usage)
    assert wire == {
        "promptTokenCount": 10,
        "candidatesTokenCount": 20,
        "thoughtsTokenCount": 30,
        "cachedContentTokenCount": 4,
        "totalTokenCount": 60,
    }
    assert decode_usage(wire) == usage
    assert encode_usage(Usage()) == {
        "promptTokenCount": 0,
        "candidatesTokenCount": 0,
        "totalTokenCount": 0,
    }
    assert decode_usage({"promptTokenCount": 3, "totalTokenCount": 3}) == Usage(input_tokens=3)
    assert decode_usage("nonsense") == Usage()


# -- encoding replies for Gemini clients (the gateway's front) --------------------------

SIGNED = ChatResponse(
    id="up-1",
    model="backend-model",
    message=Message(
        "assistant",
        (
            ThinkingPart("Check the weather first.", signature="c2lnLTE="),
            TextPart("Looking it up."),
            ToolCallPart("call_7", "get_weather", {"city": "Lyon"}),
        ),
    ),
    stop_reason=StopReason.TOOL_USE,
    usage=Usage(input_tokens=12, output_tokens=30, reasoning_tokens=18),
)


def test_encode_golden_thoughts_shown_with_ids() -> None:
    body = encode_chat_response(SIGNED, gemini_request(thoughts=True, call_ids=True))
    check_golden(
        "reply_encoded_generate_content.json", orjson.dumps(body, option=orjson.OPT_INDENT_2)
    )


def test_encode_thoughts_hidden_keeps_the_signature_and_omits_ids() -> None:
    body = encode_chat_response(SIGNED, gemini_request())
    assert body["candidates"][0]["content"]["parts"] == [
        {"text": "Looking it up.", "thoughtSignature": "c2lnLTE="},
        {"functionCall": {"name": "get_weather", "args": {"city": "Lyon"}}},
    ]
    assert body["candidates"][0]["finishReason"] == "STOP"
    assert body["modelVersion"] == "gemini-2.5-pro"  # the name the client asked for
    assert body["responseId"] == "up-1"


def test_encode_signature_with_nothing_after_it() -> None:
    resp = dataclasses.replace(
        SIGNED, message=Message("assistant", (ThinkingPart("t", signature="AAAA"),))
    )
    shown = encode_chat_response(resp, gemini_request(thoughts=True))
    hidden = encode_chat_response(resp, gemini_request())
    assert shown["candidates"][0]["content"]["parts"] == [
        {"text": "t", "thought": True, "thoughtSignature": "AAAA"}
    ]
    assert hidden["candidates"][0]["content"]["parts"] == [{"text": "", "thoughtSignature": "AAAA"}]


def test_encode_include_thoughts_without_thinking_config_shows_none() -> None:
    request = dataclasses.replace(gemini_request(thoughts=True), thinking=None)
    parts = encode_chat_response(SIGNED, request)["candidates"][0]["content"]["parts"]
    assert not any(part.get("thought") for part in parts)


def test_encode_skips_what_is_not_model_output() -> None:
    resp = dataclasses.replace(
        SIGNED,
        message=Message(
            "assistant",
            (
                TextPart(""),
                ImagePart(url="https://example.com/x.png"),
                ThinkingPart("", redacted="r"),
            ),
        ),
        stop_reason=StopReason.CONTENT_FILTER,
    )
    body = encode_chat_response(resp, gemini_request())
    assert body["candidates"][0]["content"] == {"role": "model", "parts": []}
    assert body["candidates"][0]["finishReason"] == "SAFETY"


@pytest.mark.parametrize(
    "signature",
    [
        GEMINI.carry("google", "CiQB0e2Kb0sig+/A=="),
        "not base64!",
        "c2lnLTE",  # base64 without its padding is not canonical
        "llmbridge.signature:nested",
        "é",
    ],
)
def test_signatures_that_are_not_base64_are_wrapped(signature: str) -> None:
    wire = wire_signature(signature)
    assert wire != signature
    genai_types.Part.model_validate({"text": "", "thoughtSignature": wire})  # the SDK accepts it
    assert signature_from_wire(wire) == signature


@pytest.mark.parametrize("signature", ["CiQB0e2Kb0sig+/A", "c2lnLTE=", "AAAA"])
def test_base64_signatures_pass_unchanged(signature: str) -> None:
    assert wire_signature(signature) == signature
    assert signature_from_wire(signature) == signature


# -- the google-genai SDK reads what the gateway writes -----------------------------------


def sdk_response(body: dict[str, Any]) -> genai_types.GenerateContentResponse:
    """``body`` as the SDK's ``generate_content`` turns a Gemini API reply into its type."""
    converted = genai_models._GenerateContentResponse_from_mldev(body)
    return genai_types.GenerateContentResponse._from_response(response=converted, kwargs={})


def test_sdk_types_read_the_encoded_reply() -> None:
    body = encode_chat_response(SIGNED, gemini_request(thoughts=True, call_ids=True))
    reply = sdk_response(body)
    assert reply.text == "Looking it up."  # thought text is not the answer
    assert reply.function_calls is not None
    assert [(call.id, call.name, call.args) for call in reply.function_calls] == [
        ("call_7", "get_weather", {"city": "Lyon"})
    ]
    parts = reply.candidates[0].content.parts  # type: ignore[index, union-attr]
    assert parts is not None
    assert parts[0].thought is True
    # The SDK holds the signature as bytes and sends back their base64: the same string.
    assert parts[1].thought_signature is not None
    sent_back = base64.b64encode(parts[1].thought_signature).decode()
    assert sent_back == body["candidates"][0]["content"]["parts"][1]["thoughtSignature"]
    assert signature_from_wire(sent_back) == "c2lnLTE="
    assert reply.usage_metadata is not None
    assert reply.usage_metadata.prompt_token_count == 12
    assert reply.usage_metadata.candidates_token_count == 12
    assert reply.usage_metadata.thoughts_token_count == 18
    assert reply.candidates[0].finish_reason == genai_types.FinishReason.STOP  # type: ignore[index]
    assert reply.response_id == "up-1"


def test_sdk_client_generate_content_over_http() -> None:
    """The SDK's own client, its HTTP layer fed the encoded body (no network)."""
    body = encode_chat_response(SIGNED, gemini_request(model="gemini-2.5-flash"))
    seen: list[httpx.Request] = []

    def reply(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(200, json=body)

    client = genai.Client(
        api_key="test-key",
        http_options=genai_types.HttpOptions(
            base_url="http://127.0.0.1:9",
            httpx_client=httpx.Client(transport=httpx.MockTransport(reply)),
        ),
    )
    result = client.models.generate_content(model="gemini-2.5-flash", contents="weather?")
    # (google-genai 3.3.0 says /v1 rather than /v1beta; the gateway serves both.)
    assert seen[0].url.path.endswith("/models/gemini-2.5-flash:generateContent")
    assert result.text == "Looking it up."
    assert result.function_calls is not None
    assert result.function_calls[0].name == "get_weather"
    assert result.function_calls[0].id is None  # the client sent no ids
    assert result.usage_metadata is not None
    assert result.usage_metadata.total_token_count == 42  # 12 prompt + 30 output


# -- round trip ---------------------------------------------------------------------------

texts = st.text(min_size=1, max_size=30)
signatures = st.from_regex(r"[A-Za-z0-9+/=]{1,24}", fullmatch=True)
names = st.from_regex(r"[a-z_]{1,12}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(10**6), 10**6) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
    ),
    max_leaves=6,
)
arguments = st.dictionaries(st.text(max_size=8), json_values, max_size=3)
thinking_parts = st.builds(ThinkingPart, st.just("") | texts, signature=st.none() | signatures)
answer_parts = st.one_of(
    st.builds(TextPart, texts),
    st.builds(ToolCallPart, st.uuids().map(lambda u: f"call_{u.hex}"), names, arguments),
)
counts = st.integers(0, 10**6)


@st.composite
def responses(draw: st.DrawFn) -> ChatResponse:
    parts: list[Part] = draw(st.lists(thinking_parts | answer_parts, min_size=0, max_size=6))
    output, reasoning = draw(counts), draw(st.none() | counts)
    if reasoning is not None:
        output += reasoning
    return ChatResponse(
        id=draw(signatures),
        model="backend-model",
        message=Message("assistant", tuple(parts)),
        stop_reason=draw(
            st.sampled_from(
                [
                    StopReason.END_TURN,
                    StopReason.MAX_TOKENS,
                    StopReason.CONTENT_FILTER,
                    StopReason.TOOL_USE,
                ]
            )
        ),
        usage=Usage(
            input_tokens=draw(counts),
            output_tokens=output,
            reasoning_tokens=reasoning,
            cache_read_input_tokens=draw(st.none() | counts),
        ),
    )


def meaning(resp: ChatResponse, origin: str | None = None) -> tuple[Any, ...]:
    """What a Gemini client can tell apart: adjacent texts (and a thought followed by more
    thought before its signature) read as one part, empty thinking without a signature is
    nothing, signatures come back carried for ``origin``, call ids are the client's
    business (a Gemini client sent none), and STOP with calls is tool use."""
    parts: list[Any] = []
    for part in resp.message.parts:
        if isinstance(part, ThinkingPart):
            if not part.text and not part.signature:
                continue
            signature = part.signature
            if origin is not None and signature is not None:
                signature = GEMINI.carry(origin, signature)
            last = parts[-1] if parts else None
            if isinstance(last, ThinkingPart) and last.signature is None:
                parts[-1] = ThinkingPart(last.text + part.text, signature=signature)
            else:
                parts.append(ThinkingPart(part.text, signature=signature))
        elif isinstance(part, TextPart):
            if parts and isinstance(parts[-1], TextPart):
                parts[-1] = TextPart(parts[-1].text + part.text)
            else:
                parts.append(part)
        elif isinstance(part, ToolCallPart):
            parts.append(("call", part.name, part.arguments))
    reason = resp.stop_reason
    if resp.message.tool_calls and reason is StopReason.END_TURN:
        reason = StopReason.TOOL_USE
    if not resp.message.tool_calls and reason is StopReason.TOOL_USE:
        reason = StopReason.END_TURN
    return (tuple(parts), reason, resp.usage)


def decoded_meaning(resp: ChatResponse) -> tuple[Any, ...]:
    stripped = dataclasses.replace(
        resp,
        message=Message(
            "assistant",
            tuple(
                dataclasses.replace(p, provider=None) if isinstance(p, ThinkingPart) else p
                for p in resp.message.parts
            ),
        ),
    )
    return meaning(stripped)


@settings(max_examples=150, deadline=None)
@given(responses())
def test_response_round_trip(resp: ChatResponse) -> None:
    body = orjson.loads(orjson.dumps(encode_chat_response(resp, gemini_request(thoughts=True))))
    decoded = decode_chat_response(body, origin=ORIGIN)
    assert decoded_meaning(decoded) == meaning(resp, ORIGIN)
    assert decoded.id == resp.id


def test_sdk_sends_a_carried_signature_back_to_the_backend_that_issued_it() -> None:
    """Gemini backend "g" -> gateway -> the google-genai SDK -> next turn -> "g" again:
    the carried signature is wrapped as base64 on the way out (the SDK holds it as
    bytes) and unwrapped when the SDK's next request is decoded."""
    carried = GEMINI.carry("g", "dG9rZW4=")
    resp = dataclasses.replace(
        SIGNED,
        message=Message(
            "assistant",
            (ThinkingPart("", signature=carried), ToolCallPart("call_1", "ls", {})),
        ),
    )
    reply = sdk_response(encode_chat_response(resp, gemini_request()))
    bodies: list[Any] = []

    def answer(request: httpx.Request) -> httpx.Response:
        bodies.append(orjson.loads(request.content))
        return httpx.Response(200, json=encode_chat_response(SIGNED, gemini_request()))

    client = genai.Client(
        api_key="test-key",
        http_options=genai_types.HttpOptions(
            base_url="http://127.0.0.1:9",
            httpx_client=httpx.Client(transport=httpx.MockTransport(answer)),
        ),
    )
    model_turn = reply.candidates[0].content  # type: ignore[index]
    assert model_turn is not None
    tool_result = genai_types.Part.from_function_response(name="ls", response={"output": "a"})
    client.models.generate_content(
        model="gemini-2.5-pro",
        contents=[
            genai_types.Content(role="user", parts=[genai_types.Part(text="go")]),
            model_turn,
            genai_types.Content(role="user", parts=[tool_result]),
        ],
    )
    request = decode_chat_request(bodies[0], model="gemini-2.5-pro", stream=False)
    signatures = [
        part.signature
        for message in request.messages
        for part in message.parts
        if isinstance(part, ThinkingPart)
    ]
    assert signatures == [carried]
    sent = encode_chat_request(request, origin="g")
    assert sent["contents"][1]["parts"][0]["thoughtSignature"] == "dG9rZW4="
