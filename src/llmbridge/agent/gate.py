"""What the agent's HTTP API asks before a request calls a model, and reports after.

A turn (``POST /agent/sessions/{id}/messages``) or an on-demand summary (``POST
.../summaries``) spends model tokens like any request to the gateway's dialect routes,
so a key's limits and the usage ledger must see it. The gateway's
per-request ``Exchange`` admits and records every request, and ``agent/`` may not
import the gateway, which sits above it and mounts it (docs/ARCHITECTURE.md,
"Layers"). So the agent side names the hook here and the gateway fills it
(``gateway/exchange/agent_gate.py``, set on ``MountedAgent.gate``):

1. ``ModelGate.admit(request, model, ...)`` before anything runs, with the model the
   request will use: a ``ModelPass``, or the refusal (``PermissionDeniedError`` 403
   for a model outside the key's globs or an exhausted budget, ``RateLimitError``
   429), rendered by the routes' error path with ``refusal_headers`` (``Retry-After``
   and ``x-ratelimit-*``: the agent API's errors are OpenAI-shaped).
2. Every model call the request makes goes through ``metered(chat, meter)``: the
   pass hears of the first event (time to first token) and of each call's usage
   (a tool loop calls the model several times: the pass sums them, ``Usage.plus``).
3. ``ModelPass.finish(status)`` once the request has ended however it ended (a
   reply, an error, a client gone: 499); twice is a no-op.

``OPEN_GATE``, the default, admits everything and counts nothing: the CLI's
in-process agent and an app that mounts the routes without a gateway.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, Mapping
from typing import Protocol

from starlette.requests import Request

from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.events import ResponseEnd, ResponseStart, StreamEvent, UsageUpdate
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import Usage
from llmbridge.core.stream import ChatFn, EventStream

__all__ = ["OPEN_GATE", "CallMeter", "ModelGate", "ModelPass", "metered"]


class CallMeter(Protocol):
    """What hears of one request's model calls."""

    def first_event(self) -> None:
        """A model call's first event arrived (the pass keeps the first one's time)."""

    def add_usage(self, usage: Usage) -> None:
        """One model call's usage, as ``core.accumulate`` reads it from its events."""


class ModelPass(CallMeter, Protocol):
    """One admitted request that calls models."""

    def headers(self) -> Mapping[str, str]:
        """The rate-limit headers of the reply (none without a limited key)."""

    async def finish(self, status: int) -> None:
        """The request ended with ``status``: give back what admission took, record
        it. Once; a second call is a no-op."""


class ModelGate(Protocol):
    """Admission to call models for an agent request (module docstring)."""

    async def admit(
        self, request: Request, model: str, *, endpoint: str, streamed: bool, prompt: str
    ) -> ModelPass:
        """A pass for ``request`` to call ``model`` (``endpoint``: the route's path
        template; ``prompt``: the caller's text, whose estimated tokens are taken
        from a tokens-per-minute limit up front); the error when it is refused."""

    def refusal_headers(self, error: LLMBridgeError) -> dict[str, str]:
        """The headers of a refusal ``admit`` raised (``Retry-After``, rate limits)."""


class _OpenPass:
    """A pass that counts nothing."""

    def first_event(self) -> None:
        pass

    def add_usage(self, usage: Usage) -> None:
        pass

    def headers(self) -> Mapping[str, str]:
        return {}

    async def finish(self, status: int) -> None:
        pass


class _OpenGate:
    """Admits everything, counts nothing."""

    _pass = _OpenPass()

    async def admit(
        self, request: Request, model: str, *, endpoint: str, streamed: bool, prompt: str
    ) -> ModelPass:
        return self._pass

    def refusal_headers(self, error: LLMBridgeError) -> dict[str, str]:
        return {}


OPEN_GATE: ModelGate = _OpenGate()
"""The gate of an agent API without keys, limits or a ledger."""


def metered(chat: ChatFn, meter: CallMeter | None) -> ChatFn:
    """``chat`` whose calls ``meter`` hears of (``chat`` itself without a meter)."""
    if meter is None:
        return chat

    def call(request: ChatRequest) -> EventStream:
        return _counting(chat(request), meter)

    return call


async def _counting(events: EventStream, meter: CallMeter) -> AsyncGenerator[StreamEvent, None]:
    """``events``, their usage merged as ``core.accumulate`` merges it (later values
    win) and handed to ``meter`` when the call ends, however it ends: a call that
    failed midway still spent what it reported."""
    usage: Usage | None = None
    first = True
    try:
        async for event in events:
            if first:
                first = False
                meter.first_event()
            if isinstance(event, ResponseStart) and event.input_tokens is not None:
                usage = _merged(usage, Usage(input_tokens=event.input_tokens))
            elif isinstance(event, UsageUpdate | ResponseEnd):
                usage = _merged(usage, event.usage)
            yield event
    finally:
        if usage is not None:
            meter.add_usage(usage)
        await events.aclose()


def _merged(usage: Usage | None, later: Usage) -> Usage:
    return later if usage is None else usage.merged(later)
