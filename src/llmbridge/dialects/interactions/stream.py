"""Interactions streams: neutral events as the server-sent events the SDKs parse.

Every event is ``event: <type>`` plus ``data: {"event_type": <type>, ...}``; the stream
ends with ``data: [DONE]`` (the SDKs' sentinel). The grammar (google-genai's
``InteractionSSEEvent`` union)::

    interaction.created,
    ( step.start, step.delta*, step.stop )*,
    ( interaction.completed | error ),
    [DONE]

One core part is one step, numbered by ``index`` from 0: a text part a ``model_output``
step (``step.delta`` of ``{"type": "text"}``), a thinking part a ``thought`` step
(``thought_summary`` deltas, unless the client asked for ``thinking_summaries:
"none"``, and its ``thought_signature`` whole before the step stops: the signature is
wrapped for the SDKs' base64 check only once it is complete), a tool call a
``function_call`` step sent whole at its part's end, arguments included (tool healing,
features/tool_healing.py, may rewrite them there, and the SDKs read a call from its
``step.start``). A thought with neither a summary to show nor a signature is no step.

``interaction.created`` carries the resource with ``status: in_progress``;
``interaction.completed`` the whole resource (``response.py``) with every step and the
usage, which is also what ``on_end`` gets, before its bytes are yielded (the gateway
stores it then, so a client that reads the event can at once ``GET`` it). A
``StreamError`` is an ``error`` event (``errors.stream_error``), then ``[DONE]``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    UsageUpdate,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import Usage
from llmbridge.dialects.framing import escape_line_breaks, sse_event
from llmbridge.dialects.gemini.response import wire_signature
from llmbridge.dialects.interactions.errors import stream_error
from llmbridge.dialects.interactions.response import (
    encode_usage,
    envelope,
    interaction_id,
    status_for,
    summaries_shown,
    timestamp,
)
from llmbridge.dialects.interactions.steps import output_step
from llmbridge.dialects.stream_encoding import ENDED_EARLY, encoded

__all__ = ["DONE", "encode_chat_stream", "replay_stream"]

DONE = b"data: [DONE]\n\n"
"""The last event of every stream."""


def encode_chat_stream(
    events: AsyncIterator[StreamEvent],
    request: ChatRequest,
    on_end: Callable[[dict[str, Any]], None] | None = None,
) -> AsyncIterator[bytes]:
    """SSE bytes of an interaction's stream for an event stream (grammar above).

    ``on_end`` gets the resource of ``interaction.completed`` before the bytes of that
    event are yielded."""
    encoder = _Encoder(request, on_end)
    # Ended with neither ResponseEnd nor StreamError: say so rather than end as if
    # the reply were complete.
    return encoded(
        events,
        encoder.encode,
        lambda: encoder.finished,
        lambda: encoder.fail(BackendProtocolError(ENDED_EARLY)),
        escape=False,  # each event is escaped as it is framed
    )


def _event(event_type: str, body: dict[str, Any]) -> bytes:
    # Raw U+2028 would split the line for line-splitting readers (framing).
    return escape_line_breaks(sse_event({"event_type": event_type, **body}, event=event_type))


class _Encoder:
    """The state of one encoded stream."""

    def __init__(
        self, request: ChatRequest, on_end: Callable[[dict[str, Any]], None] | None
    ) -> None:
        self.request = request
        self.on_end = on_end
        self.shown = summaries_shown(request)
        self.id = ""
        self.created = ""
        self.started = False
        self.finished = False
        self.usage = Usage()
        self.steps: list[dict[str, Any]] = []
        self.open: int | None = None
        """The index of the step being streamed (``None``: none is open)."""

    def encode(self, event: StreamEvent) -> bytes:
        if self.finished:
            return b""
        if isinstance(event, PartDelta) and self.open is not None:  # the hot path
            return self._delta(event)
        head = b"" if self.started else self._start(event)
        if isinstance(event, PartStart):
            return head + self._part_start(event)
        if isinstance(event, PartDelta):
            return head + self._delta(event)
        if isinstance(event, PartEnd):
            return head + self._part_end(event)
        if isinstance(event, UsageUpdate):
            self.usage = self.usage.merged(event.usage)
        elif isinstance(event, ResponseEnd):
            return head + self._end(event)
        elif isinstance(event, StreamError):
            return head + self.fail(event.error)
        return head

    def fail(self, error: LLMBridgeError) -> bytes:
        """The ``error`` event and the end of the stream."""
        head = b"" if self.started else self._start(None)
        self.finished = True
        return head + _event("error", {"error": stream_error(error)}) + DONE

    def _start(self, event: StreamEvent | None) -> bytes:
        self.started = True
        start = event if isinstance(event, ResponseStart) else None
        self.id = interaction_id(start.id if start is not None else "")
        self.created = timestamp(start.created if start is not None else 0.0)
        if start is not None and start.input_tokens is not None:
            self.usage = Usage(input_tokens=start.input_tokens)
        interaction = envelope(self.request, self.id, "in_progress", self.created)
        return _event("interaction.created", {"interaction": interaction})

    def _open_step(self, step: dict[str, Any]) -> bytes:
        self.open = len(self.steps)
        return _event("step.start", {"index": self.open, "step": step})

    def _step_delta(self, delta: dict[str, Any]) -> bytes:
        return _event("step.delta", {"index": self.open, "delta": delta})

    def _close_step(self, step: dict[str, Any]) -> bytes:
        index = len(self.steps)
        self.steps.append(step)
        self.open = None
        return _event("step.stop", {"index": index})

    def _part_start(self, event: PartStart) -> bytes:
        part = event.part
        if isinstance(part, TextPart):
            chunk = self._open_step({"type": "model_output", "content": []})
            if part.text:
                chunk += self._step_delta({"type": "text", "text": part.text})
            return chunk
        if isinstance(part, ThinkingPart) and part.text and self.shown:
            return self._open_step({"type": "thought"}) + self._thought_delta(part.text)
        return b""  # a thought opens with its first summary; a call goes out whole

    def _thought_delta(self, text: str) -> bytes:
        content = {"type": "text", "text": text}
        return self._step_delta({"type": "thought_summary", "content": content})

    def _delta(self, event: PartDelta) -> bytes:
        delta = event.delta
        if isinstance(delta, TextDelta):
            if self.open is None:  # a delta before its part's start: open it now
                return self._open_step({"type": "model_output", "content": []}) + self._step_delta(
                    {"type": "text", "text": delta.text}
                )
            return self._step_delta({"type": "text", "text": delta.text})
        if isinstance(delta, ThinkingDelta) and delta.text and self.shown:
            head = b"" if self.open is not None else self._open_step({"type": "thought"})
            return head + self._thought_delta(delta.text)
        return b""  # signatures and call arguments go out whole, at the part's end

    def _part_end(self, event: PartEnd) -> bytes:
        part = event.part
        step = output_step(part, shown=self.shown)
        if isinstance(part, ToolCallPart) and step is not None:
            return self._open_step(step) + self._close_step(step)
        if isinstance(part, ThinkingPart):
            if step is None:
                return b""  # nothing to show and nothing to send back
            chunk = b"" if self.open is not None else self._open_step({"type": "thought"})
            if part.signature:
                signature = wire_signature(part.signature)
                chunk += self._step_delta({"type": "thought_signature", "signature": signature})
            return chunk + self._close_step(step)
        if step is None or self.open is None:
            return b""
        return self._close_step(step)

    def _end(self, event: ResponseEnd) -> bytes:
        self.finished = True
        usage = self.usage.merged(event.usage)
        interaction = envelope(self.request, self.id, status_for(event.stop_reason), self.created)
        interaction["steps"] = self.steps
        interaction["usage"] = encode_usage(usage)
        if self.on_end is not None:
            self.on_end(interaction)
        return _event("interaction.completed", {"interaction": interaction}) + DONE


def replay_stream(interaction: dict[str, Any]) -> bytes:
    """A stored interaction as the stream that made it (``GET`` with ``stream=true``):
    ``interaction.created``, each step whole in its ``step.start`` and ``step.stop``,
    ``interaction.completed``, ``[DONE]``."""
    steps = list(interaction.get("steps") or ())
    head = {k: v for k, v in interaction.items() if k not in ("steps", "usage", "input")}
    chunks = [_event("interaction.created", {"interaction": {**head, "status": "in_progress"}})]
    for index, step in enumerate(steps):
        chunks.append(_event("step.start", {"index": index, "step": step}))
        chunks.append(_event("step.stop", {"index": index}))
    chunks.append(_event("interaction.completed", {"interaction": interaction}))
    chunks.append(DONE)
    return b"".join(chunks)
