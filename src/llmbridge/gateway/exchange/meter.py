"""What a request's reply said, noted as its events pass once: ``ReplyMeter``.

Each ``Exchange`` (exchange.py) owns one. ``watch`` hands a streamed reply's events on
to the dialect's encoder, ``relay`` writes a relayed stream's bytes (the pass-through
path, core/relay.py), ``collect`` accumulates a reply sent whole; each notes, from
each event, the usage (later counts win, as ``core.accumulate`` merges them), the text
generated so far, why the reply ended, and a failure. A failure after the first event
becomes a ``StreamError`` for the encoder (``watch``) or is raised (``collect``); either
way it is noted, so the ledger and the metrics see it.

The meter also holds the request's failure from before the reply (``failed``), so one
field says how the request failed, whichever part saw it last. And what the ledger keeps
of the reply when it keeps bodies (``ledger.keep_bodies``): ``kept_reply``.

A reply cut short (the client left mid-stream, the stream failed, a backend that reports
no counts) is billed for what was generated (``billed_usage``): the text streamed so
far, counted as it passed, and the prompt's estimate (a dropped stream used to be free).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Callable

import orjson

from llmbridge.backends.base import Backend
from llmbridge.core.accumulate import Accumulator
from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    Relayed,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolArgsDelta,
    UsageUpdate,
)
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.core.stream import EventBatches, EventStream
from llmbridge.features.token_count import TextTally
from llmbridge.web.render import to_bridge_error

__all__ = ["ReplyMeter"]

log = logging.getLogger("llmbridge.gateway")


class ReplyMeter:
    """What one request's reply said (module docstring)."""

    __slots__ = ("failure", "generated", "kept", "stop_reason", "usage")

    def __init__(self) -> None:
        self.usage: Usage | None = None
        """Counts from the reply (``add_usage``)."""
        self.generated = TextTally()
        """The tokens of the text deltas streamed so far, counted as they pass (counts,
        never the text): what a dropped stream is billed for when the backend's usage
        never came."""
        self.stop_reason: StopReason | None = None
        """Why the reply ended, when it said (the trace's finish reasons)."""
        self.failure: LLMBridgeError | None = None
        """The request's latest failure, before or inside the reply (``failed``)."""
        self.kept: ChatResponse | Accumulator | RelayedReply | None = None
        """The reply, kept only when the ledger keeps bodies (``ledger.keep_bodies``)."""

    def add_usage(self, usage: Usage) -> None:
        """Counts from the stream; later values win, as ``core.accumulate`` merges
        them, so the ledger holds what the reply's ``usage`` said."""
        self.usage = usage if self.usage is None else self.usage.merged(usage)

    def failed(self, error: LLMBridgeError) -> None:
        """The request failed with ``error`` (before or inside the reply)."""
        self.failure = error

    # -- the reply's events -----------------------------------------------------------

    def _note(self, event: StreamEvent) -> None:
        """What the ledger needs from one event of the reply: text generated, usage,
        a failure."""
        if isinstance(event, PartDelta):
            delta = event.delta
            if isinstance(delta, TextDelta | ThinkingDelta):
                self.generated.add(delta.text)
            elif isinstance(delta, ToolArgsDelta):
                self.generated.add(delta.json_fragment)
        elif isinstance(event, ResponseEnd):
            self.add_usage(event.usage)
            self.stop_reason = event.stop_reason
        elif isinstance(event, UsageUpdate):
            self.add_usage(event.usage)
        elif isinstance(event, StreamError):
            self.failed(event.error)
        elif isinstance(event, Relayed):
            if event.text:
                self.generated.add(event.text)
            if event.error is not None:
                self.failed(event.error)

    def _note_kept(self, event: StreamEvent) -> None:
        """``_note``, and the event added to the reply kept for the request log."""
        self._note(event)
        if isinstance(self.kept, Accumulator) and not isinstance(event, StreamError | Relayed):
            self.kept.add(event)
        elif isinstance(event, Relayed):
            self.kept = _relayed_kept(self.kept, event)

    def _note_first(self, first: StreamEvent) -> None:
        if isinstance(first, ResponseStart) and first.input_tokens:
            self.add_usage(Usage(input_tokens=first.input_tokens))  # as accumulate reads it

    def _stream_failed(self, exc: Exception, backend: Backend | None) -> LLMBridgeError:
        error = to_bridge_error(exc)
        self.failed(error)
        name = backend.name if backend is not None else "?"
        log.warning("stream from backend %s failed: %s", name, error.message)
        return error

    def watch(
        self,
        first: StreamEvent,
        events: EventStream,
        *,
        backend: Backend | None,
        keep: bool,
    ) -> EventStream:
        """The reply's events (``first`` already read), with its usage and generated
        text noted, and a failure after the first event turned into a ``StreamError``
        (the encoder renders the dialect's in-stream error). ``backend``: the one that
        serves it (for the log); ``keep``: the reply is kept for the request log. A
        reply read a batch at a time (``core.stream.EventBatches``) is handed on so."""
        if isinstance(events, EventBatches):
            return EventBatches(self._watch_batches(first, events, backend, keep))
        return self._watch_events(first, events, backend, keep)

    def _noting(self, first: StreamEvent, keep: bool) -> Callable[[StreamEvent], None]:
        """How each event after ``first`` is noted; ``first`` noted."""
        note = self._note
        if keep:  # bodies kept: the reply too
            note = self._note_kept
            self.kept = Accumulator()
            self.kept.add(first)
        self._note_first(first)
        return note

    async def _watch_events(
        self, first: StreamEvent, events: EventStream, backend: Backend | None, keep: bool
    ) -> AsyncGenerator[StreamEvent, None]:
        try:
            note = self._noting(first, keep)
            yield first
            async for event in events:
                note(event)
                yield event
        except Exception as exc:  # noqa: BLE001 - every failure becomes an in-stream error
            yield StreamError(self._stream_failed(exc, backend))
        finally:
            await events.aclose()

    async def _watch_batches(
        self, first: StreamEvent, events: EventBatches, backend: Backend | None, keep: bool
    ) -> AsyncGenerator[list[StreamEvent], None]:
        # ``first`` goes on alone, at once: the client's first token waits for no more.
        try:
            note = self._noting(first, keep)
            yield [first]
            async for batch in events.batches():
                for event in batch:
                    note(event)
                yield batch
        except Exception as exc:  # noqa: BLE001 - every failure becomes an in-stream error
            yield [StreamError(self._stream_failed(exc, backend))]
        finally:
            await events.aclose()

    async def relay(
        self,
        first: StreamEvent,
        events: EventStream,
        *,
        error_frame: Callable[[LLMBridgeError], bytes],
        backend: Backend | None,
        keep: bool,
    ) -> AsyncGenerator[bytes, None]:
        """A relayed stream's bytes (``first`` already read), its events noted as
        ``watch`` notes them: each ``Relayed`` event's bytes as they came; the backend's
        own in-band error relayed as it sent it, and the end. A failure the gateway saw
        after the first byte (the connection dropped, the backend went silent) is the
        dialect's in-stream error, ``error_frame``, as on the translated path. One hop
        where watching the events and writing their bytes would be two: each read of a
        relayed stream passes here."""
        note = self._note
        if keep:  # bodies kept: the relayed bytes too
            note = self._note_kept
        try:
            self._note_first(first)
            async for event in events:
                note(event)
                if isinstance(event, Relayed):
                    if event.data:
                        yield event.data
                    if event.error is not None:
                        return
                elif isinstance(event, ResponseEnd):
                    return
                elif isinstance(event, StreamError):
                    yield error_frame(event.error)
                    return
            ended = BackendProtocolError("the backend's stream ended before it was complete")
            self.failed(ended)
            yield error_frame(ended)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an in-stream error
            yield error_frame(self._stream_failed(exc, backend))
        finally:
            await events.aclose()

    async def collect(
        self,
        first: StreamEvent,
        events: EventStream,
        *,
        backend: Backend | None,
        keep: bool,
        answered: Callable[[], None],
    ) -> ChatResponse:
        """The non-streamed reply, ``first`` already read: ``watch``'s noting, with the
        events accumulated in place (one async-generator hop fewer per event than
        accumulating ``watch``). A failure is raised, noted. ``answered`` is called
        once the backend's stream is done with, however it ended (the wait on it ends
        there)."""
        acc = Accumulator()
        acc.add(first)
        await self._drain(first, events, acc.add, backend=backend, answered=answered)
        response = acc.response()
        if keep:  # kept for the request log
            self.kept = response
        return response

    async def collect_relayed(
        self,
        first: StreamEvent,
        events: EventStream,
        *,
        backend: Backend | None,
        keep: bool,
        answered: Callable[[], None],
    ) -> bytes:
        """``collect`` for the pass-through path: the reply's relayed bytes, the events
        noted as ``collect`` notes them."""
        parts: list[bytes] = []

        def take(event: StreamEvent) -> None:
            if isinstance(event, Relayed):
                if event.error is not None:
                    raise event.error
                parts.append(event.data)
            elif isinstance(event, StreamError):
                raise event.error

        await self._drain(first, events, take, backend=backend, answered=answered)
        body = b"".join(parts)
        if keep:
            self.kept = _relayed_kept(None, Relayed(body))
        return body

    async def _drain(
        self,
        first: StreamEvent,
        events: EventStream,
        take: Callable[[StreamEvent], None],
        *,
        backend: Backend | None,
        answered: Callable[[], None],
    ) -> None:
        """Each event of a reply sent whole noted, then handed to ``take`` (which
        raises for a failure); a failure noted, logged and raised as an
        ``LLMBridgeError``; ``answered`` called once the stream is done with."""
        note = self._note
        ended = False
        try:
            self._note_first(first)
            async for event in events:
                note(event)
                take(event)  # a StreamError raises its error
            ended = True  # the stream ran out: nothing of it is left open to close
        except Exception as exc:  # noted, logged, and raised as an LLMBridgeError
            error = self._stream_failed(exc, backend)
            if error is exc:
                raise
            raise error from exc
        finally:
            if not ended:
                # Shielded: a client that left must not leave the backend's stream open.
                await asyncio.shield(events.aclose())
            answered()

    # -- the bill and what is kept ----------------------------------------------------

    @property
    def cut_short(self) -> bool:
        """Text was generated but the reply's final counts never came (the client
        left mid-stream, the stream failed, a backend that reports none)."""
        usage = self.usage
        return self.generated.pieces > 0 and (usage is None or usage.output_tokens is None)

    def billed_usage(self, prompt_tokens: int | None) -> Usage | None:
        """The usage to bill: the reply's, or for a reply cut short, what was generated
        so far counted, with ``prompt_tokens`` (the prompt's estimate)."""
        usage = self.usage
        if not self.cut_short:
            return usage
        counted = Usage(
            input_tokens=prompt_tokens,
            output_tokens=self.generated.tokens,
        )
        return counted if usage is None else counted.merged(usage)

    def kept_reply(self) -> object:
        """The reply to keep: the whole response, or what a stream that did not end
        had finished."""
        reply = self.kept
        if isinstance(reply, RelayedReply):
            return reply.kept()
        if isinstance(reply, Accumulator):
            try:
                return reply.response()
            except LLMBridgeError:  # it did not end: its finished parts, said so
                return {"incomplete": True, "parts": reply.parts, "usage": reply.usage}
        return reply


class RelayedReply:
    """A relayed reply kept for the request log (its bytes, up to ``KEPT_BYTES``), as
    JSON when it is a reply sent whole, else as its frames' text."""

    __slots__ = ("data", "whole")

    KEPT_BYTES = 1024 * 1024

    def __init__(self) -> None:
        self.data = bytearray()
        self.whole = True
        """Whether everything relayed is kept (none was cut at ``KEPT_BYTES``)."""

    def add(self, data: bytes) -> None:
        room = self.KEPT_BYTES - len(self.data)
        if len(data) > room:
            self.whole = False
        self.data += data[: max(room, 0)]

    def kept(self) -> object:
        if self.whole:
            try:
                return orjson.loads(self.data)
            except orjson.JSONDecodeError:
                pass  # a stream's frames
        return {"relayed": self.data.decode("utf-8", "replace"), "whole": self.whole}


def _relayed_kept(kept: object, event: Relayed) -> RelayedReply:
    reply = kept if isinstance(kept, RelayedReply) else RelayedReply()
    reply.add(event.data)
    return reply
