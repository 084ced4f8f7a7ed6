"""OpenAI Responses on the pass-through path (core/relay.py): which bodies may relay
(``relayable``), the client's body as the backend gets it (``relay_request``), and the
backend's reply relayed as it came, read only for what the gateway records
(``ResponsesStreamRelay`` for a stream, ``relay_reply`` for a reply sent whole).

A body relays only when llmbridge issued nothing in it: an item whose
``encrypted_content`` llmbridge sealed (``"llmbridge.`` ...: reasoning.py, summary.py)
must be opened for the backend, so such a body is translated. What is set in the body:
the backend's model name where the route maps one, and ``store: false`` where the body
does not say it (the gateway keeps responses itself: a response it is to keep is
translated, and the backend keeps nothing, as on the translated path). Where the route
maps the model's name, the events that carry the response object (``response.created``
... ``response.completed``) name the model the client asked for; otherwise the bytes are
the backend's.

Each frame is parsed (orjson) for what the gateway records: the usage of
``response.completed`` (or ``.incomplete``), the stop reason, and the text of the
deltas (a cut stream's bill; an item sent whole without deltas counts its text at its
``output_item.done``). ``response.created`` and ``response.in_progress`` are held back
until the first output event, as the translated path's decoder holds its start: a
server that fails a request before any output (``response.failed`` or ``error`` first)
fails it before the first byte, so it is retried, sent to a fallback or answered as an
HTTP error. The backend's own ``error`` and ``response.failed`` after that are relayed
as they came and end the stream. A failure the gateway sees after the first byte (the
connection dropped, the stream ended before its terminal event) ends the stream with
the events the translated path writes (``failed``: ``error`` then ``response.failed``),
numbered after the backend's last event and carrying its response: only the reader of
the frames knows those, so the backend writes them here rather than the route's
stateless ``relay_error`` (kept for what fails outside the backend).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import Relayed, ResponseEnd, ResponseStart, StreamError, StreamEvent
from llmbridge.core.ids import new_id
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.fields import nonempty_str, object_or_empty, str_or_none
from llmbridge.dialects.framing import escape_line_breaks, sse_event
from llmbridge.dialects.openai.response import reply_created
from llmbridge.dialects.relay_frames import FrameBuffer, event_of, json_object, mapped_model
from llmbridge.dialects.responses.decode import INCOMPLETE_STOP, decode_usage, in_band_error
from llmbridge.dialects.responses.errors import failure_code, response_error

__all__ = [
    "DIALECT",
    "ResponsesStreamRelay",
    "relay_error",
    "relay_reply",
    "relay_request",
    "relayable",
]

DIALECT = "responses"
"""``Capabilities.relays`` of a backend that relays a Responses client's body."""

_SEALED = b'"llmbridge.'
"""How every ``encrypted_content`` llmbridge issues begins, as JSON spells it."""
_BOUNDARY = re.compile(rb"(\r?\n\r?\n)")
_STARTING = frozenset({"response.created", "response.in_progress", "response.queued"})
"""Events held back until the first output event (module docstring)."""
_ENDING = frozenset({"response.completed", "response.incomplete"})
_TEXT_DELTAS = frozenset(
    {
        "response.output_text.delta",
        "response.refusal.delta",
        "response.reasoning_summary_text.delta",
        "response.function_call_arguments.delta",
        "response.custom_tool_call_input.delta",
    }
)
_SUMMARY = "response.reasoning_summary_text.delta"
_RAW_REASONING = "response.reasoning_text.delta"
_CALLS = frozenset({"function_call", "custom_tool_call"})
_SENDER = "the Responses backend"
_FAILED_FALLBACK = "the Responses backend failed the response"
_ERROR_FALLBACK = "the Responses backend reported an error"


def relayable(raw: bytes | bytearray) -> bool:
    """Whether a body may relay: nothing in it is sealed by llmbridge (a false alarm,
    such a string in the client's own text, only costs a translation)."""
    return _SEALED not in raw


def relay_request(request: ChatRequest) -> tuple[bytes, str | None]:
    """The body to send for ``request`` (its ``relay`` set), and the model name the
    reply is to carry instead of the backend's (``None``: as it came)."""
    relay = request.relay
    assert relay is not None
    body = relay.body
    changed, client_model = mapped_model(request)
    if body.get("store") is not False:
        changed["store"] = False
    if not changed:
        return relay.raw, None
    return orjson.dumps({**body, **changed}), client_model


def _renamed(frame: bytes, name: bytes | None, event: dict[str, Any], model: str) -> bytes:
    """``frame`` whose response object names ``model``: the name's bytes replaced where
    the frame spells them once as orjson would, else the event written again."""
    response = event.get("response")
    if not isinstance(response, dict) or response.get("model") in (None, model):
        return frame
    spelled = b'"model":' + orjson.dumps(response["model"])
    if frame.count(spelled) == 1:
        return frame.replace(spelled, b'"model":' + orjson.dumps(model))
    again = {**event, "response": {**response, "model": model}}
    kind = name.decode() if name else None
    return escape_line_breaks(sse_event(again, kind)).removesuffix(b"\n\n")


class _Reading:
    """What the frames of one reply said so far."""

    __slots__ = (
        "output",
        "response",
        "saw_tool_call",
        "sequence",
        "streamed",
        "summarised",
        "usage",
    )

    def __init__(self) -> None:
        self.usage = Usage()
        self.saw_tool_call = False
        self.response: dict[str, Any] = {}
        """The latest response object the backend sent."""
        self.output: list[Any] = []
        """The items done so far (a failure the gateway writes lists them)."""
        self.streamed: set[object] = set()
        """Output indices whose text came in deltas (their ``done`` repeats it)."""
        self.summarised: set[object] = set()
        """Output indices whose reasoning summary streamed (their raw text is not billed)."""
        self.sequence = -1

    def event(self, kind: str, event: dict[str, Any], texts: list[str]) -> None:
        """Note one event (not a terminal or failing one)."""
        if kind in _TEXT_DELTAS or kind == _RAW_REASONING:
            delta = event.get("delta")
            index = event.get("output_index")
            if not isinstance(delta, str) or not delta:
                return
            if kind == _SUMMARY:
                self.summarised.add(index)
            elif kind == _RAW_REASONING and index in self.summarised:
                return  # one of the two is the item's text, as the decoder reads it
            texts.append(delta)
            self.streamed.add(index)
        elif kind == "response.output_item.added":
            if object_or_empty(event.get("item")).get("type") in _CALLS:
                self.saw_tool_call = True
        elif kind == "response.output_item.done":
            item = object_or_empty(event.get("item"))
            if item.get("type") in _CALLS:
                self.saw_tool_call = True
            index = event.get("output_index")
            if index in self.streamed:
                self.streamed.discard(index)
            else:
                texts.extend(_item_texts(item))
            self.output.append(item)

    def end(self, kind: str, response: dict[str, Any]) -> ResponseEnd:
        self.response = response
        self.usage = self.usage.merged(decode_usage(response.get("usage")))
        if kind == "response.incomplete":
            details = object_or_empty(response.get("incomplete_details"))
            stop = INCOMPLETE_STOP.get(str_or_none(details.get("reason")) or "")
            stop_reason = stop or StopReason.MAX_TOKENS
        else:
            stop_reason = StopReason.TOOL_USE if self.saw_tool_call else StopReason.END_TURN
        return ResponseEnd(stop_reason=stop_reason, usage=self.usage)


def _item_texts(item: dict[str, Any]) -> list[str]:
    """The text of an item sent whole (no deltas before its ``done``)."""
    kind = item.get("type")
    if kind == "function_call":
        arguments = item.get("arguments")
        return [arguments] if isinstance(arguments, str) and arguments else []
    if kind == "custom_tool_call":
        text = item.get("input")
        return [text] if isinstance(text, str) and text else []
    parts = item.get("content") if kind == "message" else None
    if kind == "reasoning":  # its summaries, else its raw reasoning (as decoded)
        parts = item.get("summary") or item.get("content")
    texts: list[str] = []
    for part in parts if isinstance(parts, list) else ():
        if isinstance(part, dict):
            text = part.get("text") or part.get("refusal")
            if isinstance(text, str) and text:
                texts.append(text)
    return texts


def _start(response: dict[str, Any]) -> ResponseStart:
    return ResponseStart(
        id=nonempty_str(response.get("id")) or new_id("resp_"),
        model=str_or_none(response.get("model")) or "",
        created=reply_created(response.get("created_at")),
    )


class ResponsesStreamRelay:
    """One relayed stream (module docstring): ``feed`` each read, then ``end``;
    ``failed`` for a failure after the first byte."""

    __slots__ = ("_buffer", "_client_model", "_error", "_held", "_reading", "started", "stopped")

    def __init__(self, client_model: str | None) -> None:
        self._client_model = client_model
        self._buffer = FrameBuffer()
        self._held: list[bytes] = []
        """Frames before the first output event (module docstring)."""
        self._reading = _Reading()
        self._error: LLMBridgeError | None = None
        """The backend's ``error`` event, awaiting its ``response.failed``."""
        self.started = False
        """The first event was handed out: a failure now is the stream's, not the call's."""
        self.stopped = False
        """A terminal event came: nothing more is read."""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events of one read: its whole frames relayed, and what they said."""
        complete = self._buffer.feed(chunk)
        return [] if complete is None else self._frames(complete)

    def end(self) -> list[StreamEvent]:
        """The reply's last events once its body ended: a stream that ended before its
        terminal event raises ``BackendProtocolError`` before the first byte, and ends
        in ``failed`` after it."""
        events: list[StreamEvent] = []
        tail = self._buffer.tail()
        if tail and not self.stopped:
            events = self._frames(tail + b"\n\n")
        if self.stopped:
            return events
        if self._error is not None:  # the backend's error, without its response.failed
            return [*events, Relayed(b"", error=self._error)]
        ended = BackendProtocolError("the Responses stream ended before the response was complete")
        if not self.started:
            raise ended
        return [*events, self.failed(ended)]

    def failed(self, error: LLMBridgeError) -> Relayed:
        """The stream's last bytes for a failure the gateway saw after the first byte:
        the translated path's ``error`` and ``response.failed`` events, numbered after
        the backend's last (the backend's own error instead, where it sent one)."""
        self.stopped = True
        if self._error is not None:
            return Relayed(b"", error=self._error)
        reading = self._reading
        response = {
            **reading.response,
            "status": "failed",
            "error": response_error(error),
            "output": reading.output,
        }
        if self._client_model is not None and "model" in response:
            response["model"] = self._client_model
        seq = reading.sequence + 1
        notice = {
            "type": "error",
            "sequence_number": seq,
            "code": error.code or failure_code(error),
            "message": error.message,
            "param": error.param,
        }
        failed = {"type": "response.failed", "sequence_number": seq + 1, "response": response}
        data = sse_event(notice, "error") + sse_event(failed, "response.failed")
        return Relayed(escape_line_breaks(data), error=error)

    def _frames(self, complete: bytes) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        texts: list[str] = []
        out: list[bytes] = []
        for frame, end in _split(complete):
            if self.stopped:
                break  # what follows the end is not passed on
            name, payload = event_of(frame) if frame else (None, None)
            if not payload or payload == b"[DONE]":
                # A comment (keep-alive) goes on; a [DONE] some proxies add ends nothing.
                if not payload:
                    (out if self.started else self._held).append(frame + end)
                continue
            event = json_object(payload, "an event", _SENDER)
            kind = str_or_none(event.get("type")) or (name.decode() if name else "")
            sequence = event.get("sequence_number")
            if isinstance(sequence, int):
                self._reading.sequence = sequence
            if self._client_model is not None:
                frame = _renamed(frame, name, event, self._client_model)
            if not self.started:
                if kind in _STARTING:
                    self._reading.response = object_or_empty(event.get("response"))
                    self._held.append(frame + end)
                    continue
                if kind == "error" or kind == "response.failed":
                    # A failure before any output: the call's, not the stream's.
                    self.stopped = True
                    return [StreamError(self._failure(kind, event))]
                self.started = True
                events.append(_start(self._reading.response or object_or_empty(event)))
                out.extend(self._held)
                self._held = []
            out.append(frame + end)
            if kind == "error":
                self._error = self._failure(kind, event)
            elif kind == "response.failed" or (self._error is not None and kind in _ENDING):
                self.stopped = True
                error = self._error or self._failure(kind, event)
                events.append(Relayed(b"".join(out), "".join(texts), error))
                return events
            elif kind in _ENDING:
                self.stopped = True
                response = object_or_empty(event.get("response"))
                events.append(Relayed(b"".join(out), "".join(texts)))
                events.append(self._reading.end(kind, response))
                return events
            else:
                self._reading.event(kind, event, texts)
        if out:
            events.append(Relayed(b"".join(out), "".join(texts)))
        return events

    def _failure(self, kind: str, event: dict[str, Any]) -> LLMBridgeError:
        if kind == "error":
            error = event.get("error")
            return in_band_error(error if isinstance(error, dict) else event, _ERROR_FALLBACK)
        response = object_or_empty(event.get("response"))
        return in_band_error(response.get("error"), _FAILED_FALLBACK)


def _split(complete: bytes) -> list[tuple[bytes, bytes]]:
    """Whole frames (``complete`` ends with a blank line), each with the line breaks
    that ended it, so that passing them on changes no byte. A plain split where no CR
    is in sight (the usual stream): the regular expression tries at every byte."""
    if b"\r" not in complete:
        return [(frame, b"\n\n") for frame in complete.split(b"\n\n")[:-1]]
    parts = _BOUNDARY.split(complete)
    return list(zip(parts[0::2], parts[1::2], strict=False))


def relay_reply(raw: bytes, client_model: str | None) -> list[StreamEvent]:
    """The events of a reply sent whole: its start, its bytes (naming ``client_model``
    where it is set) and its end; a failed response raises its error."""
    reply = json_object(raw, "a reply", _SENDER)
    if reply.get("status") == "failed" or reply.get("error") is not None:
        raise in_band_error(reply.get("error"), _FAILED_FALLBACK)
    reading = _Reading()
    texts: list[str] = []
    for item in reply.get("output") or ():
        if isinstance(item, dict):
            reading.event("response.output_item.done", {"item": item}, texts)
    status = reply.get("status")
    end = reading.end("response.incomplete" if status == "incomplete" else "", reply)
    data = raw
    if client_model is not None and reply.get("model") not in (None, client_model):
        data = orjson.dumps({**reply, "model": client_model})
    return [_start(reply), Relayed(data, "".join(texts)), end]


def relay_error(error: LLMBridgeError) -> bytes:
    """The Responses in-stream error for a failure outside the backend's reading
    (``ChatCodec.relay_error``): the translated path's ``error`` and
    ``response.failed`` events, without the numbering only the backend's relay knows."""
    notice = {
        "type": "error",
        "code": error.code or failure_code(error),
        "message": error.message,
        "param": error.param,
    }
    response = {"object": "response", "status": "failed", "error": response_error(error)}
    failed = {"type": "response.failed", "response": response}
    return escape_line_breaks(sse_event(notice, "error") + sse_event(failed, "response.failed"))
