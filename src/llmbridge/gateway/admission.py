"""A database key's limits on the request path (accounts/limits.py), for every route.

The auth middleware put the request's ``KeyRecord`` in the scope (``ACCOUNT``, ``None``
for a static key or with auth off: nothing is counted then). ``admit_chat`` checks and
takes the key's limits before the request is prepared; ``admitted`` does the same for
routes that are not chats (embeddings, token counts), counting the request and checking
the model. A refusal is the error to render in the caller's dialect with
``refusal_headers`` (``Retry-After`` and the rate-limit headers). ``counted`` passes a
reply's events on and notes its usage, so ``finish`` adds its tokens to the key's
per-minute window. ``visible_models`` is what model lists show a key: the models its
globs allow.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from dataclasses import replace

from starlette.requests import Request

from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.limits import OPEN, Admission, KeyLimitError, limit_headers
from llmbridge.accounts.service import ACCOUNT
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.events import ResponseEnd, StreamEvent
from llmbridge.core.models import ModelInfo
from llmbridge.core.request import ChatRequest
from llmbridge.core.request_size import larger_than
from llmbridge.core.response import Usage
from llmbridge.core.stream import EventStream
from llmbridge.features.token_count import count_request_tokens
from llmbridge.gateway.state import GatewayState
from llmbridge.serving.models import Reply
from llmbridge.web.render import Dialect

__all__ = [
    "admit_chat",
    "admitted",
    "counted",
    "counted_reply",
    "refusal_headers",
    "total_tokens",
    "visible_models",
]


def account_of(request: Request) -> KeyRecord | None:
    record = request.scope.get(ACCOUNT)
    return record if isinstance(record, KeyRecord) else None


def visible_models(request: Request, models: list[ModelInfo]) -> list[ModelInfo]:
    """``models`` a request's key may use (all of them without a database key, or for
    a key with no ``models`` globs): model lists show only what would be served."""
    record = account_of(request)
    if record is None or record.models is None:
        return models
    return [info for info in models if record.allows(info.name)]


def refusal_headers(error: LLMBridgeError, dialect: Dialect) -> dict[str, str]:
    """``Retry-After`` and the rate-limit headers of a refusal (none for a 403)."""
    if isinstance(error, KeyLimitError):
        return limit_headers(dialect, error.requests, error.tokens, error.retry_after)
    return {}


def total_tokens(usage: Usage | None) -> int:
    if usage is None:
        return 0
    return (usage.input_tokens or 0) + (usage.output_tokens or 0)


async def _prompt_tokens(chat: ChatRequest, state: GatewayState) -> int:
    """The prompt's estimated tokens (seed 001's estimate), off the event loop for a
    large one (core/request_size.py), as the Anthropic route's estimate is."""
    if larger_than(chat, state.limits.offload_bytes):
        return await asyncio.to_thread(count_request_tokens, chat)
    return count_request_tokens(chat)


async def admit_chat(request: Request, chat: ChatRequest, state: GatewayState) -> Admission:
    """The key's admission for ``chat`` (``OPEN`` without a database key); the error
    (``PermissionDeniedError``, ``KeyLimitError``) when it is over a limit."""
    record = account_of(request)
    if record is None:
        return OPEN
    prompt = await _prompt_tokens(chat, state) if record.tpm is not None else 0
    return await admitted(request, chat.model, state, prompt_tokens=prompt)


async def admitted(
    request: Request, model: str, state: GatewayState, *, prompt_tokens: int = 0
) -> Admission:
    """The key's admission for one request to ``model``; the error when over a limit."""
    record = account_of(request)
    if record is None:
        return OPEN
    return await state.accounts.admit(record, model, prompt_tokens)


def counted(events: EventStream, admission: Admission) -> EventStream:
    """``events``, whose final usage is noted in ``admission`` when the key has a
    tokens-per-minute limit (unchanged otherwise)."""
    return _noting(events, admission) if admission.counts_tokens else events


def counted_reply(reply: Reply, chat: ChatRequest, admission: Admission) -> Reply:
    """``reply`` with ``counted`` events when ``chat`` streams (unchanged otherwise:
    a whole reply's tokens are counted from its usage when it is built, so it pays no
    generator layer per event for them)."""
    if not (chat.stream and admission.counts_tokens):
        return reply
    return replace(reply, rest=_noting(reply.rest, admission))


async def _noting(events: EventStream, admission: Admission) -> AsyncGenerator[StreamEvent, None]:
    try:
        async for event in events:
            if isinstance(event, ResponseEnd):
                admission.used_tokens = total_tokens(event.usage)
            yield event
    finally:
        await events.aclose()
