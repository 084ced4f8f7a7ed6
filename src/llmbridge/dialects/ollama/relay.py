"""Ollama ``/api/chat`` on the pass-through path (core/relay.py): the client's body as
the backend gets it (``relay_request``), and the backend's reply relayed as it came,
read only for what the gateway records (``ChatStreamRelay`` for an NDJSON stream,
``relay_reply`` for a reply sent whole, ``relay_error_line`` for a failure the gateway
saw after the first byte).

What is set in the body: the backend's model name where the route maps one, and
``options.num_ctx`` where serving sized the context window (serving/prepare/
context_size.py); a body with nothing to set goes out as its bytes came. Ollama's last
line always carries the counts, so nothing is asked for the ledger's sake. Where the
route maps the model's name, each line names the model the client asked for, as on the
translated path; otherwise the bytes are the backend's.

Each line is parsed (orjson) for its counts, ``done_reason``, the text it carries (a
cut stream's bill: ``message.content``, ``message.thinking``, tool calls' arguments)
and an in-band ``{"error": ...}``; nothing is encoded again unless a line must change.
Lines go on whole: a read that ends inside one keeps its tail for the next, so an
error the gateway adds never lands inside a line. The backend's error line is relayed
as it came and ends the stream (nothing after it, or after the ``done`` line, is passed
on); as the reply's first line it is an error before the first byte instead, as on
the translated path.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import orjson

from llmbridge.core.errors import BackendError, BackendProtocolError, LLMBridgeError
from llmbridge.core.events import Relayed, ResponseEnd, ResponseStart, StreamError, StreamEvent
from llmbridge.core.ids import new_id
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.fields import str_or_none
from llmbridge.dialects.framing import escape_line_breaks, ndjson_line
from llmbridge.dialects.ollama.stream import done_end, error_frame
from llmbridge.dialects.ollama.types import parse_rfc3339, rfc3339
from llmbridge.dialects.relay_frames import LineBuffer, mapped_model

__all__ = ["ChatStreamRelay", "relay_error_line", "relay_reply", "relay_request"]


def relay_request(request: ChatRequest) -> tuple[bytes, str | None]:
    """The body to send for ``request`` (its ``relay`` set), and the model name each
    reply line is to carry instead of the backend's (``None``: as it came)."""
    relay = request.relay
    assert relay is not None
    body = relay.body
    changed, client_model = mapped_model(request)
    num_ctx = request.params.num_ctx
    options = body.get("options")
    kept = options if isinstance(options, dict) else {}
    if num_ctx is not None and kept.get("num_ctx") != num_ctx:
        changed["options"] = {**kept, "num_ctx": num_ctx}
    if not changed:
        return relay.raw, None
    return orjson.dumps({**body, **changed}), client_model


def relay_error_line(
    model: str, start: StreamEvent | None = None
) -> Callable[[LLMBridgeError], bytes]:
    """The in-stream error of a relayed stream that failed after its first byte, for a
    client that asked for ``model``: the line the translated path writes (stream.py
    ``error_frame``), dated as it dates it: the stream's start (``start``, the
    ``ResponseStart`` its first line made), else the time of the failure."""
    created = start.created if isinstance(start, ResponseStart) and start.created else None

    def line(error: LLMBridgeError) -> bytes:
        at = created if created is not None else time.time()
        frame = error_frame(model, rfc3339(at), error.message)
        return escape_line_breaks(ndjson_line(frame))

    return line


class _Reading:
    """What the lines of one reply said so far."""

    __slots__ = ("end", "saw_tool_call")

    def __init__(self) -> None:
        self.end: ResponseEnd | None = None
        """The last line's counts and stop reason, once it came."""
        self.saw_tool_call = False

    def line(self, frame: dict[str, Any], texts: list[str]) -> None:
        """Note one line (a chunk of a stream, or the reply sent whole)."""
        message = frame.get("message")
        if message.__class__ is dict:
            if len(message) > 2:  # more than role and content: thinking, tool calls
                self._said(message, texts)
            else:  # the usual line: its content alone
                content = message.get("content")
                if content.__class__ is str and content:
                    texts.append(content)
        if frame.get("done") is True:
            self.end = self.finish(frame)

    def _said(self, message: dict[str, Any], texts: list[str]) -> None:
        """A message with more than content: its thinking, content and tool calls'
        arguments, in that order (their text billed)."""
        for field in ("thinking", "content"):
            said = message.get(field)
            if isinstance(said, str) and said:
                texts.append(said)
        calls = message.get("tool_calls")
        if isinstance(calls, list) and calls:
            self.saw_tool_call = True
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                arguments = function.get("arguments") if isinstance(function, dict) else None
                if isinstance(arguments, str):
                    texts.append(arguments)
                elif arguments is not None:
                    texts.append(orjson.dumps(arguments).decode())

    def finish(self, frame: dict[str, Any]) -> ResponseEnd:
        """The end a last line (``done: true``) says, as the translated path reads it."""
        return done_end(frame, self.saw_tool_call)


def _object(payload: bytes, what: str) -> dict[str, Any]:
    try:
        value = orjson.loads(payload)
    except orjson.JSONDecodeError as exc:
        message = f"Ollama sent {what} that is not JSON: {payload[:200]!r}"
        raise BackendProtocolError(message) from exc
    if not isinstance(value, dict):
        raise BackendProtocolError(f"Ollama sent {what} that is not a JSON object")
    return value


def _start(frame: dict[str, Any]) -> ResponseStart:
    created = parse_rfc3339(frame.get("created_at"))
    return ResponseStart(
        id=new_id("chatcmpl-"),
        model=str_or_none(frame.get("model")) or "",
        created=created if created is not None else time.time(),
    )


def _failure(said: object) -> BackendError:
    """The error an ``{"error": ...}`` line carries (as the translated path reads it)."""
    return BackendError(said if isinstance(said, str) else orjson.dumps(said).decode())


def _renamed(line: bytes, frame: dict[str, Any], model: str) -> bytes:
    """``line`` naming ``model``: the name's bytes replaced where the line starts with
    it, as Ollama writes every line; any other line written again."""
    said = frame.get("model")
    if said is None or said == model:
        return line
    head = b'{"model":' + orjson.dumps(said)
    if line.startswith(head):
        return b'{"model":' + orjson.dumps(model) + line[len(head) :]
    ending = line[len(line.rstrip()) :]
    return escape_line_breaks(orjson.dumps({**frame, "model": model})) + ending


class ChatStreamRelay:
    """One relayed NDJSON stream (module docstring): ``feed`` each read, then ``end``."""

    __slots__ = ("_buffer", "_client_model", "_reading", "_started", "stopped")

    def __init__(self, client_model: str | None) -> None:
        self._client_model = client_model
        self._buffer = LineBuffer()
        self._reading = _Reading()
        self._started = False
        self.stopped = False
        """The ``done`` line or an in-band error came: nothing more is read."""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events of one read: its whole lines relayed, and what they said."""
        if not self._buffer.pending and chunk.endswith(b"\n"):  # the usual read: whole lines
            return self._lines(chunk)
        complete = self._buffer.feed(chunk)
        return [] if complete is None else self._lines(complete)

    def end(self) -> list[StreamEvent]:
        """The reply's last events once its body ended (``BackendProtocolError`` for a
        stream that ended before its ``done`` line)."""
        events: list[StreamEvent] = []
        tail = self._buffer.tail()
        if tail and not self.stopped:
            events = self._lines(tail)  # a last line without its newline
        if self.stopped and self._reading.end is None:  # an in-band error ended it
            return events
        if not self._started:
            raise BackendProtocolError("Ollama's stream ended before its first line")
        end = self._reading.end
        if end is None:
            raise BackendProtocolError("Ollama's stream ended before its done frame")
        events.append(end)
        return events

    def _lines(self, complete: bytes) -> list[StreamEvent]:
        # Once per read of every relayed stream: the usual read is one line, which
        # goes on as the same bytes object; a list of lines is copied only where one
        # changes (a mapped name), and what follows the last line is cut off.
        texts: list[str] = []
        events: list[StreamEvent] = []
        reading = self._reading
        client_model = self._client_model
        error: LLMBridgeError | None = None
        lines = complete.split(b"\n")
        out = lines
        index = -1
        for line in lines:
            index += 1
            if not line or line.isspace():  # a blank line (or what follows the last)
                continue
            try:
                frame = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                message = f"Ollama sent a line that is not JSON: {line[:200]!r}"
                raise BackendProtocolError(message) from exc
            if frame.__class__ is not dict:
                raise BackendProtocolError("Ollama sent a line that is not a JSON object")
            said = frame.get("error")
            if said:
                error = _failure(said)
                self.stopped = True
                if not self._started:
                    # Before anything was relayed: an error before the first byte, as
                    # on the translated path (retried, or the HTTP error in Ollama's
                    # shape).
                    return [StreamError(error)]
                break
            if not self._started:
                self._started = True
                events.append(_start(frame))
            reading.line(frame, texts)
            if client_model is not None:
                new = _renamed(line, frame, client_model)
                if new is not line:
                    if out is lines:
                        out = lines.copy()
                    out[index] = new
            if reading.end is not None:  # the done line: nothing more is read
                self.stopped = True
                break
        last = len(lines) - 1
        if index + 1 < last or (index < last and lines[last]):
            # Stopped: what follows the done or error line is not passed on.
            data = b"\n".join(out[: index + 1]) + b"\n"
        else:
            data = complete if out is lines else b"\n".join(out)
        if data or error is not None:
            events.append(Relayed(data, "".join(texts), error))
        return events


def relay_reply(raw: bytes, client_model: str | None) -> list[StreamEvent]:
    """The events of a reply sent whole (``stream: false``): its start, its bytes
    (naming ``client_model`` where it is set) and its end."""
    reply = _object(raw.strip(), "a reply")
    said = reply.get("error")
    if said:
        raise _failure(said)
    reading = _Reading()
    texts: list[str] = []
    reading.line(reply, texts)
    end = reading.end
    if end is None:  # a reply sent whole is its last line; Ollama marks it done
        end = reading.finish(reply)
    data = raw
    if client_model is not None and reply.get("model") != client_model:
        data = orjson.dumps({**reply, "model": client_model})
    return [_start(reply), Relayed(data, "".join(texts)), end]
