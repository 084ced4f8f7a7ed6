"""The legacy completions codec (dialects/openai/completions.py): the reply and its
stream as the official ``openai`` client reads them, a real server's legacy stream
decoded (golden fixture), and decode/encode round trips (hypothesis)."""

from __future__ import annotations

from typing import Any

import openai
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.types import Completion as SDKCompletion

from llmbridge.core.errors import BackendUnavailableError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.openai import (
    decode_completion_request,
    encode_completion_request,
    encode_completion_response,
    encode_completion_stream,
)
from tests.dialects.openai.helpers import (
    aiter_list,
    collect,
    decode_response,
    fixture_bytes,
    official_client,
    split_every,
)

LEGACY = "legacy_completion_text_in_choices.sse"


def _request(**fields: Any) -> Any:
    return decode_completion_request({"model": "coder", "prompt": "def f(", **fields})


def _events(*texts: str, stop: StopReason = StopReason.END_TURN) -> list[StreamEvent]:
    events: list[StreamEvent] = [ResponseStart(id="cmpl-1", model="up", created=1.0)]
    events.append(PartStart(0, TextPart("")))
    events.extend(PartDelta(0, TextDelta(t)) for t in texts)
    events.append(PartEnd(0, TextPart("".join(texts))))
    events.append(ResponseEnd(stop_reason=stop, usage=Usage(input_tokens=3, output_tokens=2)))
    return events


@pytest.mark.parametrize("size", [1, 7, 4096])
async def test_a_legacy_stream_decodes_at_any_chunking(size: int) -> None:
    response = await decode_response(split_every(fixture_bytes(LEGACY), size))
    assert response.message.text == "a + b 🌍"
    assert response.stop_reason is StopReason.MAX_TOKENS
    assert (response.usage.input_tokens, response.usage.output_tokens) == (9, 4)


def test_the_reply_is_the_sdks_completion() -> None:
    request = _request(echo=True)
    reply = ChatResponse(
        id="x",
        model="up",
        message=Message("assistant", (TextPart("a, b):"),)),
        stop_reason=StopReason.MAX_TOKENS,
        usage=Usage(input_tokens=3, output_tokens=4),
        created=1732240000.0,
    )
    body = encode_completion_response(reply, request)
    parsed = SDKCompletion.model_validate(body, strict=True)
    assert parsed.id.startswith("cmpl-") and parsed.created == 1732240000
    assert parsed.model == "coder"  # the name the client asked for
    assert [(c.text, c.finish_reason) for c in parsed.choices] == [("def f(a, b):", "length")]
    assert parsed.usage is not None and parsed.usage.total_tokens == 7


async def test_the_stream_through_the_official_client() -> None:
    request = _request(stream=True, stream_options={"include_usage": True})
    body = await collect(encode_completion_stream(aiter_list(_events("a", "\u2028b")), request))
    for line in body.split(b"\n\n")[:-2]:  # every chunk is one SSE line, a Completion
        chunk = orjson.loads(line.removeprefix(b"data: "))
        if chunk["choices"] and chunk["choices"][0]["finish_reason"] is None:
            # The SDK types finish_reason as never null, yet OpenAI streams null until
            # the last chunk (the SDK builds stream chunks without validating them).
            assert set(chunk["choices"][0]) == {"text", "index", "logprobs", "finish_reason"}
            chunk["choices"][0]["finish_reason"] = "stop"
        SDKCompletion.model_validate(chunk, strict=True)
    client = official_client(body, content_type="text/event-stream")
    chunks = [
        c async for c in await client.completions.create(model="coder", prompt="x", stream=True)
    ]
    assert "".join(c.choices[0].text for c in chunks if c.choices) == "a\u2028b"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "stop"
    assert chunks[-1].usage is not None and chunks[-1].usage.completion_tokens == 2
    assert body.endswith(b"data: [DONE]\n\n")


async def test_an_in_stream_error_reaches_the_official_client() -> None:
    events = [*_events("a")[:3], StreamError(BackendUnavailableError("the backend left"))]
    body = await collect(encode_completion_stream(aiter_list(events), _request(stream=True)))
    client = official_client(body, content_type="text/event-stream")
    with pytest.raises(openai.APIError, match="the backend left"):
        _ = [c async for c in await client.completions.create(model="c", prompt="x", stream=True)]


async def test_a_stream_cut_short_says_so() -> None:
    body = await collect(encode_completion_stream(aiter_list(_events("a")[:3]), _request()))
    assert b'"error"' in body and body.endswith(b"data: [DONE]\n\n")


_text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@settings(max_examples=200, deadline=None)
@given(
    prompt=_text.filter(bool),
    suffix=st.none() | _text,
    max_tokens=st.none() | st.integers(1, 10_000),
    temperature=st.none() | st.floats(0, 2),
    stop=st.none() | _text.filter(bool) | st.lists(_text.filter(bool), min_size=1, max_size=4),
    seed=st.none() | st.integers(-(2**31), 2**31),
    as_list=st.booleans(),
)
def test_decode_then_encode_keeps_meaning(
    prompt: str,
    suffix: str | None,
    max_tokens: int | None,
    temperature: float | None,
    stop: str | list[str] | None,
    seed: int | None,
    as_list: bool,
) -> None:
    body: dict[str, Any] = {"model": "m", "prompt": [prompt] if as_list else prompt}
    for key, value in [
        ("suffix", suffix),
        ("max_tokens", max_tokens),
        ("temperature", temperature),
        ("stop", stop),
        ("seed", seed),
    ]:
        if value is not None:
            body[key] = value
    sent = encode_completion_request(decode_completion_request(body))
    assert sent["prompt"] == prompt
    assert sent.get("suffix") == (suffix or None)  # an empty suffix is no suffix
    assert sent["max_tokens"] == (16 if max_tokens is None else max_tokens)
    assert sent.get("temperature") == temperature
    assert sent.get("seed") == seed
    assert sent.get("stop") == ([stop] if isinstance(stop, str) else stop)
