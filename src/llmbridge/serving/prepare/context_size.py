"""The context window to ask of a backend that allocates one per request (Ollama).

Ollama sizes its context window per request (``options.num_ctx``) and, when a prompt
is longer, keeps only its end: the system prompt and the tools, which come first, are
what goes, and the client hears nothing (Ollama logs "truncating input prompt").
Its default window (2,048 tokens in early releases, 4,096 later) is shorter than
Claude Code's prompt. So for a backend that says ``Capabilities.context_option``,
``prepare`` (fit.py) sets ``num_ctx`` by these rules:

1. The window is the route's ``context_length``, else the context length the model
   reports (Ollama's ``/api/show``), as Ollama's own documentation advises for
   agents and coding tools.
2. The request's size is seed 001's token estimate of the prompt
   (features/token_count.py) times ``ESTIMATE_MARGIN``, plus ``max_tokens`` (as
   serving already clamped it).
3. A ``num_ctx`` the client set itself is kept when it holds the request, and raised
   to the request's size when it does not (the ``x-llmbridge-params`` header says so).
4. Otherwise ``num_ctx`` is the window, or the request's size where that is larger.
   With no window known, it is sent only for a request larger than ``SAFE_CONTEXT``,
   which every Ollama release holds; a smaller one keeps the server's own default
   (which an operator may have raised with ``OLLAMA_CONTEXT_LENGTH``).

Why the values stay put: Ollama reloads a model whose ``num_ctx`` changes, and a
reload loses llama.cpp's prompt cache, so every request to a model gets the same
window; a request larger than it gets a power of two, so a growing conversation
moves to a new value a handful of times rather than on every turn. A value above the
model's trained length costs nothing more: Ollama caps it there.
"""

from __future__ import annotations

import asyncio
import math

from llmbridge.core.request import ChatRequest
from llmbridge.core.request_limits import RequestLimits
from llmbridge.core.request_size import larger_than
from llmbridge.features.token_count import count_request_tokens

__all__ = ["ESTIMATE_MARGIN", "SAFE_CONTEXT", "context_size", "request_size"]

ESTIMATE_MARGIN = 1.25
"""The estimate counts a word of up to four characters as one token; BPE tokenizers
give about 1.3 tokens per English word and more for other scripts, and the model's
template adds role markers and renders the tools at length. An estimate that falls
short means a truncated prompt; one that runs over costs a little memory."""

SAFE_CONTEXT = 2048
"""A window every Ollama release allocates by default (the smallest it shipped)."""

_OFFLOAD_BYTES = RequestLimits().offload_bytes
"""Requests larger than this are counted in a worker thread, as the gateway's own
estimate is (gateway/exchange/exchange.py ``estimate_prompt``): the walk holds the
interpreter meanwhile."""


async def request_size(chat: ChatRequest) -> int:
    """The tokens ``chat`` needs: its prompt's estimate with ``ESTIMATE_MARGIN``, plus
    its ``max_tokens``."""
    if larger_than(chat, _OFFLOAD_BYTES):
        prompt = await asyncio.to_thread(count_request_tokens, chat)
    else:
        prompt = count_request_tokens(chat)
    return math.ceil(prompt * ESTIMATE_MARGIN) + (chat.params.max_tokens or 0)


def context_size(*, window: int | None, client: int | None, needed: int) -> int | None:
    """The ``num_ctx`` to send for a request of ``needed`` tokens to a model whose
    window is ``window`` (``None``: unknown) when the client asked for ``client``;
    ``None`` to leave the request as it is (module docstring)."""
    if client is not None:
        return None if client >= needed else _grown(needed)
    if window is None:
        return _grown(needed) if needed > SAFE_CONTEXT else None
    return window if window >= needed else _grown(needed)


def _grown(needed: int) -> int:
    """The smallest power of two that holds ``needed`` tokens."""
    return 1 << max(needed - 1, 1).bit_length()
