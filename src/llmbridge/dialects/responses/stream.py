"""Responses API streams: neutral events as the server-sent events clients parse.

Every event is ``event: <type>`` plus ``data: {"type": <type>, "sequence_number": n,
...}``, numbered from 0. The grammar (the openai SDK's ``ResponseStreamEvent`` union;
its stream accumulator and Codex's reader check it)::

    response.created, response.in_progress,
    ( response.output_item.added,
      ( message:   response.content_part.added, response.output_text.delta*,
                   response.output_text.done, response.content_part.done
      | reasoning: [response.reasoning_summary_part.added,
                    response.reasoning_summary_text.delta*,
                    response.reasoning_summary_text.done,
                    response.reasoning_summary_part.done]
      | function_call:    response.function_call_arguments.delta,
                          response.function_call_arguments.done
      | custom_tool_call: response.custom_tool_call_input.delta,
                          response.custom_tool_call_input.done ),
      response.output_item.done )*,
    ( response.completed | response.incomplete | error, response.failed )

One core part is one output item, so ``output_index`` counts parts and an item's id is
the same in ``added`` and ``done``. A thinking part's item is announced at its first
text, or at its end when it has none: a part that carries a backend's compaction
(``carried.py``) is known by its signature, which arrives last, and is then a
``compaction`` item, added and done at once. The terminal event carries the whole response
(``response.envelope``) with every finished item and the usage: Codex reads its usage
there. A tool call's arguments go out whole when its part ends, never as the backend's
fragments: tool healing (features/tool_healing.py) rewrites them at the part's end, as
the OpenAI chat encoder explains. A ``StreamError`` is an ``error`` event (what the SDK
and Codex report) and then ``response.failed`` with the items finished so far.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import orjson

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
from llmbridge.dialects.responses.carried import is_compaction
from llmbridge.dialects.responses.errors import failure_code, response_error
from llmbridge.dialects.responses.response import (
    call_arguments,
    custom_input,
    envelope,
    incomplete_reason,
    is_custom_call,
    item_id,
    message_item,
    output_text,
    reasoning_item,
    response_id,
    thinking_item,
    tool_call_item,
)
from llmbridge.dialects.stream_encoding import ENDED_EARLY, encoded

__all__ = ["encode_chat_stream"]


def encode_chat_stream(
    events: AsyncIterator[StreamEvent],
    request: ChatRequest,
    on_end: Callable[[dict[str, Any]], None] | None = None,
) -> AsyncIterator[bytes]:
    """SSE bytes of a Responses stream for an event stream (grammar above).

    ``on_end`` gets the response object of ``response.completed`` or
    ``response.incomplete`` before the bytes of that event are yielded (the gateway
    stores it then, so a client that reads the event can at once retrieve it)."""
    encoder = StreamEncoder(request, on_end)

    def unfinished() -> bytes:
        # Ended with neither ResponseEnd nor StreamError: say so rather than end as if
        # the reply were complete.
        error = BackendProtocolError(ENDED_EARLY)
        return escape_line_breaks(encoder.fail(error))

    # Escaped: a raw U+2028 would split the line (framing).
    return encoded(events, encoder.encode, lambda: encoder.finished, unfinished)


_TEXT_DELTA_HEAD = (
    b"event: response.output_text.delta\n"
    b'data: {"type":"response.output_text.delta","sequence_number":'
)


class _OpenItem:
    """The output item being streamed."""

    __slots__ = ("announced", "delta_tail", "id", "index", "summary_open", "texts")

    def __init__(self, item: str, index: int, *, announced: bool = True) -> None:
        self.id = item
        self.index = index
        self.texts: list[str] = []
        self.summary_open = False
        self.announced = announced
        """Its ``output_item.added`` was sent (a thinking part's waits: module docstring)."""
        # What follows the sequence number in each of this item's text deltas, encoded
        # once: a delta is then two small joins and one dumps of its text (the hot path).
        self.delta_tail = (
            b',"item_id":'
            + orjson.dumps(item)
            + b',"output_index":'
            + str(index).encode()
            + b',"content_index":0,"delta":'
        )


class StreamEncoder:
    """The state of one encoded stream: ``encode`` returns the bytes for each event."""

    def __init__(
        self, request: ChatRequest, on_end: Callable[[dict[str, Any]], None] | None = None
    ) -> None:
        self._request = request
        self._on_end = on_end
        self._seq = 0
        self._id = ""
        self._created = 0.0
        self._started = False
        self._output: list[dict[str, Any]] = []
        self._open: _OpenItem | None = None
        self._usage = Usage()
        self.finished = False

    def _event(self, kind: str, payload: dict[str, Any]) -> bytes:
        data = {"type": kind, "sequence_number": self._seq, **payload}
        self._seq += 1
        return sse_event(data, kind)

    def encode(self, event: StreamEvent) -> bytes:
        head = b"" if self._started else self._start(event)
        if isinstance(event, PartDelta):
            return head + self._delta(event)
        if isinstance(event, PartStart):
            return head + self._part_start(event)
        if isinstance(event, PartEnd):
            return head + self._part_end(event)
        if isinstance(event, UsageUpdate):
            self._usage = self._usage.merged(event.usage)
        elif isinstance(event, ResponseEnd):
            return head + self._end(event)
        elif isinstance(event, StreamError):
            return head + self.fail(event.error)
        return head

    # -- lifecycle --------------------------------------------------------------------

    def _start(self, event: StreamEvent) -> bytes:
        self._started = True
        start = event if isinstance(event, ResponseStart) else None
        self._id = response_id(start.id if start else "")
        self._created = start.created if start and start.created else time.time()
        if start is not None and start.input_tokens is not None:
            self._usage = Usage(input_tokens=start.input_tokens)
        response = self._envelope("in_progress")
        return self._event("response.created", {"response": response}) + self._event(
            "response.in_progress", {"response": response}
        )

    def _envelope(self, status: str, **extra: Any) -> dict[str, Any]:
        return envelope(self._request, self._id, self._created, status, list(self._output), **extra)

    def _end(self, event: ResponseEnd) -> bytes:
        self.finished = True
        usage = self._usage.merged(event.usage)
        reason = incomplete_reason(event.stop_reason)
        if reason is not None:
            response = self._envelope("incomplete", usage=usage, incomplete=reason)
            kind = "response.incomplete"
        else:
            response = self._envelope("completed", usage=usage)
            kind = "response.completed"
        if self._on_end is not None:
            self._on_end(response)
        return self._event(kind, {"response": response})

    def fail(self, error: LLMBridgeError) -> bytes:
        """The ``error`` event and ``response.failed``: the stream's last events."""
        self.finished = True
        head = b"" if self._started else self._start(StreamError(error))
        failed = self._envelope("failed", usage=self._usage, error=response_error(error))
        return (
            head
            + self._event(
                "error",
                {
                    "code": error.code or failure_code(error),
                    "message": error.message,
                    "param": error.param,
                },
            )
            + self._event("response.failed", {"response": failed})
        )

    # -- items ------------------------------------------------------------------------

    def start(self, event: ResponseStart) -> bytes:
        """``response.created`` and ``response.in_progress``, once."""
        return b"" if self._started else self._start(event)

    def event(self, kind: str, payload: dict[str, Any]) -> bytes:
        """One event of this stream, numbered (an item the core has no part for)."""
        return self._event(kind, payload)

    def open_item(self, item: dict[str, Any]) -> tuple[bytes, int]:
        """``output_item.added`` of an item the core has no part for, and its index
        (no core part is open between the rounds, where such items come)."""
        index = len(self._output)
        return self._item_added(item, index), index

    def close_item(self, index: int, item: dict[str, Any]) -> bytes:
        """``output_item.done`` of an item ``open_item`` opened."""
        self._output.append(item)
        return self._event("response.output_item.done", {"output_index": index, "item": item})

    def _item_added(self, item: dict[str, Any], index: int) -> bytes:
        return self._event("response.output_item.added", {"output_index": index, "item": item})

    def _item_done(self, item: dict[str, Any]) -> bytes:
        assert self._open is not None
        index = self._open.index
        self._output.append(item)
        self._open = None
        return self._event("response.output_item.done", {"output_index": index, "item": item})

    def _part_start(self, event: PartStart) -> bytes:
        part = event.part
        index = len(self._output)
        if isinstance(part, TextPart):
            self._open = opened = _OpenItem(item_id("message"), index)
            ids = {"item_id": opened.id, "output_index": index, "content_index": 0}
            chunk = self._item_added(message_item(opened.id, [], "in_progress"), index)
            chunk += self._event("response.content_part.added", {**ids, "part": output_text("")})
            return chunk + self._text(part.text)
        if isinstance(part, ThinkingPart):
            self._open = _OpenItem(item_id("reasoning"), index, announced=False)
            return self._summary(part.text)
        if isinstance(part, ToolCallPart):
            custom = is_custom_call(part, self._request)
            self._open = opened = _OpenItem(item_id("custom" if custom else "function_call"), index)
            item = tool_call_item(opened.id, part, self._request, "in_progress")
            item["input" if custom else "arguments"] = ""
            return self._item_added(item, index)
        return b""

    def _delta(self, event: PartDelta) -> bytes:
        delta = event.delta
        if isinstance(delta, TextDelta):
            return self._text(delta.text)
        if isinstance(delta, ThinkingDelta):
            return self._summary(delta.text)
        return b""  # tool arguments go out whole at the part's end; signatures at its end

    def _text(self, text: str) -> bytes:
        opened = self._open
        if not text or opened is None:
            return b""
        opened.texts.append(text)
        # _event's bytes, built from pre-encoded pieces (the same JSON, key for key).
        seq = self._seq
        self._seq = seq + 1
        return (
            _TEXT_DELTA_HEAD
            + str(seq).encode()
            + opened.delta_tail
            + orjson.dumps(text)
            + b',"logprobs":[]}\n\n'
        )

    def _summary(self, text: str) -> bytes:
        opened = self._open
        if not text or opened is None:
            return b""
        ids = {"item_id": opened.id, "output_index": opened.index, "summary_index": 0}
        chunk = self._announce_reasoning(opened)
        if not opened.summary_open:
            opened.summary_open = True
            part = {"type": "summary_text", "text": ""}
            chunk += self._event("response.reasoning_summary_part.added", {**ids, "part": part})
        opened.texts.append(text)
        return chunk + self._event("response.reasoning_summary_text.delta", {**ids, "delta": text})

    def _announce_reasoning(self, opened: _OpenItem) -> bytes:
        """The reasoning item's ``output_item.added``, once."""
        if opened.announced:
            return b""
        opened.announced = True
        item = {"id": opened.id, "type": "reasoning", "summary": []}
        return self._item_added(item, opened.index)

    def _part_end(self, event: PartEnd) -> bytes:
        opened = self._open
        if opened is None:
            return b""
        part = event.part
        if isinstance(part, TextPart):
            ids = {"item_id": opened.id, "output_index": opened.index, "content_index": 0}
            text = part.text
            chunk = self._event("response.output_text.done", {**ids, "text": text, "logprobs": []})
            chunk += self._event("response.content_part.done", {**ids, "part": output_text(text)})
            return chunk + self._item_done(message_item(opened.id, [text]))
        if isinstance(part, ThinkingPart):
            if not opened.announced and is_compaction(part.signature):
                item = thinking_item(part, self._request)
                self._open = None
                self._output.append(item)
                done = {"output_index": opened.index, "item": item}
                return self._item_added(item, opened.index) + self._event(
                    "response.output_item.done", done
                )
            chunk = self._announce_reasoning(opened)
            if opened.summary_open:
                ids = {"item_id": opened.id, "output_index": opened.index, "summary_index": 0}
                summary = {"type": "summary_text", "text": part.text}
                chunk = self._event(
                    "response.reasoning_summary_text.done", {**ids, "text": part.text}
                )
                chunk += self._event(
                    "response.reasoning_summary_part.done", {**ids, "part": summary}
                )
            return chunk + self._item_done(reasoning_item(opened.id, part, self._request))
        if isinstance(part, ToolCallPart):
            ids = {"item_id": opened.id, "output_index": opened.index}
            item = tool_call_item(opened.id, part, self._request)
            if item["type"] == "custom_tool_call":
                text = custom_input(part)
                chunk = self._event("response.custom_tool_call_input.delta", {**ids, "delta": text})
                chunk += self._event("response.custom_tool_call_input.done", {**ids, "input": text})
            else:
                text = call_arguments(part)
                chunk = self._event(
                    "response.function_call_arguments.delta", {**ids, "delta": text}
                )
                chunk += self._event(
                    "response.function_call_arguments.done", {**ids, "arguments": text}
                )
            return chunk + self._item_done(item)
        return b""
