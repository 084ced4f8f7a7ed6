"""Neutral stream events in, the adapter's ART-shaped events out.

``art_events`` drives one call: it opens the engine's neutral event stream and turns
it into ``TOKEN`` / ``METADATA`` / ``ERROR`` / ``END`` events (``client.events``),
streaming or, for ``stream=False``, as the seed's simulated stream of exactly one
response TOKEN. Tool calls are not re-assembled here: ``core.parts_manager`` already
told fragments apart by index *and* id and handed back finished ``ToolCallPart``
values; this module only shapes them as ``tool_use`` items, healing arguments that
did not parse. It never raises a provider error: any failure becomes an ``ERROR``
event, and ``END`` is always last.
"""

from __future__ import annotations

import time
from collections.abc import AsyncGenerator, Callable
from contextlib import aclosing
from typing import Any

from llmbridge.client.events import (
    EventType,
    LLMMetadata,
    StreamEvent,
    TextItem,
    TokenData,
    ToolUseItem,
    provider_error,
    token_types,
)
from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    TextDelta,
    ThinkingDelta,
    UsageUpdate,
)
from llmbridge.core.events import StreamEvent as NeutralEvent
from llmbridge.core.messages import Message, Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import Usage
from llmbridge.core.stream import EventStream
from llmbridge.dialects.openai.response import finish_reason_for
from llmbridge.features.token_count import (
    count_message_tokens,
    count_request_tokens,
    count_text_tokens,
)
from llmbridge.features.tool_healing import heal_arguments

__all__ = ["art_events", "heal_tool_input", "tool_use_item"]

END = StreamEvent(EventType.END)


async def art_events(
    open_stream: Callable[[], EventStream],
    request: ChatRequest,
    *,
    streaming: bool,
    call_context: str | None,
    started: float,
    neutral_stop_reasons: bool = False,
) -> AsyncGenerator[StreamEvent, None]:
    """The ART events of one call; ``started`` is its ``time.perf_counter()`` start.

    METADATA's ``stop_reason`` is the seed's, the OpenAI ``finish_reason`` (``stop``,
    ``tool_calls``, ``length``, ``content_filter``) whatever the provider, or with
    ``neutral_stop_reasons`` llmbridge's own names (``end_turn``, ``tool_use``...).
    """
    run = _Run(request, call_context, started, neutral_stop_reasons)
    error: StreamEvent | None = None
    try:
        # aclosing: an error or a consumer that stops closes the provider's HTTP stream
        # now, not at garbage collection.
        async with aclosing(open_stream()) as stream:
            async for event in stream:
                out = run.feed(event, streaming)
                if out is not None:
                    yield out
        for out in run.finish(streaming):
            yield out
    except Exception as exc:  # noqa: BLE001 - the seed's contract: errors are events
        error = StreamEvent(EventType.ERROR, provider_error(exc))
    if error is not None:
        yield error
    yield END


class _Run:
    """The state of one call: usage, finished parts, timings."""

    def __init__(
        self,
        request: ChatRequest,
        call_context: str | None,
        started: float,
        neutral_stop_reasons: bool = False,
    ) -> None:
        self.request = request
        self.neutral_stop_reasons = neutral_stop_reasons
        self.response_type, self.thinking_type = token_types(call_context)
        self.started = started
        self.first_token_at: float | None = None
        self.announced_input: int | None = None
        self.usage = Usage()
        self.parts: list[Part] = []
        self.end: ResponseEnd | None = None

    def feed(self, event: NeutralEvent, streaming: bool) -> StreamEvent | None:
        """Take one neutral event; the TOKEN to emit now, if any (streaming only)."""
        if isinstance(event, PartDelta):
            delta = event.delta
            if isinstance(delta, TextDelta | ThinkingDelta) and delta.text:
                return self._token(delta.text, isinstance(delta, ThinkingDelta), streaming)
        elif isinstance(event, PartStart):
            part = event.part
            if isinstance(part, TextPart | ThinkingPart) and part.text:
                return self._token(part.text, isinstance(part, ThinkingPart), streaming)
            if isinstance(part, ToolCallPart):
                self._mark_first_token()
        elif isinstance(event, PartEnd):
            self.parts.append(event.part)
        elif isinstance(event, UsageUpdate):
            self.usage = self.usage.merged(event.usage)
        elif isinstance(event, ResponseStart):
            self.announced_input = event.input_tokens
        elif isinstance(event, ResponseEnd):
            self.end = event
            self.usage = self.usage.merged(event.usage)
        elif isinstance(event, StreamError):
            raise event.error
        return None

    def _token(self, text: str, thinking: bool, streaming: bool) -> StreamEvent | None:
        self._mark_first_token()
        if not streaming:
            return None
        return StreamEvent(
            EventType.TOKEN, text, self.thinking_type if thinking else self.response_type
        )

    def _mark_first_token(self) -> None:
        if self.first_token_at is None:
            self.first_token_at = time.perf_counter()

    def finish(self, streaming: bool) -> list[StreamEvent]:
        """The events after the stream: final tool-use TOKEN or the whole reply, METADATA."""
        if self.end is None:
            raise BackendProtocolError("the provider's stream ended before it was complete")
        finished = time.perf_counter()
        message = Message("assistant", tuple(self.parts))
        tool_uses = [tool_use_item(call) for call in message.tool_calls]
        events: list[StreamEvent] = []
        if streaming:
            if tool_uses:
                events.append(StreamEvent(EventType.TOKEN, list(tool_uses), self.response_type))
        else:
            if message.thinking:
                events.append(StreamEvent(EventType.TOKEN, message.thinking, self.thinking_type))
            events.append(
                StreamEvent(EventType.TOKEN, _reply_data(message, tool_uses), self.response_type)
            )
        events.append(StreamEvent(EventType.METADATA, self._metadata(message, streaming, finished)))
        return events

    def _metadata(self, message: Message, streaming: bool, finished: float) -> LLMMetadata:
        assert self.end is not None
        input_tokens = self.usage.input_tokens
        if input_tokens is None:
            input_tokens = self.announced_input
        output_tokens = self.usage.output_tokens
        estimated = input_tokens is None or output_tokens is None
        if input_tokens is None:
            input_tokens = count_request_tokens(self.request)
        if output_tokens is None:
            output_tokens = count_message_tokens(message)
        thinking = message.thinking
        ttft = None
        if streaming and self.first_token_at is not None:
            ttft = _ms(self.first_token_at - self.started)
        stop = self.end.stop_reason
        return LLMMetadata(
            stop_reason=(
                stop.value
                if self.neutral_stop_reasons
                # Seed 003: "stopReason (from chunk.choices[0].finish_reason)".
                else finish_reason_for(stop, bool(message.tool_calls))
            ),
            input_tokens=input_tokens,
            output_tokens=output_tokens,
            thinking_tokens=count_text_tokens(thinking) if thinking else None,
            time_to_first_token_ms=ttft,
            total_generation_time_ms=_ms(finished - self.started),
            tokens_estimated=estimated,
        )


def _reply_data(message: Message, tool_uses: list[ToolUseItem]) -> TokenData:
    """The single TOKEN of a non-streaming reply, shaped as the seed's adapter does."""
    text = message.text.strip()
    if not tool_uses:
        return text
    items: list[TextItem | ToolUseItem] = []
    if text:
        items.append({"type": "text", "text": text})
    items.extend(tool_uses)
    return items


def _ms(seconds: float) -> float:
    return round(seconds * 1000, 3)


def tool_use_item(call: ToolCallPart) -> ToolUseItem:
    """A finished tool call as a ``tool_use`` item; unparsed arguments are healed."""
    raw = call.raw_arguments
    arguments = call.arguments if raw is None else heal_tool_input(raw)
    return {"type": "tool_use", "id": call.id, "name": call.name, "input": dict(arguments)}


def heal_tool_input(raw: str) -> dict[str, Any]:
    """Arguments that did not parse as a JSON object, repaired the way the gateway
    repairs them (``features.tool_healing``: double encoding, Markdown fences, trailing
    garbage, quotes, a call cut off by ``max_tokens``); what cannot be repaired is kept
    as ``{"raw": text}`` (seed 001's fallback), so nothing is lost."""
    return heal_arguments(raw, None).arguments
