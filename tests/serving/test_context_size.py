"""The rules that pick Ollama's ``num_ctx`` (serving/prepare/context_size.py), as data."""

from __future__ import annotations

import math

import pytest

from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, GenerationParams
from llmbridge.features.token_count import count_request_tokens
from llmbridge.serving.prepare.context_size import (
    ESTIMATE_MARGIN,
    SAFE_CONTEXT,
    context_size,
    request_size,
)


@pytest.mark.parametrize(
    ("window", "client", "needed", "expected"),
    [
        (40960, None, 6000, 40960),  # the window, whatever the request's size under it
        (40960, None, 100, 40960),
        (16384, None, 20000, 32768),  # past the window: a power of two that holds it
        (16384, None, 32769, 65536),
        (40960, 4096, 3000, None),  # the client's own, when it holds the request
        (40960, 4096, 4096, None),
        (40960, 1024, 3000, 4096),  # raised past the client's, to a power of two
        (None, None, SAFE_CONTEXT, None),  # no window known: the server's default holds it
        (None, None, SAFE_CONTEXT + 1, 2 * SAFE_CONTEXT),
        (None, 8192, 9000, 16384),
    ],
)
def test_context_size(window: int | None, client: int | None, needed: int, expected: int) -> None:
    assert context_size(window=window, client=client, needed=needed) == expected


async def test_the_request_size_is_the_prompts_estimate_with_a_margin_plus_max_tokens() -> None:
    text = " ".join(["token"] * 1000)
    chat = ChatRequest(
        model="m",
        messages=(Message("user", (TextPart(text),)),),
        params=GenerationParams(max_tokens=512),
    )
    estimate = count_request_tokens(chat)
    assert await request_size(chat) == math.ceil(estimate * ESTIMATE_MARGIN) + 512
    # A request past the off-loop threshold is counted in a thread, to the same figure.
    large = ChatRequest(model="m", messages=(Message("user", (TextPart(text * 40),)),))
    assert await request_size(large) == math.ceil(count_request_tokens(large) * ESTIMATE_MARGIN)
