"""Anthropic Messages on the pass-through path (core/relay.py): the client's body as
the backend gets it (``relay_request``), and the backend's reply relayed as it came,
read only for what the gateway records (``MessageStreamRelay`` for a stream,
``relay_reply`` for a reply sent whole).

What is set in the body: the backend's model name, where the route maps one; nothing
else (Anthropic always reports its counts). Where the route maps the name, the reply
names the model the client asked for, as on the translated path: ``message_start``'s
``message.model`` in a stream, ``model`` in a whole reply; every other byte is the
backend's.

A stream's frames are ``event: <type>\\ndata: {...}\\n\\n``. Only the frames that say
something the gateway records are parsed (orjson): ``message_start`` (the prompt's
counts, cache reads and writes among them), ``content_block_start`` (a tool call),
``content_block_delta`` (the text, thinking and tool input it carries: a cut stream's
bill), ``message_delta`` (the output count, the stop reason) and ``error`` (the
backend's in-band error, relayed as it came; before ``message_start``, raised, as the
translated path fails before its first byte). ``ping``, ``content_block_stop`` and
``message_stop`` are known by their event line alone. Frames go on whole: a read that
ends inside one keeps its tail for the next, so an error the gateway adds (a stream
cut before ``message_stop``) never lands inside a frame.
"""

from __future__ import annotations

import time
from typing import Any

import orjson

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import Relayed, ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.anthropic.response import decode_stop_reason, decode_usage
from llmbridge.dialects.anthropic.stream import in_band_error
from llmbridge.dialects.fields import str_or_none
from llmbridge.dialects.relay_frames import FrameBuffer, event_of, json_object, mapped_model

__all__ = ["MessageStreamRelay", "relay_reply", "relay_request"]

_SENDER = "the Anthropic backend"

STREAM_CUT = "the Anthropic stream ended before message_stop"
"""A stream that ends before ``message_stop``, worded as the translated path words it."""


def relay_request(request: ChatRequest) -> tuple[bytes, str | None]:
    """The body to send for ``request`` (its ``relay`` set), and the model name the
    reply is to carry instead of the backend's (``None``: as it came)."""
    relay = request.relay
    assert relay is not None
    changed, client_model = mapped_model(request)
    if not changed:
        return relay.raw, None
    return orjson.dumps({**relay.body, **changed}), client_model


def _renamed(data: bytes, said: object, model: str) -> bytes | None:
    """``data`` naming ``model`` where it named ``said``, the name's bytes replaced
    where spelled as orjson spells them (``None``: spelled otherwise)."""
    spelled = b'"model":' + orjson.dumps(said)
    if spelled not in data:
        return None
    return data.replace(spelled, b'"model":' + orjson.dumps(model), 1)


_SILENT = frozenset({b"ping", b"content_block_stop"})
"""Events with nothing the gateway records: relayed unparsed."""


class MessageStreamRelay:
    """One relayed stream (module docstring): ``feed`` each read, then ``end``."""

    __slots__ = (
        "_buffer",
        "_client_model",
        "_held",
        "_saw_tool_call",
        "_started",
        "_stop_reason",
        "_stop_sequence",
        "_usage",
        "stopped",
    )

    def __init__(self, client_model: str | None) -> None:
        self._client_model = client_model
        self._buffer = FrameBuffer()
        self._held: list[bytes] = []
        """Frames before ``message_start`` (a ping), sent with it: the reply's first
        event is its start."""
        self._started = False
        self._usage = Usage()
        self._stop_reason: object = None
        self._stop_sequence: str | None = None
        self._saw_tool_call = False
        self.stopped = False
        """``message_stop`` or an in-band error came: nothing more is read."""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events of one read: its whole frames relayed, and what they said."""
        complete = self._buffer.feed(chunk)
        return [] if complete is None else self._frames(complete)

    def end(self) -> list[StreamEvent]:
        """The reply's last events once its body ended (``BackendProtocolError`` for a
        stream that ended before ``message_stop``, as the translated path says it)."""
        events: list[StreamEvent] = []
        tail = self._buffer.tail()
        if tail.strip() and not self.stopped:
            events = self._frames(tail + b"\n\n")
        if not self.stopped:
            raise BackendProtocolError(STREAM_CUT)
        return events

    def _frames(self, complete: bytes) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        texts: list[str] = []
        out: list[bytes] = []
        changed = False
        error: LLMBridgeError | None = None
        was_stopped = self.stopped
        sep = b"\r\n\r\n" if b"\r" in complete else b"\n\n"
        for frame in complete.split(sep):
            if not frame:
                continue
            if self.stopped:
                changed = True  # what follows the end is not passed on
                continue
            name, payload = event_of(frame)
            name = name or b""
            if name in _SILENT or not payload:
                out.append(frame)
            elif name == b"message_stop":
                self.stopped = True
                out.append(frame)
            else:
                new, error = self._parsed(frame, name, payload, texts, events)
                changed |= new is not frame
                out.append(new)
        if not self._started:  # held until message_start: the reply's first event
            self._held.extend(out)
            return []
        if self._held:
            out, self._held, changed = [*self._held, *out], [], True
        if out:
            data = sep.join(out) + sep if changed else complete
            events.append(Relayed(data, "".join(texts), error))
        if self.stopped and not was_stopped and error is None:  # message_stop came
            events.append(
                _ended(self._stop_reason, self._stop_sequence, self._usage, self._saw_tool_call)
            )
        return events

    def _parsed(
        self,
        frame: bytes,
        name: bytes,
        payload: bytes,
        texts: list[str],
        events: list[StreamEvent],
    ) -> tuple[bytes, LLMBridgeError | None]:
        """Note what a frame with data says (its text into ``texts``, the reply's start
        into ``events``); the frame as the client is to get it, and the backend's
        in-band error where it is one."""
        said = json_object(payload, f"a {name.decode(errors='replace') or 'stream'} event", _SENDER)
        kind = said.get("type") or name.decode(errors="replace")
        if kind == "error":
            if not self._started:  # nothing sent yet: an HTTP error, retried where it may be
                raise in_band_error(said)
            self.stopped = True
            return frame, in_band_error(said)
        if kind == "message_stop":  # a frame without its event line
            self.stopped = True
            return frame, None
        if kind == "message_start":
            new = self._message_start(frame, said)
            if not self._started:
                self._started = True
                events.append(self._response_start(said))
            return new, None
        if not self._started:
            raise BackendProtocolError(
                f"the Anthropic stream sent a {kind} event before message_start"
            )
        if kind == "content_block_delta":
            _delta_text(said.get("delta"), texts)
        elif kind == "content_block_start":
            block = said.get("content_block")
            if isinstance(block, dict) and block.get("type") == "tool_use":
                self._saw_tool_call = True
        elif kind == "message_delta":
            self._message_delta(said)
        return frame, None

    def _message_start(self, frame: bytes, said: dict[str, Any]) -> bytes:
        """Note the prompt's counts; the frame naming the client's model where mapped."""
        message = said.get("message")
        if not isinstance(message, dict):
            raise BackendProtocolError("the Anthropic stream's message_start has no message")
        self._usage = decode_usage(message.get("usage"))
        client_model = self._client_model
        backend_model = message.get("model")
        if client_model is None or backend_model == client_model:
            return frame
        renamed = _renamed(frame, backend_model, client_model)
        if renamed is not None:
            return renamed
        # Spelled otherwise: the one frame written again.
        message = {**message, "model": client_model}
        return b"event: message_start\ndata: " + orjson.dumps({**said, "message": message})

    def _response_start(self, said: dict[str, Any]) -> ResponseStart:
        message = said["message"]
        return ResponseStart(
            id=str(message.get("id") or ""),
            model=str(message.get("model") or ""),
            created=time.time(),
            input_tokens=self._usage.input_tokens,
        )

    def _message_delta(self, said: dict[str, Any]) -> None:
        delta = said.get("delta")
        if isinstance(delta, dict):
            self._stop_reason = delta.get("stop_reason")
            self._stop_sequence = str_or_none(delta.get("stop_sequence"))
        # message_delta's usage is cumulative: it replaces, it does not add.
        self._usage = self._usage.merged(decode_usage(said.get("usage"), self._usage))


def _ended(
    stop_reason: object, stop_sequence: str | None, usage: Usage, tools: bool
) -> ResponseEnd:
    reason = decode_stop_reason(stop_reason)
    if stop_reason is None and tools:
        reason = StopReason.TOOL_USE
    return ResponseEnd(stop_reason=reason, usage=usage, stop_sequence=stop_sequence)


def _delta_text(delta: object, texts: list[str]) -> None:
    """The text a ``content_block_delta`` carries (what a cut stream is billed for, as
    the translated path counts it: text, thinking, tool input)."""
    if not isinstance(delta, dict):
        return
    kind = delta.get("type")
    key = (
        "text"
        if kind == "text_delta"
        else "thinking"
        if kind == "thinking_delta"
        else "partial_json"
        if kind == "input_json_delta"
        else None
    )
    if key is not None:
        text = delta.get(key)
        if isinstance(text, str):
            texts.append(text)


def relay_reply(raw: bytes, client_model: str | None) -> list[StreamEvent]:
    """The events of a reply sent whole: its start, its bytes (naming ``client_model``
    where it is set) and its end."""
    reply = json_object(raw, "a reply", _SENDER)
    if reply.get("type") == "error":
        raise in_band_error(reply)
    usage = decode_usage(reply.get("usage"))
    texts: list[str] = []
    tools = False
    content = reply.get("content")
    for block in content if isinstance(content, list) else ():
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text" and isinstance(block.get("text"), str):
            texts.append(block["text"])
        elif kind == "thinking" and isinstance(block.get("thinking"), str):
            texts.append(block["thinking"])
        elif kind == "tool_use":
            tools = True
            texts.append(orjson.dumps(block.get("input") or {}).decode())
    data = raw
    said = reply.get("model")
    if client_model is not None and said != client_model:
        data = _renamed(raw, said, client_model) or orjson.dumps({**reply, "model": client_model})
    start = ResponseStart(
        id=str(reply.get("id") or ""),
        model=str(said or ""),
        created=time.time(),
        input_tokens=usage.input_tokens,
    )
    end = _ended(reply.get("stop_reason"), str_or_none(reply.get("stop_sequence")), usage, tools)
    return [start, Relayed(data, "".join(texts)), end]
