"""OpenAI's legacy completions (``/v1/completions``), both directions.

Editor autocomplete clients (Continue, Tabby) and llama-index's ``OpenAILike`` send
a ``prompt`` to complete, and a ``suffix`` for fill-in-the-middle, rather than a
conversation. ``decode_completion_request`` turns such a body into a ``ChatRequest``
carrying a ``Completion`` (core/request.py): its messages hold the prompt as one user
message, for backends that only chat. ``encode_completion_response`` and
``encode_completion_stream`` answer in the API's ``text_completion`` shape
(platform.openai.com/docs/api-reference/completions; the openai SDK's
``types/completion.py``), the stream as SSE chunks ending in ``data: [DONE]``.
``encode_completion_request`` is the client side: the body llmbridge sends to an
OpenAI-compatible server's ``/v1/completions``, whose stream ``decode_chat_stream``
reads (a chunk's text is under ``choices[].text`` there).

What is refused (a 400 naming the field, docs/COMPLETIONS.md): several prompts or
token arrays (``prompt``), ``n`` or ``best_of`` above 1, and ``logprobs``: llmbridge
has no log probabilities to give, and a client that asked for them would index into
``null``. ``echo`` is served (the prompt is repeated before the completion).
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any, cast

import orjson

from llmbridge.core.errors import BackendProtocolError, InvalidRequestError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    TextDelta,
    UsageUpdate,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest, Completion, GenerationParams
from llmbridge.core.request_limits import DEFAULT_LIMITS, RequestLimits
from llmbridge.core.response import ChatResponse, StopReason, Usage
from llmbridge.dialects.framing import SSE_DONE, escape_line_breaks, sse_event
from llmbridge.dialects.openai.errors import VALIDATION_WORDING, error_body
from llmbridge.dialects.openai.request import Ranges, check_ranges
from llmbridge.dialects.openai.response import encode_usage
from llmbridge.dialects.openai.types import CompletionRequestBody
from llmbridge.dialects.validation import validate_body

__all__ = [
    "DEFAULT_COMPLETION_TOKENS",
    "completion_id",
    "decode_completion_request",
    "encode_completion_request",
    "encode_completion_response",
    "encode_completion_stream",
]

DEFAULT_COMPLETION_TOKENS = 16
"""``max_tokens`` when the request does not say: the API's documented default (vLLM's
too), so a client gets the length it would get from OpenAI."""

# Fields decode_completion_request turns into core fields; the rest (user,
# logit_bias, ...) ride along in provider_details and go to OpenAI-compatible servers.
_MODELLED = frozenset(
    {
        "model",
        "prompt",
        "suffix",
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "frequency_penalty",
        "presence_penalty",
        "n",
        "best_of",
        "echo",
        "logprobs",
        "stream",
        "stream_options",
    }
)

# (field, lowest, highest, OpenAI's kind of number): the ranges OpenAI's API enforces.
_RANGES: Ranges = (
    ("max_tokens", 1, None, "integer"),
    ("temperature", 0, 2, "decimal"),
    ("top_p", 0, 1, "decimal"),
    ("frequency_penalty", -2, 2, "decimal"),
    ("presence_penalty", -2, 2, "decimal"),
)

_FINISH_REASONS: dict[StopReason, str] = {
    StopReason.MAX_TOKENS: "length",
    StopReason.CONTENT_FILTER: "content_filter",
}
"""Everything else is ``stop``: the API's ``finish_reason`` has no other values."""

# -- decode: client body -> core ----------------------------------------------------


def decode_completion_request(body: object, limits: RequestLimits = DEFAULT_LIMITS) -> ChatRequest:
    """Validate a ``/v1/completions`` body and translate it to a completion request.

    ``limits`` is accepted for the route's decoder signature; a completion has one
    message, so no count can exceed it.

    Raises:
        InvalidRequestError: not an object, a field of the wrong type, a value out of
            the API's range, several prompts or token arrays (``prompt``), ``n`` or
            ``best_of`` above 1, or ``logprobs`` asked for.
    """
    wire = validate_body(CompletionRequestBody, body, VALIDATION_WORDING)
    data = cast("dict[str, Any]", body)  # an object: validate_body accepted it
    check_ranges(wire, _RANGES)
    for name in ("n", "best_of"):
        value = getattr(wire, name)
        if value is not None and value != 1:
            raise InvalidRequestError(
                f"Invalid '{name}': {value}. llmbridge generates exactly one completion; "
                f"'{name}' must be 1.",
                param=name,
            )
    if wire.logprobs is not None:
        raise InvalidRequestError(
            "Invalid 'logprobs': llmbridge does not return log probabilities; "
            "leave 'logprobs' out.",
            param="logprobs",
        )
    suffix = wire.suffix or None  # an empty suffix leaves no gap to fill
    prompt = _prompt(wire.prompt)
    if not prompt and suffix is None:
        raise InvalidRequestError(
            "Invalid 'prompt': empty. Give the text to complete.", param="prompt"
        )
    details = {
        key: value for key, value in data.items() if key not in _MODELLED and value is not None
    }
    stop = wire.stop
    return ChatRequest(
        model=wire.model,
        messages=(Message("user", (TextPart(prompt),)),),
        stream=bool(wire.stream),
        params=GenerationParams(
            max_tokens=DEFAULT_COMPLETION_TOKENS if wire.max_tokens is None else wire.max_tokens,
            temperature=wire.temperature,
            top_p=wire.top_p,
            stop=(stop,) if isinstance(stop, str) else tuple(stop or ()),
            seed=wire.seed,
            frequency_penalty=wire.frequency_penalty,
            presence_penalty=wire.presence_penalty,
        ),
        include_usage=bool(wire.stream_options and wire.stream_options.include_usage),
        provider_details={"openai": details} if details else None,
        completion=Completion(prompt=prompt, suffix=suffix, raw=True, echo=bool(wire.echo)),
    )


def _prompt(value: str | list[str] | list[int] | list[list[int]]) -> str:
    """The one prompt: a string, or a list holding one string."""
    if isinstance(value, str):
        return value
    if value and all(isinstance(item, str) for item in value):
        if len(value) == 1:
            return cast("str", value[0])
        raise InvalidRequestError(
            f"Invalid 'prompt': {len(value)} prompts. llmbridge completes one prompt per "
            "request; send a string (or a list of one string).",
            param="prompt",
        )
    if not value:
        raise InvalidRequestError(
            "Invalid 'prompt': empty array. Give the text to complete.", param="prompt"
        )
    raise InvalidRequestError(
        "Invalid 'prompt': token arrays are not supported; send text.", param="prompt"
    )


# -- encode: core -> client body ----------------------------------------------------


def completion_id(core_id: str) -> str:
    """The id as the API spells it: ours when it already is one, else a new one."""
    return core_id if core_id.startswith("cmpl-") else new_id("cmpl-")


def _finish_reason(stop_reason: StopReason) -> str:
    return _FINISH_REASONS.get(stop_reason, "stop")


def _echoed(request: ChatRequest) -> str:
    completion = request.completion
    return completion.prompt if completion is not None and completion.echo else ""


def encode_completion_response(resp: ChatResponse, request: ChatRequest) -> dict[str, Any]:
    """The ``text_completion`` object for a complete reply (thinking, which the API
    cannot carry, left out)."""
    return {
        "id": completion_id(resp.id),
        "object": "text_completion",
        "created": int(resp.created or time.time()),
        "model": request.model,
        "choices": [
            {
                "text": _echoed(request) + resp.message.text,
                "index": 0,
                "logprobs": None,
                "finish_reason": _finish_reason(resp.stop_reason),
            }
        ],
        "usage": encode_usage(resp.usage),
    }


async def encode_completion_stream(
    events: AsyncIterator[StreamEvent], request: ChatRequest
) -> AsyncIterator[bytes]:
    """SSE ``text_completion`` chunks for an event stream, ending in ``[DONE]``.

    Each text delta is a chunk with ``finish_reason: null``; the last choice chunk has
    empty text and the ``finish_reason``; with ``request.include_usage`` a
    ``choices: []`` usage chunk follows (every other chunk then says ``usage: null``).
    With ``echo`` the prompt is the first chunk's text. A ``StreamError`` becomes
    ``data: {"error": ...}`` and the stream ends with ``[DONE]``.
    """
    chunk: dict[str, Any] | None = None
    usage = Usage()
    async for event in events:
        if isinstance(event, StreamError):
            yield sse_event(error_body(event.error, "")) + SSE_DONE
            return
        if chunk is None:
            chunk = _chunk_head(event, request)
            if echoed := _echoed(request):
                yield _text_chunk(chunk, echoed, None)
        text = ""
        if isinstance(event, PartDelta) and isinstance(event.delta, TextDelta):
            text = event.delta.text
        elif isinstance(event, PartStart) and isinstance(event.part, TextPart):
            text = event.part.text
        elif isinstance(event, UsageUpdate):
            usage = usage.merged(event.usage)
        elif isinstance(event, ResponseEnd):
            out = _text_chunk(chunk, "", _finish_reason(event.stop_reason))
            if request.include_usage:
                final = {**chunk, "choices": [], "usage": encode_usage(usage.merged(event.usage))}
                out += sse_event(final)
            yield out + SSE_DONE
            return
        if text:
            yield _text_chunk(chunk, text, None)
    # The event stream stopped without ResponseEnd or StreamError: say so rather
    # than end as if the reply were complete.
    error: LLMBridgeError = BackendProtocolError(
        "the backend's stream ended before it was complete"
    )
    yield sse_event(error_body(error, "")) + SSE_DONE


def _chunk_head(event: StreamEvent, request: ChatRequest) -> dict[str, Any]:
    """What every chunk of one stream repeats."""
    start = event if isinstance(event, ResponseStart) else None
    created = int(start.created) if start is not None and start.created else int(time.time())
    head: dict[str, Any] = {
        "id": completion_id(start.id if start is not None else ""),
        "object": "text_completion",
        "created": created,
        "model": request.model,
    }
    if request.include_usage:
        head["usage"] = None  # OpenAI: every chunk but the usage chunk says null
    return head


def _text_chunk(head: dict[str, Any], text: str, finish_reason: str | None) -> bytes:
    choice = {"text": text, "index": 0, "logprobs": None, "finish_reason": finish_reason}
    # Raw U+2028 in the text would split the SSE line (dialects/framing.py).
    return escape_line_breaks(b"data: " + orjson.dumps({**head, "choices": [choice]}) + b"\n\n")


# -- encode: core -> an OpenAI-compatible server ------------------------------------


def encode_completion_request(req: ChatRequest) -> dict[str, Any]:
    """The ``/v1/completions`` body llmbridge sends to an OpenAI-compatible server,
    always streamed with usage (the gateway accumulates a non-streamed reply).

    Raises:
        InvalidRequestError: ``req`` carries no ``Completion`` (a caller's bug).
    """
    completion = req.completion
    if completion is None:
        raise InvalidRequestError("a completion request needs a prompt", param="prompt")
    body: dict[str, Any] = dict((req.provider_details or {}).get("openai") or {})
    body.update(
        {
            "model": req.model,
            "prompt": completion.prompt,
            "stream": True,
            "stream_options": {"include_usage": True},
        }
    )
    if completion.suffix is not None:
        body["suffix"] = completion.suffix
    params = req.params
    for name in (
        "max_tokens",
        "temperature",
        "top_p",
        "seed",
        "frequency_penalty",
        "presence_penalty",
    ):
        value = getattr(params, name)
        if value is not None:
            body[name] = value
    if params.stop:
        body["stop"] = list(params.stop)
    return body
