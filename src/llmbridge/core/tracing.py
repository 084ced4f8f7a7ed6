"""Where the layers below the gateway add spans to the request being traced.

The gateway traces each request with OpenTelemetry when it is configured to
(gateway/telemetry.py, docs/DEPLOY.md "Tracing (OpenTelemetry)"); serving's backend
attempts (serving/models.py) and tool emulation's model calls
(features/tool_emulation.py) are child spans of it. Those layers may not import the
gateway, and must cost nothing when tracing is off, so they meet it here:
``REQUEST_TRACE`` holds the request's ``RequestTrace`` (``None``, its default, when
tracing is off: one ``ContextVar.get`` and a ``None`` check is all they pay), and
``RequestTrace`` / ``TraceSpan`` say what they may do with it. No OpenTelemetry here:
the implementation is the gateway's.

The request's task sets the variable once (``Exchange``); the tasks it starts (a
streamed body's producer) copy it, so a backend call made while streaming finds it
too. Attribute names are the OpenTelemetry GenAI semantic conventions' where they
have one (``usage_attributes``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from contextvars import ContextVar
from typing import Protocol

from llmbridge.core.response import Usage

__all__ = [
    "REQUEST_TRACE",
    "AttributeValue",
    "RequestTrace",
    "TraceSpan",
    "usage_attributes",
]

AttributeValue = str | bool | int | float | Sequence[str]
"""What a span attribute may hold (OpenTelemetry's primitive types, and lists of text)."""


class TraceSpan(Protocol):
    """One child span, open until ``end`` (the request's span ends any left open)."""

    def set(self, attributes: Mapping[str, AttributeValue | None]) -> None:
        """Add attributes; ``None`` values are skipped."""

    def fail(self, error: BaseException) -> None:
        """Mark the span failed: ``error.type`` and an error status."""

    def end(self) -> None:
        """End the span now (later calls do nothing)."""


class RequestTrace(Protocol):
    """The request's span, to which the layers below add children."""

    def attempt(
        self,
        *,
        deployment: str,
        kind: str,
        model: str,
        url: str | None,
        fallback: bool,
    ) -> TraceSpan:
        """A span for one call to a backend: ``deployment`` (the configured backend's
        name) of ``kind``, asked for ``model`` at ``url``; ``fallback``: a route
        fallback's. A retry is a second attempt on the same deployment and model."""
        ...

    def step(self, name: str, model: str) -> TraceSpan:
        """A span for a model call made inside the current attempt (tool emulation's
        ``decision`` and ``answer``), asking ``model``."""
        ...


REQUEST_TRACE: ContextVar[RequestTrace | None] = ContextVar("llmbridge_request_trace", default=None)
"""The traced request's ``RequestTrace``; ``None`` when tracing is off (module docstring)."""


def usage_attributes(usage: Usage) -> dict[str, AttributeValue | None]:
    """``usage`` under the GenAI conventions' names (unknown counts are ``None``)."""
    return {
        "gen_ai.usage.input_tokens": usage.input_tokens,
        "gen_ai.usage.output_tokens": usage.output_tokens,
        "gen_ai.usage.cache_read.input_tokens": usage.cache_read_input_tokens,
        "gen_ai.usage.cache_creation.input_tokens": usage.cache_creation_input_tokens,
        "gen_ai.usage.reasoning.output_tokens": usage.reasoning_tokens,
    }
