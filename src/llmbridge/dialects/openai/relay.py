"""OpenAI chat completions on the pass-through path (core/relay.py): the client's body
as the backend gets it (``relay_request``), and the backend's reply relayed as it came,
read only for what the gateway records (``ChatStreamRelay`` for a stream,
``relay_reply`` for a reply sent whole).

What is set in the body: the backend's model name where the route maps one, and for a
stream ``stream_options.include_usage`` (the ledger needs the counts). When the client
did not ask for the counts itself, what that adds is taken out again on the way back
(each chunk's ``"usage": null`` and the ``choices: []`` usage chunk), so the client gets
what it asked for. Where the route maps the model's name, each chunk names the model
the client asked for, as on the translated path; otherwise the bytes are the backend's.

Each frame is parsed (orjson) for its usage, finish reason and the text it carries (a
cut stream's bill), a run of plain ``data:`` frames in one read as one JSON array; no
event objects are built for the text, and nothing is encoded again unless a frame must
change. Frames go on whole: a read that ends inside one keeps
its tail for the next, so an error the gateway adds never lands inside a frame. The
backend's in-band error ends the stream: its frame goes on as it came, then
``data: [DONE]``, and nothing the backend sent after it (as on the translated path).
"""

from __future__ import annotations

import re
from typing import Any

import orjson

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import Relayed, ResponseEnd, StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.fields import str_or_none
from llmbridge.dialects.framing import SSE_DONE, plain_data_run
from llmbridge.dialects.openai.response import decode_usage, stop_reason_for
from llmbridge.dialects.openai.stream import in_band_error, response_start
from llmbridge.dialects.relay_frames import FrameBuffer, event_of, json_object, mapped_model

__all__ = ["ChatStreamRelay", "relay_reply", "relay_request"]

_BOUNDARY = re.compile(rb"\r?\n\r?\n")
_SENDER = "the backend"
_USAGE_NULL = re.compile(rb',\s*"usage"\s*:\s*null')
_NULL_USAGE = b',"usage":null'
"""The counts the gateway asked for, in a chunk without them, as OpenAI and vLLM spell it."""
_DONE = SSE_DONE.removesuffix(b"\n\n")
"""The stream's end as a frame of ``_frames``' list (``_joined`` adds the blank line)."""


def relay_request(request: ChatRequest) -> tuple[bytes, str | None, bool]:
    """The body to send for ``request`` (its ``relay`` set), the model name each reply
    chunk is to carry instead of the backend's (``None``: as it came), and whether the
    counts the gateway asked for are to be taken out of the reply (module docstring)."""
    relay = request.relay
    assert relay is not None
    body = relay.body
    changed, client_model = mapped_model(request)
    strip_usage = False
    if request.stream:
        options = body.get("stream_options")
        if not (isinstance(options, dict) and options.get("include_usage") is True):
            kept = options if isinstance(options, dict) else {}
            changed["stream_options"] = {**kept, "include_usage": True}
            strip_usage = True
    if not changed:
        return relay.raw, None, False
    return orjson.dumps({**body, **changed}), client_model, strip_usage


class _Reading:
    """What the frames of one reply said so far."""

    __slots__ = ("finish_reason", "saw_tool_call", "stop_sequence", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        self.finish_reason: str | None = None
        self.stop_sequence: str | None = None
        self.saw_tool_call = False

    def choice(self, choice: Any, texts: list[str], key: str) -> None:
        """Note one choice (``key``: ``delta`` in a chunk, ``message`` in a reply)."""
        # Once per chunk of every relayed stream: exact-type checks, and the common
        # chunk (content only) reads three keys.
        if choice.__class__ is not dict or choice.get("index", 0) != 0:
            return
        said = choice.get(key)
        if said.__class__ is dict:
            content = said.get("content")
            others = len(said) - (content is not None) - ("role" in said)
            if others:
                self._said(said, content, texts)
            elif content.__class__ is str:
                texts.append(content)
        reason = choice.get("finish_reason")
        if reason is not None:
            self.finish_reason = str(reason)
            matched = str_or_none(choice.get("stop_reason"))
            if matched is not None and reason == "stop":  # vLLM's stop string
                self.stop_sequence = matched

    def _said(self, said: dict[str, Any], content: object, texts: list[str]) -> None:
        """A delta or message with more than content: its reasoning, content and tool
        calls' arguments, in that order (their text billed)."""
        reasoning = said.get("reasoning_content") or said.get("reasoning")
        if isinstance(reasoning, str):
            texts.append(reasoning)
        if isinstance(content, str):
            texts.append(content)
        calls = said.get("tool_calls")
        if isinstance(calls, list) and calls:
            self.saw_tool_call = True
            for call in calls:
                function = call.get("function") if isinstance(call, dict) else None
                arguments = function.get("arguments") if isinstance(function, dict) else None
                if isinstance(arguments, str):
                    texts.append(arguments)

    def end(self) -> ResponseEnd:
        stop_sequence = self.stop_sequence
        if self.saw_tool_call:
            stop_reason, stop_sequence = StopReason.TOOL_USE, None
        elif stop_sequence is not None:
            stop_reason = StopReason.STOP_SEQUENCE
        else:
            stop_reason = stop_reason_for(self.finish_reason)
        return ResponseEnd(stop_reason=stop_reason, usage=self.usage, stop_sequence=stop_sequence)


def _renamed(frame: bytes, said: object, model: str) -> bytes:
    """``frame`` naming ``model`` where it named ``said``: the name's bytes replaced
    where the frame spells them as orjson would; a frame that spells them otherwise
    goes on as it came."""
    spelled = b'"model":' + orjson.dumps(said)
    if spelled in frame:
        return frame.replace(spelled, b'"model":' + orjson.dumps(model), 1)
    return frame


class ChatStreamRelay:
    """One relayed stream (module docstring): ``feed`` each read, then ``end``."""

    __slots__ = (
        "_buffer",
        "_client_model",
        "_reading",
        "_started",
        "_strip_usage",
        "stopped",
    )

    def __init__(self, client_model: str | None, strip_usage: bool) -> None:
        self._client_model = client_model
        self._strip_usage = strip_usage
        self._buffer = FrameBuffer()
        self._reading = _Reading()
        self._started = False
        self.stopped = False
        """``[DONE]`` or an in-band error came: nothing more is read."""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events of one read: its whole frames relayed, and what they said."""
        if not self._buffer.pending and chunk.endswith(b"\n\n"):  # the usual read: whole frames
            return self._whole(chunk)
        complete = self._buffer.feed(chunk)
        return [] if complete is None else self._whole(complete)

    def end(self) -> list[StreamEvent]:
        """The reply's last events once its body ended (``BackendProtocolError`` for a
        stream that ended before it was complete)."""
        events: list[StreamEvent] = []
        tail = self._buffer.tail()
        if tail and not self.stopped:
            events = self._frames(tail + b"\n\n")
        if self.stopped and any(isinstance(e, Relayed) and e.error for e in events):
            return events
        if not self._started:
            raise BackendProtocolError("the backend's stream ended before its first chunk")
        reading = self._reading
        if not self.stopped and reading.finish_reason is None:
            raise BackendProtocolError("the backend's stream ended before it finished")
        events.append(reading.end())
        return events

    def _frames(self, complete: bytes) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        texts: list[str] = []
        out: list[bytes] = []
        changed = False
        error: LLMBridgeError | None = None
        # A plain split where no CR is in sight (the usual stream): the regular
        # expression tries at every byte, a fifth of a relayed chunk's CPU.
        frames = complete.split(b"\n\n") if b"\r" not in complete else _BOUNDARY.split(complete)
        for frame in frames:
            if not frame or self.stopped:
                changed |= bool(frame)  # what follows the end is not passed on
                continue
            name, payload = event_of(frame)
            if not payload:
                out.append(frame)  # a comment (keep-alive): passed on
                continue
            if payload == b"[DONE]":
                self.stopped = True
                out.append(frame)
                continue
            chunk = json_object(payload, "a stream chunk", _SENDER)
            if name == b"error" or chunk.get("error") is not None:
                # Relayed as it came, and the stream's end after it as the translated
                # path writes it (``error_chunk``): whatever the backend sent next, in
                # this read or a later one, a client gets the same bytes.
                error = in_band_error(chunk.get("error", chunk))
                self.stopped = True
                out.extend((frame, _DONE))
                changed = True
                break
            if not self._started:
                self._started = True
                events.append(response_start(chunk))
            new = self._chunk(frame, chunk, texts)
            if new is not frame:
                changed = True
            if new:
                out.append(new)
        if out:
            data = _joined(out) if changed else complete
            events.append(Relayed(data, "".join(texts), error))
        return events

    def _one(self, frame: bytes) -> list[StreamEvent]:
        """``_frames`` for the read a stream is made of once it started: exactly one
        frame, one ``data:`` line of one object. Half a relayed chunk's CPU went to
        splitting, looping and joining for it."""
        chunk = json_object(frame[6:-2], "a stream chunk", _SENDER)
        if chunk.get("error") is not None:  # the backend's in-band error: the whole rule
            return self._frames(frame)
        texts: list[str] = []
        relayed = self._chunk(frame, chunk, texts)
        if not relayed:  # the usage chunk the client did not ask for
            return []
        return [Relayed(relayed, texts[0] if len(texts) == 1 else "".join(texts))]

    def _whole(self, data: bytes) -> list[StreamEvent]:
        """The events of whole frames: one frame (``_one``), or a run of frames of one
        ``data:`` line of one object (``_run``), then what follows it frame by frame
        (``_frames``: ``[DONE]``, an error, a comment, the usage chunk, CRLF frames)."""
        if self.stopped or not data.startswith(b"data: {") or b"\r" in data:
            return self._frames(data)
        if self._started and data.find(b"\n") == len(data) - 2:
            return self._one(data)
        done = data.find(b"\n\ndata: [")  # [DONE], which ends the run
        run = data if done < 0 else data[: done + 2]
        events, cut = self._run(run)
        if cut == len(data):
            return events
        return [*events, *self._frames(data[cut:])]

    def _run(self, data: bytes) -> tuple[list[StreamEvent], int]:
        """The events of the frames at the start of ``data`` that are each one ``data:``
        line of one object, and where they end (0: none read). How a stream's reads come
        once the backend outpaces the gateway (at 32 streams in flight most of them, a
        whole stream a read at times): parsed by ``framing.plain_data_run``, and the
        counts and the model name changed with one replace each over the run, where
        split, read and changed a frame at a time cost three times as much. The run stops
        before a chunk ``_chunk`` would drop or change otherwise (the usage chunk the
        client did not ask for, a second model name) or that is an error."""
        chunks = plain_data_run(data)
        if chunks is None:
            return [], 0
        frames = len(chunks)
        reading = self._reading
        before = (
            reading.usage,
            reading.finish_reason,
            reading.stop_sequence,
            reading.saw_tool_call,
        )
        texts: list[str] = []
        taken, nulls, renames, said = self._read_run(chunks, texts)
        cut = len(data)
        if taken < frames:
            cut = 0
            for _ in range(taken):
                cut = data.index(b"\n\n", cut) + 2
        out = data[:cut]
        if nulls:
            out = out.replace(_NULL_USAGE, b"")
        # Each null taken out once, as OpenAI and vLLM spell it; else frame by frame.
        as_changed = taken > 0 and len(out) == cut - nulls * len(_NULL_USAGE)
        if renames and as_changed:
            spelled = b'"model":' + orjson.dumps(said)
            as_changed = out.count(spelled) == renames  # else spelled otherwise
            out = out.replace(spelled, b'"model":' + orjson.dumps(self._client_model))
        if not as_changed:
            # Read frame by frame instead: what this run noted is taken back.
            reading.usage, reading.finish_reason, reading.stop_sequence, reading.saw_tool_call = (
                before
            )
            return [], 0
        events: list[StreamEvent] = []
        if not self._started:
            self._started = True
            events.append(response_start(chunks[0]))
        events.append(Relayed(out, "".join(texts)))
        return events, cut

    def _read_run(self, chunks: list[Any], texts: list[str]) -> tuple[int, int, int, object]:
        """Note the run's chunks as ``_chunk`` would, up to the first it would drop or
        change otherwise, or that is an error: how many were noted, how many carry the
        counts as null (to take out), how many name the backend's model (to rename), and
        that name."""
        reading = self._reading
        client_model = self._client_model
        strip_usage = self._strip_usage
        taken = nulls = renames = 0
        said: object = None
        for chunk in chunks:
            if chunk.__class__ is not dict or chunk.get("error") is not None:
                break
            usage = chunk.get("usage")
            choices = chunk.get("choices")
            if usage is not None and strip_usage and not choices:
                break  # the usage chunk the client did not ask for: dropped by _chunk
            model = chunk.get("model") if client_model is not None else None
            if model is not None and model != client_model:
                if said is not None and model != said:
                    break
                said, renames = model, renames + 1
            if usage is not None:
                reading.usage = reading.usage.merged(decode_usage(usage))
            elif strip_usage and "usage" in chunk:
                nulls += 1
            if choices.__class__ is list:
                for choice in choices:
                    reading.choice(choice, texts, "delta")
            taken += 1
        return taken, nulls, renames, said

    def _chunk(self, frame: bytes, chunk: dict[str, Any], texts: list[str]) -> bytes:
        """Note what ``chunk`` says; the frame as the client is to get it."""
        reading = self._reading
        usage = chunk.get("usage")
        if usage is not None:
            reading.usage = reading.usage.merged(decode_usage(usage))
        choices = chunk.get("choices")
        if choices.__class__ is list:
            for choice in choices:
                reading.choice(choice, texts, "delta")
        if self._strip_usage and "usage" in chunk:
            if usage is not None:
                if not choices:
                    return b""  # the usage chunk the client did not ask for
            else:  # as OpenAI and vLLM spell it, else the regular expression
                stripped = frame.replace(b',"usage":null', b"", 1)
                frame = stripped if len(stripped) < len(frame) else _USAGE_NULL.sub(b"", frame)
        client_model = self._client_model
        if client_model is not None:
            said = chunk.get("model")
            if said is not None and said != client_model:
                frame = _renamed(frame, said, client_model)
        return frame


def _joined(frames: list[bytes]) -> bytes:
    return b"\n\n".join(frames) + b"\n\n"


def relay_reply(raw: bytes, client_model: str | None) -> list[StreamEvent]:
    """The events of a reply sent whole: its start, its bytes (naming ``client_model``
    where it is set) and its end."""
    reply = json_object(raw, "a reply", _SENDER)
    if reply.get("error") is not None:
        raise in_band_error(reply["error"])
    reading = _Reading()
    reading.usage = decode_usage(reply.get("usage"))
    texts: list[str] = []
    choices = reply.get("choices")
    if isinstance(choices, list):
        for choice in choices:
            reading.choice(choice, texts, "message")
    data = raw
    if client_model is not None and reply.get("model") != client_model:
        data = orjson.dumps({**reply, "model": client_model})
    return [response_start(reply), Relayed(data, "".join(texts)), reading.end()]
