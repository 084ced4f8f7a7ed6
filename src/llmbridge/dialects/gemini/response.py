"""Gemini replies: ``ChatResponse`` to a ``GenerateContentResponse`` and back, and the
embedding replies.

``encode_chat_response`` answers a non-streaming ``:generateContent`` call;
``decode_chat_response`` reads Google's reply for the ``gemini`` backend;
``encode_embed_response``, ``encode_batch_embed_response`` and
``decode_batch_embed_response`` are ``:embedContent``'s and ``:batchEmbedContents``'. What both
directions and the stream codecs share lives here too, so ``stream`` imports it rather
than repeating it: finish reasons, ``usageMetadata``, the encoding of one part and the
``PartReader`` that turns a candidate's parts into neutral events.

A reply is ``{"candidates": [{"content": {"role": "model", "parts": [...]},
"finishReason", "index": 0}], "usageMetadata", "modelVersion", "responseId"}``
(ai.google.dev/api/generate-content#generatecontentresponse). The mapping choices
(docs/GEMINI.md, "Replies and streams"):

- Gemini says ``STOP`` for a turn that calls functions, so a ``STOP`` candidate with a
  ``functionCall`` decodes to ``tool_use``; safety-like reasons are ``content_filter``.
- ``candidatesTokenCount`` does not include ``thoughtsTokenCount``; the core's
  ``output_tokens`` does (OpenAI's convention), so one is the other minus the thoughts.
- A ``thoughtSignature`` may sit on any part. The core holds it as a ``ThinkingPart``
  directly before that part (merged into the thought part when there is one), and a
  signature goes back out on the next non-thinking part: the part Gemini put it on.
  Gemini CLI drops thought parts from its history (``processStreamResponse`` in
  gemini-cli-core keeps ``!part.thought`` only), so a signature on a thought part
  would never come back.
- ``thoughtSignature`` is ``bytes`` in Google's API, and the google-genai SDK refuses a
  reply whose signature is not base64; a signature that is not (a carried one) goes out
  wrapped (``wire_signature``) and comes back unwrapped (``signature_from_wire``).
- Thought text is sent only when the client asked ``includeThoughts``.
"""

from __future__ import annotations

import base64
import binascii
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from llmbridge.core.accumulate import accumulate_sync
from llmbridge.core.errors import BackendHTTPError, BackendProtocolError, InternalError
from llmbridge.core.events import PartEnd, PartStart, ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse, EmbedResponse, StopReason, Usage
from llmbridge.dialects.fields import (
    ReplyFields,
    int_or_none,
    is_number,
    nonempty_str,
    object_or_empty,
)
from llmbridge.dialects.gemini.call_ids import is_issued, issued_call_id
from llmbridge.dialects.gemini.thoughts import GEMINI

__all__ = [
    "PROVIDER",
    "PartReader",
    "ReplyReader",
    "client_sent_ids",
    "decode_batch_embed_response",
    "decode_chat_response",
    "decode_error",
    "decode_finish_reason",
    "decode_usage",
    "encode_batch_embed_response",
    "encode_chat_response",
    "encode_embed_response",
    "encode_finish_reason",
    "encode_function_call",
    "encode_parts",
    "encode_usage",
    "place_signature",
    "response_id",
    "signature_from_wire",
    "signature_part",
    "thoughts_shown",
    "wire_signature",
]

PROVIDER = "gemini"
"""The key of Gemini's fields in ``provider_details``."""

_FINISH_REASONS = {
    StopReason.END_TURN: "STOP",
    StopReason.TOOL_USE: "STOP",  # Gemini's own API says STOP with functionCall parts
    StopReason.STOP_SEQUENCE: "STOP",
    StopReason.MAX_TOKENS: "MAX_TOKENS",
    StopReason.CONTENT_FILTER: "SAFETY",
    StopReason.ERROR: "OTHER",
}

_CONTENT_FILTER_REASONS = frozenset(
    {
        "SAFETY",
        "RECITATION",
        "BLOCKLIST",
        "PROHIBITED_CONTENT",
        "SPII",
        "IMAGE_SAFETY",
        "IMAGE_PROHIBITED_CONTENT",
        "IMAGE_RECITATION",
    }
)
"""Finish reasons (ai.google.dev/api/generate-content#FinishReason) that mean the
output was withheld; ``promptFeedback.blockReason`` values are read the same way."""

_EXACT_FINISH_REASONS = frozenset({"STOP", "MAX_TOKENS"})
"""Reasons the neutral form says exactly; any other is also kept raw in
``provider_details`` so nothing Google said is lost."""

_HTTP_FOR_STATUS = {
    "INVALID_ARGUMENT": 400,
    "FAILED_PRECONDITION": 400,
    "OUT_OF_RANGE": 400,
    "UNAUTHENTICATED": 401,
    "PERMISSION_DENIED": 403,
    "NOT_FOUND": 404,
    "ABORTED": 409,
    "ALREADY_EXISTS": 409,
    "RESOURCE_EXHAUSTED": 429,
    "CANCELLED": 499,
    "UNIMPLEMENTED": 501,
    "UNAVAILABLE": 503,
    "DEADLINE_EXCEEDED": 504,
}
"""google.rpc.Code names to HTTP (cloud.google.com/apis/design/errors#handling_errors),
for an error object that gives ``status`` but no numeric ``code``."""

_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"

_MALFORMED = "the Gemini backend sent a malformed reply: "
_FIELDS = ReplyFields(lambda field, expected: f"{_MALFORMED}{field} is not {expected}")
"""Readers of a reply's fields (``candidates.0.content.parts.1.text is not a string``)."""


# -- shared spellings -----------------------------------------------------------------


def encode_finish_reason(reason: StopReason) -> str:
    """Gemini's ``finishReason`` for a neutral stop reason."""
    return _FINISH_REASONS.get(reason, "STOP")


def decode_finish_reason(raw: str | None, *, called_function: bool = False) -> StopReason:
    """The neutral stop reason for Gemini's ``finishReason``.

    ``STOP`` is ``tool_use`` when the candidate called a function (``called_function``);
    ``MALFORMED_FUNCTION_CALL`` is ``error`` (the model tried and failed to call one);
    ``OTHER``, unknown and absent reasons are ``end_turn``.
    """
    if raw == "MAX_TOKENS":
        return StopReason.MAX_TOKENS
    if raw in _CONTENT_FILTER_REASONS:
        return StopReason.CONTENT_FILTER
    if raw == "MALFORMED_FUNCTION_CALL":
        return StopReason.ERROR
    return StopReason.TOOL_USE if called_function else StopReason.END_TURN


def encode_usage(usage: Usage) -> dict[str, int]:
    """``usageMetadata``: unknown counts are 0; thoughts counted apart from candidates."""
    prompt = usage.input_tokens or 0
    thoughts = usage.reasoning_tokens or 0
    candidates = max(0, (usage.output_tokens or 0) - thoughts)
    encoded = {
        "promptTokenCount": prompt,
        "candidatesTokenCount": candidates,
        "totalTokenCount": prompt + candidates + thoughts,
    }
    if usage.reasoning_tokens is not None:
        encoded["thoughtsTokenCount"] = thoughts
    if usage.cache_read_input_tokens is not None:
        encoded["cachedContentTokenCount"] = usage.cache_read_input_tokens
    return encoded


def decode_usage(raw: object) -> Usage:
    """``usageMetadata`` in neutral terms (``output_tokens`` = candidates + thoughts);
    absent counts stay ``None``."""
    if not isinstance(raw, dict):
        return Usage()
    candidates = int_or_none(raw.get("candidatesTokenCount"))
    thoughts = int_or_none(raw.get("thoughtsTokenCount"))
    output = (
        None if candidates is None and thoughts is None else (candidates or 0) + (thoughts or 0)
    )
    return Usage(
        input_tokens=int_or_none(raw.get("promptTokenCount")),
        output_tokens=output,
        cache_read_input_tokens=int_or_none(raw.get("cachedContentTokenCount")),
        reasoning_tokens=thoughts,
    )


def response_id(resp_id: str) -> str:
    """The ``responseId``: the response's own id, or a new one when it has none."""
    return resp_id or new_id("", 11)


def _gemini_details(request: ChatRequest) -> dict[str, Any]:
    return object_or_empty((request.provider_details or {}).get(PROVIDER))


def thoughts_shown(request: ChatRequest) -> bool:
    """Whether the client asked for thought parts (``thinkingConfig.includeThoughts``);
    the request decoder records it as ``provider_details["gemini"]["include_thoughts"]``."""
    return request.thinking is not None and _gemini_details(request).get("include_thoughts") is True


def client_sent_ids(request: ChatRequest) -> bool:
    """Whether the client put ``id`` on its function calls or responses (recorded by the
    request decoder as ``provider_details["gemini"]["call_ids"]``). Google's API omits
    ids unless a model issues them, and a client that never sent any matches calls by
    name and order, so ours (synthesized by the request decoder or made by another
    backend) go out only to a client that uses them; a Gemini backend's own go out
    always (``encode_function_call``)."""
    return _gemini_details(request).get("call_ids") is True


def encode_function_call(part: ToolCallPart, with_id: bool) -> dict[str, Any]:
    """A ``functionCall`` part: ``args`` is always an object."""
    call: dict[str, Any] = {"name": part.name, "args": part.arguments}
    # A call a Gemini backend's server gave an id goes with it: the client answers
    # with that id, which is how Google's id gets back to Google (call_ids.py).
    if part.id and (with_id or is_issued(part.id)):
        call["id"] = part.id
    return {"functionCall": call}


def signature_part(signature: str, thought: bool) -> dict[str, Any]:
    """A part that carries only a signature (nothing followed the thinking it signs),
    as Gemini itself sends one: empty text, marked a thought when it closes thought text."""
    if thought:
        return {"text": "", "thought": True, "thoughtSignature": wire_signature(signature)}
    return {"text": "", "thoughtSignature": wire_signature(signature)}


_WRAPPED = b"llmbridge.signature:"
"""What a signature that is not base64 is wrapped in (then base64-encoded) on the wire."""


def wire_signature(signature: str) -> str:
    """``signature`` as a ``thoughtSignature`` every client can hold.

    The field is ``bytes`` in Google's API (base64 in JSON), and the google-genai SDK
    validates it so: a value that is not base64 fails the whole reply
    (``Data should be valid base64``). Google's own signatures are canonical base64
    and pass unchanged; ours (``GEMINI.carry``'s ``llmbridge.gemini.v1.<tag>.<token>``,
    the Responses backend's carried tokens) are wrapped, and ``signature_from_wire``
    unwraps them when the client sends them back. The SDK re-encodes the bytes it
    decoded, so only a canonical base64 string comes back byte for byte.
    """
    if _canonical_base64(signature):
        return signature
    return base64.b64encode(_WRAPPED + signature.encode()).decode()


def signature_from_wire(wire: str) -> str:
    """The signature a ``thoughtSignature`` stands for: ``wire_signature`` undone."""
    if not wire.startswith("bGxtYnJpZGdlLnNpZ25hdHVyZT"):  # base64 of _WRAPPED's start
        return wire
    try:
        raw = base64.b64decode(wire, validate=True)
        if raw.startswith(_WRAPPED):
            return raw[len(_WRAPPED) :].decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    return wire


def _canonical_base64(value: str) -> bool:
    try:
        return base64.b64encode(base64.b64decode(value, validate=True)).decode() == value
    except (binascii.Error, ValueError):
        return False


# -- encoding -------------------------------------------------------------------------


def encode_chat_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The ``GenerateContentResponse`` answering a non-streaming ``:generateContent``."""
    parts = encode_parts(resp.message.parts, request)
    candidate: dict[str, Any] = {
        "content": {"role": "model", "parts": parts},
        "finishReason": encode_finish_reason(resp.stop_reason),
        "index": 0,
    }
    return {
        "candidates": [candidate],
        "usageMetadata": encode_usage(resp.usage),
        "modelVersion": request.model,
        "responseId": response_id(resp.id),
    }


def encode_parts(parts: Sequence[Part], request: ChatRequest) -> list[dict[str, Any]]:
    """The ``parts`` of a model turn, each signature moved onto the part after its
    thinking (module docstring)."""
    show, with_ids = thoughts_shown(request), client_sent_ids(request)
    out: list[dict[str, Any]] = []
    pending: str | None = None
    for part in parts:
        wire: dict[str, Any] | None = None
        if isinstance(part, ThinkingPart):
            shown = show and bool(part.text)
            if pending and (shown or part.signature):
                # Another thinking part begins before anything took the signature.
                place_signature(out, pending, show)
                pending = None
            if shown:
                out.append({"text": part.text, "thought": True})
            pending = part.signature or pending
            continue  # (Anthropic's redacted thinking has no Gemini spelling)
        if isinstance(part, TextPart):
            if part.text:
                wire = {"text": part.text}
        elif isinstance(part, ToolCallPart):
            wire = encode_function_call(part, with_ids)
        if wire is None:
            continue  # images and tool results are not model output
        if pending:
            wire["thoughtSignature"], pending = wire_signature(pending), None
        out.append(wire)
    if pending:
        place_signature(out, pending, show)
    return out


def place_signature(out: list[dict[str, Any]], signature: str, show: bool) -> None:
    """Put ``signature`` where no non-thinking part follows its thinking: on the thought
    part just emitted, else on a new part of its own."""
    if show and out and out[-1].get("thought") is True and "thoughtSignature" not in out[-1]:
        out[-1]["thoughtSignature"] = wire_signature(signature)
    else:
        out.append(signature_part(signature, thought=False))


# -- decoding -------------------------------------------------------------------------


class PartReader:
    """Turns the parts of a candidate (a whole reply, or one stream chunk after another)
    into neutral events through one ``PartsManager``.

    Consecutive text parts (or thought parts) continue one part: a stream sends each
    delta as its own part. A ``thoughtSignature`` signs the open thought part when one
    is open and unsigned, else opens an empty ``ThinkingPart`` before the part it was
    on; it becomes ``GEMINI.carry(origin, signature)``, so only the backend that made
    it gets it back. A ``functionCall`` without ``id`` gets a fresh ``call_`` id.
    """

    __slots__ = ("_thinking", "called_function", "manager", "origin")

    def __init__(self, origin: str | None) -> None:
        self.manager = PartsManager()
        self.origin = origin
        self._thinking: str | None = None
        """The open part, when it is a thinking part: ``"open"``, or ``"signed"`` once
        it has its signature (the next signature or thought text starts another)."""
        self.called_function = False

    def read(self, parts: object, where: str) -> list[StreamEvent]:
        """Events for the ``parts`` list at ``where`` (``candidates.0.content.parts``).

        Raises:
            BackendProtocolError: a part or one of its fields has the wrong type.
        """
        events: list[StreamEvent] = []
        for position, part in enumerate(_FIELDS.optional_list(parts, where)):
            part = _FIELDS.required_object(part, f"{where}.{position}")
            events += self._part(part, f"{where}.{position}")
        return _with_provider(events)

    def finish(self) -> list[StreamEvent]:
        """Close the open part."""
        self._thinking = None
        return _with_provider(self.manager.finish())

    def _part(self, part: dict[str, Any], where: str) -> list[StreamEvent]:
        manager = self.manager
        text = _FIELDS.optional_string(part.get("text"), f"{where}.text")
        signature = _FIELDS.optional_string(
            part.get("thoughtSignature"), f"{where}.thoughtSignature"
        )
        events: list[StreamEvent] = []
        if part.get("thought") is True:
            if text:
                if self._thinking == "signed":  # thought text after a signed thought
                    events += self.finish()
                events += manager.thinking(text)
                self._thinking = self._thinking or "open"
            if signature:
                events += self._sign(signature)
            return events
        if signature:
            events += self._sign(signature)
        if text:
            events += manager.text(text)
            self._thinking = None
        call = part.get("functionCall")
        if call is not None:
            call = _FIELDS.required_object(call, f"{where}.functionCall")
            name = _FIELDS.required_string(call.get("name"), f"{where}.functionCall.name")
            args = _FIELDS.optional_object(call.get("args"), f"{where}.functionCall.args")
            google_id = nonempty_str(call.get("id"))
            # Google's id rides in the core's (call_ids.py), for the next request.
            call_id = issued_call_id(self.origin, google_id) if google_id else new_id("call_")
            events += manager.tool_call(name, args, call_id)
            self.called_function, self._thinking = True, None
        # inlineData, executableCode, codeExecutionResult...: nothing the core carries
        # for model output, and llmbridge never asks Google for them.
        return events

    def _sign(self, signature: str) -> list[StreamEvent]:
        events: list[StreamEvent] = []
        if self._thinking != "open":  # no thought open, or it is signed already
            events += self.finish()
        token = signature_from_wire(signature)  # another llmbridge's wrapping undone
        events += self.manager.signature(GEMINI.carry(self.origin, token))
        self._thinking = "signed"
        return events


def _with_provider(events: list[StreamEvent]) -> list[StreamEvent]:
    """Thinking parts decoded here are Gemini's: ``provider="gemini"`` is what lets
    their signatures go back to a Gemini backend."""
    for position, event in enumerate(events):
        if isinstance(event, PartStart | PartEnd) and isinstance(event.part, ThinkingPart):
            events[position] = replace(event, part=replace(event.part, provider=GEMINI.provider))
    return events


def decode_error(error: object) -> BackendHTTPError:
    """The core error for Google's ``{"error": {"code", "message", "status"}}`` object
    (in a stream, or a 200 body): its HTTP status from ``code``, else from ``status``,
    so 429 ``RESOURCE_EXHAUSTED`` is rate limited and 503 ``UNAVAILABLE`` unavailable;
    a ``google.rpc.RetryInfo`` detail's ``retryDelay`` becomes ``retry_after``."""
    body = object_or_empty(error)
    status = nonempty_str(body.get("status"))
    code = int_or_none(body.get("code"))
    if code is None or not 400 <= code <= 599:
        code = _HTTP_FOR_STATUS.get(status or "", 500)
    message = nonempty_str(body.get("message")) or "the Gemini backend reported an error"
    return BackendHTTPError(
        f"the Gemini backend reported {status or code}: {message}",
        backend_status=code,
        body={"error": error},
        retry_after=_retry_delay(body.get("details")),
    )


def _retry_delay(details: object) -> float | None:
    """``retryDelay`` (a protobuf Duration as JSON: ``"7s"``, ``"0.5s"``) of RetryInfo."""
    if not isinstance(details, list):
        return None
    for detail in details:
        if isinstance(detail, dict) and detail.get("@type") == _RETRY_INFO:
            delay = detail.get("retryDelay")
            if isinstance(delay, str) and delay.endswith("s"):
                try:
                    return max(0.0, float(delay[:-1]))
                except ValueError:
                    return None
    return None


class ReplyReader:
    """The state of reading one reply, whole or chunk by chunk: the parts, the finish
    reason and usage so far. ``chunk`` per ``GenerateContentResponse``, ``end`` once."""

    __slots__ = ("finish_reason", "parts", "started", "usage")

    def __init__(self, origin: str | None) -> None:
        self.parts = PartReader(origin)
        self.started = False
        self.finish_reason: str | None = None
        self.usage = Usage()

    def chunk(self, body: dict[str, Any]) -> list[StreamEvent]:
        """Events for one ``GenerateContentResponse``.

        Raises:
            BackendHTTPError: the body is an ``error`` object.
            BackendProtocolError: a field has the wrong type.
        """
        if "error" in body and "candidates" not in body:
            raise decode_error(body["error"])
        events: list[StreamEvent] = []
        if not self.started:
            self.started = True
            events.append(
                ResponseStart(
                    id=nonempty_str(body.get("responseId")) or new_id("", 11),
                    model=nonempty_str(body.get("modelVersion")) or "",
                    created=time.time(),
                )
            )
        # usageMetadata comes on every chunk, each one cumulative: the last one wins.
        if body.get("usageMetadata") is not None:
            self.usage = self.usage.merged(decode_usage(body["usageMetadata"]))
        candidates = _FIELDS.optional_list(body.get("candidates"), "candidates")
        for position, candidate in enumerate(candidates):
            candidate = _FIELDS.required_object(candidate, f"candidates.{position}")
            if int_or_none(candidate.get("index")) not in (None, 0):
                continue  # llmbridge asks for one candidate
            where = f"candidates.{position}.content"
            content = _FIELDS.optional_object(candidate.get("content"), where)
            events += self.parts.read(content.get("parts"), f"{where}.parts")
            reason = candidate.get("finishReason")
            if isinstance(reason, str) and reason:
                self.finish_reason = reason
        # A prompt Google refused to answer comes with no candidates at all.
        block = object_or_empty(body.get("promptFeedback")).get("blockReason")
        if not candidates and isinstance(block, str) and block:
            self.finish_reason = block if block in _CONTENT_FILTER_REASONS else "SAFETY"
        return events

    def end(self) -> list[StreamEvent]:
        """The closing events: the open part's end and ``ResponseEnd``."""
        events = self.parts.finish()
        reason = decode_finish_reason(
            self.finish_reason, called_function=self.parts.called_function
        )
        events.append(ResponseEnd(stop_reason=reason, usage=self.usage))
        return events

    def details(self) -> dict[str, Any] | None:
        """``provider_details`` keeping a finish reason the neutral form says inexactly."""
        raw = self.finish_reason
        if raw is None or raw in _EXACT_FINISH_REASONS:
            return None
        return {PROVIDER: {"finish_reason": raw}}


def decode_chat_response(body: object, *, origin: str | None = None) -> ChatResponse:
    """Read Google's ``GenerateContentResponse`` (``origin``: the backend's name, which
    its thought signatures are tagged with).

    Raises:
        BackendHTTPError: the body is Google's ``error`` object.
        BackendProtocolError: the body is not a reply, or a field has the wrong type.
    """
    if not isinstance(body, dict):
        raise BackendProtocolError(_MALFORMED + "the body is not a JSON object")
    reader = ReplyReader(origin)
    events = reader.chunk(body)
    if reader.finish_reason is None and not body.get("candidates"):
        raise BackendProtocolError(_MALFORMED + "it has no candidates")
    response = accumulate_sync(events + reader.end())
    return replace(response, provider_details=reader.details())


# Embedding replies. ``:embedContent`` answers ``{"embedding": {"values": [...]}}``,
# ``:batchEmbedContents`` ``{"embeddings": [...]}`` (ai.google.dev/api/embeddings).


def encode_embed_response(resp: EmbedResponse) -> dict[str, Any]:
    """``:embedContent``'s reply: the one input's vector.

    Raises:
        InternalError: the backend gave no vector (a bug: one input, one vector).
    """
    if not resp.embeddings:
        raise InternalError("the backend returned no embedding for the input")
    return {"embedding": {"values": list(resp.embeddings[0])}}


def encode_batch_embed_response(resp: EmbedResponse) -> dict[str, Any]:
    """``:batchEmbedContents``' reply: one vector per request, in request order."""
    return {"embeddings": [{"values": list(vector)} for vector in resp.embeddings]}


def decode_batch_embed_response(body: object, *, model: str = "") -> EmbedResponse:
    """Read Google's ``:batchEmbedContents`` reply (client side).

    Raises:
        BackendProtocolError: the body has no ``embeddings`` list of number vectors.
    """
    reply = _FIELDS.required_object(body, "the body")
    embeddings = reply.get("embeddings")
    if not isinstance(embeddings, list):
        raise _FIELDS.malformed("embeddings", "a list")
    vectors: list[tuple[float, ...]] = []
    for position, raw in enumerate(embeddings):
        values = _FIELDS.required_object(raw, f"embeddings.{position}").get("values")
        if not isinstance(values, list) or not all(is_number(value) for value in values):
            raise _FIELDS.malformed(f"embeddings.{position}.values", "a list of numbers")
        vectors.append(tuple(float(value) for value in values))
    usage = object_or_empty(reply.get("usageMetadata"))
    return EmbedResponse(
        model=model,
        embeddings=tuple(vectors),
        input_tokens=int_or_none(usage.get("promptTokenCount")),
    )
