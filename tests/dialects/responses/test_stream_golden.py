"""Golden SSE for the Responses stream ENCODER (the gateway's ``/v1/responses`` front).

Each case is a fixed list of neutral events, encoded by ``encode_chat_stream`` for a
fixed request (decoded from a Responses body, so the envelope echoes what a client
sent), and compared byte for byte with ``tests/fixtures/streams/responses_encoded/
<case>.sse`` once the values that change per run are replaced by placeholders
(``normalised``): response and item ids, numbered by first appearance so that an
item's ``added`` and ``done`` visibly share one id, and ``created_at``.

The fixtures' events are also checked against the openai SDK's own
``ResponseStreamEvent`` union, so a golden file cannot pin a shape clients reject.
After a deliberate change to the encoder, regenerate them with
``UPDATE_SNAPSHOTS=1 pytest tests/dialects/responses/test_stream_golden.py`` (the
variable tests/profiler/test_trace.py uses) and review the diff.
"""

from __future__ import annotations

import os
import re
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from llmbridge.core.errors import BackendError
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
    ToolArgsDelta,
    UsageUpdate,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.response import StopReason, Usage
from llmbridge.dialects.responses.request import decode_chat_request
from llmbridge.dialects.responses.stream import encode_chat_stream

FIXTURES = Path(__file__).parents[2] / "fixtures" / "streams" / "responses_encoded"
EVENT = TypeAdapter[Any](ResponseStreamEvent)
PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hello\n*** End Patch\n"
TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
    {
        "type": "custom",
        "name": "apply_patch",
        "description": "Edit files.",
        "format": {"type": "grammar", "syntax": "lark", "definition": "start: hunk+"},
    },
]
REQUEST = decode_chat_request(
    {
        "model": "gpt-5-codex",
        "instructions": "Be brief.",
        "input": [{"role": "user", "content": "hi"}],
        "tools": TOOLS,
        "stream": True,
        "max_output_tokens": 64,
        "reasoning": {"effort": "low", "summary": "auto"},
    }
)
START = ResponseStart(id="up-1", model="gpt-5-codex", created=1764000000.0, input_tokens=12)


def _text(*pieces: str, index: int = 0) -> list[StreamEvent]:
    whole = "".join(pieces)
    return [
        PartStart(index, TextPart("")),
        *(PartDelta(index, TextDelta(piece)) for piece in pieces),
        PartEnd(index, TextPart(whole)),
    ]


CASES: dict[str, list[StreamEvent]] = {
    # plain text, with a non-ASCII piece, a line separator and usage both streamed and final
    "text": [
        START,
        *_text("Bonjour, ", "café 🌍", " a\u2028b"),
        UsageUpdate(Usage(input_tokens=12, cache_read_input_tokens=4)),
        ResponseEnd(StopReason.END_TURN, Usage(output_tokens=5)),
    ],
    # a reasoning item with its summary streamed, then the answer
    "reasoning_then_text": [
        START,
        PartStart(0, ThinkingPart("")),
        PartDelta(0, ThinkingDelta("The user ")),
        PartDelta(0, ThinkingDelta("greets me.")),
        PartEnd(0, ThinkingPart("The user greets me.")),
        *_text("Hi!", index=1),
        ResponseEnd(StopReason.END_TURN, Usage(input_tokens=12, output_tokens=9)),
    ],
    # text, then a function call whose arguments came in fragments: they go out whole
    "function_call": [
        START,
        *_text("Let me check."),
        PartStart(1, ToolCallPart("call_w1", "get_weather", {})),
        PartDelta(1, ToolArgsDelta('{"ci')),
        PartDelta(1, ToolArgsDelta('ty": "Paris"}')),
        PartEnd(1, ToolCallPart("call_w1", "get_weather", {"city": "Paris"})),
        ResponseEnd(StopReason.TOOL_USE, Usage(input_tokens=12, output_tokens=14)),
    ],
    # Codex's apply_patch: the function's one string argument is the item's input
    "custom_tool_call": [
        START,
        PartStart(0, ToolCallPart("call_p1", "apply_patch", {})),
        PartDelta(0, ToolArgsDelta(orjson.dumps({"input": PATCH}).decode())),
        PartEnd(0, ToolCallPart("call_p1", "apply_patch", {"input": PATCH})),
        ResponseEnd(StopReason.TOOL_USE, Usage(input_tokens=12, output_tokens=20)),
    ],
    # the token cap: response.incomplete, reason max_output_tokens
    "incomplete": [
        START,
        *_text("It was a dark and"),
        ResponseEnd(StopReason.MAX_TOKENS, Usage(input_tokens=12, output_tokens=64)),
    ],
    # a backend failure after some text: the open item never finishes; error, then failed
    "failed_mid_stream": [
        START,
        *_text("Hello", index=0)[:2],
        StreamError(BackendError("the upstream fell over")),
    ],
}

_IDS = re.compile(rb'"((?:resp|msg|rs|fc|ctc)_[A-Za-z0-9_-]+)"')
_CREATED = re.compile(rb'"created_at":[0-9.e+]+')


def normalised(body: bytes) -> bytes:
    """``body`` with per-run values as placeholders: ids numbered by first appearance
    (``"msg_<1>"``), ``created_at`` as 0."""
    seen: dict[bytes, bytes] = {}

    def placeholder(match: re.Match[bytes]) -> bytes:
        found = match.group(1)
        if found not in seen:
            prefix = found.split(b"_", 1)[0]
            number = sum(1 for key in seen if key.split(b"_", 1)[0] == prefix) + 1
            seen[found] = prefix + b"_<" + str(number).encode() + b">"
        return b'"' + seen[found] + b'"'

    return _CREATED.sub(b'"created_at":0', _IDS.sub(placeholder, body))


async def _events(events: list[StreamEvent]) -> AsyncIterator[StreamEvent]:
    for event in events:
        yield event


async def encoded(case: str) -> bytes:
    chunks = [chunk async for chunk in encode_chat_stream(_events(CASES[case]), REQUEST)]
    return normalised(b"".join(chunks))


def test_every_case_has_a_fixture_and_no_fixture_is_stale() -> None:
    assert sorted(p.stem for p in FIXTURES.glob("*.sse")) == sorted(CASES)


@pytest.mark.parametrize("case", sorted(CASES))
async def test_encoder_matches_golden(case: str) -> None:
    body = await encoded(case)
    golden = FIXTURES / f"{case}.sse"
    if os.environ.get("UPDATE_SNAPSHOTS") == "1":
        FIXTURES.mkdir(parents=True, exist_ok=True)
        golden.write_bytes(body)
    assert golden.exists(), f"no fixture for {case}: run with UPDATE_SNAPSHOTS=1 and review it"
    assert body == golden.read_bytes()


@pytest.mark.parametrize("case", sorted(CASES))
def test_golden_events_are_valid_for_the_openai_sdk(case: str) -> None:
    lines = (FIXTURES / f"{case}.sse").read_bytes().split(b"\n")
    names = [line[len(b"event: ") :].decode() for line in lines if line.startswith(b"event: ")]
    payloads = [
        orjson.loads(line[len(b"data: ") :]) for line in lines if line.startswith(b"data: ")
    ]
    assert len(names) == len(payloads) > 2
    for number, (name, payload) in enumerate(zip(names, payloads, strict=True)):
        assert payload["type"] == name and payload["sequence_number"] == number
        EVENT.validate_python(payload)
    last = {"incomplete": "response.incomplete", "failed_mid_stream": "response.failed"}
    assert names[-1] == last.get(case, "response.completed")


def test_normalised_keeps_distinct_ids_distinct() -> None:
    body = b'{"id":"resp_a1","item":{"id":"msg_x"},"other":"msg_y","again":"msg_x"}'
    assert normalised(body) == (
        b'{"id":"resp_<1>","item":{"id":"msg_<1>"},"other":"msg_<2>","again":"msg_<1>"}'
    )
