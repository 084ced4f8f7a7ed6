"""Gemini ``generateContent`` on the pass-through path (core/relay.py): the client's
body as the ``gemini`` backend sends it (``relay_request``), and Google's reply relayed
as it came, read only for what the gateway records (``StreamRelay`` for
``streamGenerateContent?alt=sse``, ``relay_reply`` for a reply sent whole).

The model is in the URL, not the body, so the body goes as it came but for what the
translated path would send differently to the backend's model: a ``thinkingLevel`` the
model does not take (or given beside a ``thinkingBudget``, which Google refuses) becomes
what ``encode_chat_request`` sends, the client's ``includeThoughts`` kept; and for a
model that validates thought signatures, the placeholder on the first ``functionCall``
of a model turn that carries none (``backends/gemini.py``). A body the translated path
would send otherwise is not relayed at all (``translated_only``): one that holds what only
the gateway issued (its wrapped thought signatures, its ``gcall_`` call ids: a reply the
translated path wrote), whose meaning only that path knows, and one whose function calls
or responses carry ids, which that path sends only where Google issued them.

Each frame (``data: {...}``, ``\\r\\n\\r\\n`` or ``\\n\\n`` after it; no end sentinel)
is parsed once (orjson) for its ``usageMetadata`` (the last one wins, as on the
translated path), ``candidates[0].finishReason``, and the text it carries (parts'
``text``, a ``functionCall``'s ``args`` as JSON: a cut stream's bill). Where the route
maps the model's name, ``modelVersion`` names the model the client asked for, as on the
translated path; otherwise the bytes are Google's. Frames go on whole: a read that ends
inside one keeps its tail for the next, so an error the gateway adds never lands inside
a frame.
"""

from __future__ import annotations

import re
import time
from typing import Any

import orjson

from llmbridge.core.errors import BackendProtocolError, LLMBridgeError
from llmbridge.core.events import Relayed, ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.ids import new_id
from llmbridge.core.relay import RelayBody
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.gemini.request import encode_thinking_config, takes_thinking_level
from llmbridge.dialects.gemini.response import decode_error, decode_finish_reason, decode_usage
from llmbridge.dialects.relay_frames import FrameBuffer, event_of, json_object

__all__ = ["StreamRelay", "relay_reply", "relay_request", "translated_only"]

_BOUNDARY = re.compile(rb"\r?\n\r?\n")
_SENDER = "the Gemini backend"
_GATEWAY_TOKENS = (
    b"bGxtYnJpZGdlLnNpZ25hdHVyZT",  # base64 of "llmbridge.signature:" (wire_signature)
    b'"llmbridge.',  # a carried signature sent unwrapped (dialects/carried.py)
    b"gcall_",  # a Google call id inside the core's (call_ids.py)
)
_SNAKE_CASE = (
    # What the relay reads or sets, in the snake_case spelling Google takes as well
    # (google-genai sends ``thinking_level`` so): the relay reads the camelCase names.
    b'"generation_config"',
    b'"thinking_config"',
    b'"thinking_level"',
    b'"thinking_budget"',
    b'"function_call"',
    b'"function_response"',
    b'"thought_signature"',
)


def translated_only(relay: RelayBody) -> bool:
    """Whether a body is one only the translated path sends right (module docstring):
    it holds what only the gateway issued (a byte search, which at worst translates a
    body that merely mentions one), a field the relay reads spelled in snake_case, or a
    call id (``_has_call_ids``)."""
    raw = relay.raw
    if any(token in raw for token in _GATEWAY_TOKENS):
        return True
    if b"_" in raw and any(name in raw for name in _SNAKE_CASE):
        return True  # the translation reads both spellings; the relay only camelCase
    return b'"id"' in raw and _has_call_ids(relay.body.get("contents"))


def _has_call_ids(contents: object) -> bool:
    """Whether a ``functionCall`` or ``functionResponse`` in ``contents`` has an ``id``.
    Google refuses ids it did not issue (call_ids.py), and a client's own (Gemini CLI
    names its calls) cannot be told from Google's by their bytes: the translated path
    sends only those its backend issued, and Google matches the rest by name and order."""
    for turn in contents if isinstance(contents, list) else ():
        parts = turn.get("parts") if isinstance(turn, dict) else None
        for part in parts if isinstance(parts, list) else ():
            if not isinstance(part, dict):
                continue
            for key in ("functionCall", "functionResponse"):
                named = part.get(key)
                if isinstance(named, dict) and named.get("id") is not None:
                    return True
    return False


def relay_request(request: ChatRequest, *, placeholder: str | None) -> tuple[bytes, str | None]:
    """The body to send for ``request`` (its ``relay`` set; ``request.model`` the
    backend's), and the model name the reply is to carry instead of Google's (``None``:
    as it came). ``placeholder``: the signature for a model turn's first call that has
    none, for a model that validates them."""
    relay = request.relay
    assert relay is not None
    body = relay.body
    client_model = relay.model if relay.model not in (None, request.model) else None
    changed: dict[str, Any] = {}
    config = body.get("generationConfig")
    thinking = config.get("thinkingConfig") if isinstance(config, dict) else None
    if isinstance(thinking, dict) and thinking.get("thinkingLevel") is not None:
        budget = thinking.get("thinkingBudget")
        if budget is not None or not takes_thinking_level(request.model):
            assert isinstance(config, dict)
            changed["generationConfig"] = _fitted_thinking(config, thinking, request)
    if placeholder is not None and b'"functionCall"' in relay.raw:
        contents = _signed(body.get("contents"), placeholder)
        if contents is not None:
            changed["contents"] = contents
    if not changed:
        return relay.raw, client_model
    return orjson.dumps({**body, **changed}), client_model


def _fitted_thinking(
    config: dict[str, Any], thinking: dict[str, Any], request: ChatRequest
) -> dict[str, Any]:
    """``generationConfig`` with the ``thinkingConfig`` the translated path sends, but
    the client's ``includeThoughts`` (the translated path always asks for thoughts and
    hides them; a relayed reply is shown as it comes)."""
    fitted = dict(encode_thinking_config(request) or {})
    fitted.pop("includeThoughts", None)
    if "includeThoughts" in thinking:
        fitted["includeThoughts"] = thinking["includeThoughts"]
    out = {k: v for k, v in config.items() if k != "thinkingConfig"}
    if fitted:
        out["thinkingConfig"] = fitted
    return out


def _signed(contents: object, placeholder: str) -> list[Any] | None:
    """``contents`` with ``placeholder`` on the first ``functionCall`` of each model
    turn that carries no signature at all (as ``encode_for_google`` does); ``None``
    when none needs it."""
    if not isinstance(contents, list):
        return None
    out: list[Any] | None = None
    for index, turn in enumerate(contents):
        if not isinstance(turn, dict) or turn.get("role") != "model":
            continue
        parts = turn.get("parts")
        if not isinstance(parts, list):
            continue
        objects = [p for p in parts if isinstance(p, dict)]
        if any("thoughtSignature" in p for p in objects):
            continue
        first = next((p for p in objects if "functionCall" in p), None)
        if first is None:
            continue
        if out is None:
            out = list(contents)
        signed = [{**p, "thoughtSignature": placeholder} if p is first else p for p in parts]
        out[index] = {**turn, "parts": signed}
    return out


class _Reading:
    """What the chunks of one reply said so far."""

    __slots__ = ("called_function", "finish_reason", "usage")

    def __init__(self) -> None:
        self.usage = Usage()
        self.finish_reason: str | None = None
        self.called_function = False

    def chunk(self, body: dict[str, Any], texts: list[str]) -> None:
        """Note one ``GenerateContentResponse`` (its text appended to ``texts``)."""
        usage = body.get("usageMetadata")
        if usage is not None:  # cumulative on every chunk: the last one wins
            self.usage = self.usage.merged(decode_usage(usage))
        candidates = body.get("candidates")
        if candidates.__class__ is not list or not candidates:
            block = body.get("promptFeedback")
            reason = block.get("blockReason") if isinstance(block, dict) else None
            if isinstance(reason, str) and reason:  # a prompt Google refused to answer
                filtered = decode_finish_reason(reason) is StopReason.CONTENT_FILTER
                self.finish_reason = reason if filtered else "SAFETY"  # as ReplyReader reads it
            return
        for candidate in candidates:
            if candidate.__class__ is not dict or candidate.get("index", 0) not in (0, None):
                continue
            content = candidate.get("content")
            parts = content.get("parts") if content.__class__ is dict else None
            if parts.__class__ is list:
                for part in parts:
                    if part.__class__ is not dict:
                        continue
                    text = part.get("text")
                    if text.__class__ is str:
                        texts.append(text)
                    call = part.get("functionCall")
                    if call.__class__ is dict:
                        self.called_function = True
                        args = call.get("args")
                        if args is not None:
                            texts.append(orjson.dumps(args).decode())
            reason = candidate.get("finishReason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason

    def end(self) -> ResponseEnd:
        reason = decode_finish_reason(self.finish_reason, called_function=self.called_function)
        return ResponseEnd(stop_reason=reason, usage=self.usage)


def _start(body: dict[str, Any]) -> ResponseStart:
    resp_id, model = body.get("responseId"), body.get("modelVersion")
    return ResponseStart(
        id=resp_id if isinstance(resp_id, str) and resp_id else new_id("", 11),
        model=model if isinstance(model, str) else "",
        created=time.time(),
    )


def _in_band_error(body: dict[str, Any]) -> LLMBridgeError | None:
    """Google's ``{"error": {...}}`` object in place of a reply, as its core error."""
    if "error" in body and "candidates" not in body:
        return decode_error(body["error"])
    return None


def _renamed(frame: bytes, body: dict[str, Any], model: str) -> bytes:
    """``frame`` (one chunk's JSON, or an SSE frame holding it) naming ``model`` in its
    ``modelVersion``: the name's bytes replaced where the frame spells them as orjson or
    Google does, else the chunk written again."""
    said = body.get("modelVersion")
    if said is None or said == model:
        return frame
    name = orjson.dumps(said)
    for spelled in (b'"modelVersion":' + name, b'"modelVersion": ' + name):
        if spelled in frame:
            return frame.replace(spelled, b'"modelVersion":' + orjson.dumps(model), 1)
    data = orjson.dumps({**body, "modelVersion": model})
    return b"data: " + data if frame.startswith(b"data:") else data


class StreamRelay:
    """One relayed ``alt=sse`` stream (module docstring): ``feed`` each read, then
    ``end``."""

    __slots__ = ("_buffer", "_client_model", "_early", "_reading", "_started", "stopped")

    def __init__(self, client_model: str | None) -> None:
        self._client_model = client_model
        self._buffer = FrameBuffer()
        self._early = b""
        """Frames before the first chunk (keep-alive comments): relayed with it, after
        the reply's start, which is the first event."""
        self._reading = _Reading()
        self._started = False
        self.stopped = False
        """An in-band error came: nothing more is read."""

    def feed(self, chunk: bytes) -> list[StreamEvent]:
        """The events of one read: its whole frames relayed, and what they said."""
        complete = self._buffer.feed(chunk)
        return [] if complete is None else self._frames(complete)

    def end(self) -> list[StreamEvent]:
        """The reply's last events once its body ended (``BackendProtocolError`` for a
        stream that ended before a ``finishReason``, as the translated path says)."""
        events: list[StreamEvent] = []
        tail = self._buffer.tail()
        if tail.strip() and not self.stopped:
            events = self._frames(tail + b"\r\n\r\n")
        if self.stopped:
            return events
        if not self._started:
            raise BackendProtocolError("the Gemini stream ended before its first chunk")
        if self._reading.finish_reason is None:
            raise BackendProtocolError("the Gemini stream ended before a finishReason")
        events.append(self._reading.end())
        return events

    def _frames(self, complete: bytes) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        texts: list[str] = []
        out: list[tuple[bytes, bytes]] = []  # each frame and the boundary after it
        changed = False
        error: LLMBridgeError | None = None
        for frame, boundary in _split(complete):
            if self.stopped:
                changed = True  # what follows the backend's error is not passed on
                continue
            _, payload = event_of(frame)
            if not payload:
                out.append((frame, boundary))  # a comment (keep-alive): passed on
                continue
            body = json_object(payload, "a stream chunk", _SENDER)
            error = _in_band_error(body)
            if error is not None:
                if not self._started:  # nothing sent yet: an error as the translated path's
                    raise error
                self.stopped = True
                out.append((frame, boundary))
                continue
            if not self._started:
                self._started = True
                events.append(_start(body))
            self._reading.chunk(body, texts)
            if self._client_model is not None:
                new = _renamed(frame, body, self._client_model)
                changed |= new is not frame
                frame = new
            out.append((frame, boundary))
        if out:
            data = b"".join(f + b for f, b in out) if changed else complete
            if not self._started:
                self._early += data
                return events
            if self._early:
                data, self._early = self._early + data, b""
            events.append(Relayed(data, "".join(texts), error))
        return events


def _split(complete: bytes) -> list[tuple[bytes, bytes]]:
    """The frames of ``complete`` (whole frames), each with the boundary after it."""
    # Plain splits where one framing is used throughout (Google's is CRLF): the regular
    # expression tries at every byte.
    if b"\n\n" not in complete:
        return [(frame, b"\r\n\r\n") for frame in complete.split(b"\r\n\r\n")[:-1]]
    if b"\r" not in complete:
        return [(frame, b"\n\n") for frame in complete.split(b"\n\n")[:-1]]
    return list(zip(_BOUNDARY.split(complete), _BOUNDARY.findall(complete), strict=False))


def relay_reply(raw: bytes, client_model: str | None) -> list[StreamEvent]:
    """The events of a ``generateContent`` reply sent whole: its start, its bytes
    (``modelVersion`` naming ``client_model`` where it is set) and its end."""
    reply = json_object(raw, "a reply", _SENDER)
    error = _in_band_error(reply)
    if error is not None:
        raise error
    reading = _Reading()
    texts: list[str] = []
    reading.chunk(reply, texts)
    if reading.finish_reason is None and not reply.get("candidates"):
        raise BackendProtocolError("the Gemini backend sent a reply with no candidates")
    data = raw if client_model is None else _renamed(raw, reply, client_model)
    return [_start(reply), Relayed(data, "".join(texts)), reading.end()]
