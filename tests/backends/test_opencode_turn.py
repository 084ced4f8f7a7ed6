"""The ``opencode`` backend: OpenCode events as neutral stream events (``Turn``) and
OpenCode's errors as gateway errors. Event dicts are in the shapes verified against
OpenCode 1.18.33 (shared/reference/opencode-server.md)."""

from __future__ import annotations

from typing import Any

import pytest

from llmbridge.backends.opencode.turn import Turn, opencode_error
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    ContextLengthError,
    LLMBridgeError,
)
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    ResponseEnd,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
)
from llmbridge.core.messages import (
    TextPart,
)
from llmbridge.core.response import StopReason
from llmbridge.serving.resilience import is_transient

SID = "ses_1"


# -- Turn: OpenCode events as stream events ---------------------------------------------


def event(kind: str, **props: Any) -> dict[str, Any]:
    return {"id": f"evt_{kind}", "type": kind, "properties": props}


def message_updated(mid: str, role: str, **info: Any) -> dict[str, Any]:
    return event("message.updated", info={"id": mid, "sessionID": SID, "role": role, **info})


def part_updated(pid: str, mid: str, kind: str, **fields: Any) -> dict[str, Any]:
    part = {"id": pid, "sessionID": SID, "messageID": mid, "type": kind, **fields}
    return event("message.part.updated", part=part)


def delta(pid: str, mid: str, text: str) -> dict[str, Any]:
    return event(
        "message.part.delta", sessionID=SID, messageID=mid, partID=pid, field="text", delta=text
    )


def status(kind: str, **fields: Any) -> dict[str, Any]:
    return event("session.status", sessionID=SID, status={"type": kind, **fields})


def feed_all(turn: Turn, events: list[dict[str, Any]]) -> list[StreamEvent]:
    out: list[StreamEvent] = []
    for item in events:
        out.extend(turn.feed(item))
    return out


def texts(events: list[StreamEvent]) -> list[str]:
    return [
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    ]


def thoughts(events: list[StreamEvent]) -> list[str]:
    return [
        e.delta.text
        for e in events
        if isinstance(e, PartDelta) and isinstance(e.delta, ThinkingDelta)
    ]


def prologue() -> list[dict[str, Any]]:
    """What OpenCode sends before the reply: the user's message and its text."""
    return [
        message_updated("msg_u", "user"),
        part_updated("prt_u", "msg_u", "text", text="Say hello"),
        status("busy"),
        message_updated("msg_a", "assistant", tokens={"input": 0, "output": 0}),
        part_updated("prt_s", "msg_a", "step-start"),
    ]


def test_text_deltas_stream_as_text_events() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_t", "msg_a", "text", text=""),
            delta("prt_t", "msg_a", "Hel"),
            delta("prt_t", "msg_a", "lo"),
            part_updated("prt_t", "msg_a", "text", text="Hello"),
            part_updated("prt_f", "msg_a", "step-finish", reason="stop"),
            message_updated("msg_a", "assistant", finish="stop"),
        ],
    )
    assert texts(out) == ["Hel", "lo"]  # the final part.updated repeats nothing
    assert turn.produced and not turn.done
    feed_all(turn, [status("idle")])
    assert turn.done and turn.failure is None
    end = turn.finish()
    assert isinstance(end[-1], ResponseEnd) and end[-1].stop_reason == StopReason.END_TURN
    assert [e.part for e in end if isinstance(e, PartEnd)] == [TextPart("Hello")]


def test_reasoning_streams_as_thinking() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_r", "msg_a", "reasoning", text=""),
            delta("prt_r", "msg_a", "Let me "),
            delta("prt_r", "msg_a", "think."),
            part_updated("prt_r", "msg_a", "reasoning", text="Let me think."),
            part_updated("prt_t", "msg_a", "text", text=""),
            delta("prt_t", "msg_a", "Hi"),
        ],
    )
    assert thoughts(out) == ["Let me ", "think."]
    assert texts(out) == ["Hi"]


def test_the_users_message_is_never_emitted() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            message_updated("msg_u", "user"),
            part_updated("prt_u", "msg_u", "text", text="Say hello"),
            delta("prt_u", "msg_u", "Say hello"),
        ],
    )
    assert out == [] and not turn.produced


def test_a_final_text_longer_than_its_deltas_sends_only_the_missing_tail() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_t", "msg_a", "text", text=""),
            delta("prt_t", "msg_a", "Hello"),
            part_updated("prt_t", "msg_a", "text", text="Hello, world"),
            part_updated("prt_t", "msg_a", "text", text="Hello, world"),
        ],
    )
    assert texts(out) == ["Hello", ", world"]


def test_a_provider_that_does_not_stream_still_yields_the_whole_text() -> None:
    turn = Turn("oc")
    out = feed_all(
        turn,
        [
            *prologue(),
            part_updated("prt_t", "msg_a", "text", text="The whole reply."),
            status("idle"),
        ],
    )
    assert texts(out) == ["The whole reply."]
    assert turn.done


def test_a_delta_before_its_part_is_text() -> None:
    turn = Turn("oc")
    out = feed_all(turn, [*prologue(), delta("prt_t", "msg_a", "early")])
    assert texts(out) == ["early"]


def test_idle_twice_is_harmless() -> None:
    turn = Turn("oc")
    feed_all(turn, [*prologue(), part_updated("prt_t", "msg_a", "text", text="ok")])
    assert feed_all(turn, [status("idle"), event("session.idle", sessionID=SID)]) == []
    assert feed_all(turn, [status("idle"), event("session.idle", sessionID=SID)]) == []
    assert turn.done and turn.failure is None
    end = turn.finish()
    assert sum(isinstance(e, ResponseEnd) for e in end) == 1


def test_session_idle_alone_ends_the_turn() -> None:
    turn = Turn("oc")
    feed_all(turn, [event("session.idle", sessionID=SID)])
    assert turn.done


def test_busy_and_retry_do_not_end_the_turn_and_retry_is_remembered() -> None:
    turn = Turn("oc")
    feed_all(
        turn,
        [
            status("busy"),
            status("retry", attempt=2, message="Cannot connect to API", next=1700000000000),
        ],
    )
    assert not turn.done
    assert turn.retry_message == "Cannot connect to API"
    assert turn.retry_report  # the last event was a retry report: no sign of progress
    turn.feed(status("busy"))
    assert not turn.retry_report


def test_usage_is_summed_over_the_steps_of_a_turn() -> None:
    turn = Turn("oc")
    first = {"input": 100, "output": 10, "reasoning": 5, "cache": {"read": 40, "write": 8}}
    second = {"input": 130, "output": 20, "reasoning": 0, "cache": {"read": 60, "write": 0}}
    feed_all(
        turn,
        [
            message_updated("msg_1", "assistant", tokens=first, finish="tool-calls"),
            # The same message reported again (finish, then time.completed): not double-counted.
            message_updated("msg_1", "assistant", tokens=first, finish="tool-calls"),
            message_updated("msg_2", "assistant", tokens=second, finish="stop"),
            status("idle"),
        ],
    )
    usage = turn.usage()
    assert usage.input_tokens == 230 + 100 + 8  # cache reads and writes counted in
    assert usage.output_tokens == 35  # reasoning counts as output
    assert usage.cache_read_input_tokens == 100
    assert usage.cache_creation_input_tokens == 8
    assert turn.stop_reason() == StopReason.END_TURN  # the last step's finish


def test_usage_without_tokens_is_unknown() -> None:
    turn = Turn("oc")
    feed_all(turn, [message_updated("msg_1", "assistant")])
    usage = turn.usage()
    assert usage.input_tokens is None and usage.output_tokens is None


def test_finish_length_is_max_tokens() -> None:
    turn = Turn("oc")
    feed_all(turn, [message_updated("msg_1", "assistant", finish="length"), status("idle")])
    assert turn.failure is None
    assert turn.stop_reason() == StopReason.MAX_TOKENS


def test_output_length_error_is_max_tokens_not_a_failure() -> None:
    turn = Turn("oc")
    error = {"name": "MessageOutputLengthError", "data": {}}
    feed_all(turn, [message_updated("msg_1", "assistant", error=error), status("idle")])
    assert turn.failure is None
    assert turn.finish()[-1] == ResponseEnd(stop_reason=StopReason.MAX_TOKENS, usage=turn.usage())


def test_content_filter_finish() -> None:
    turn = Turn("oc")
    feed_all(turn, [message_updated("msg_1", "assistant", finish="content-filter")])
    assert turn.stop_reason() == StopReason.CONTENT_FILTER


def _api_error(status: int | None, retryable: bool) -> dict[str, Any]:
    data: dict[str, Any] = {"message": "provider said no", "isRetryable": retryable}
    if status is not None:
        data["statusCode"] = status
    return {"name": "APIError", "data": data}


@pytest.mark.parametrize(
    ("status", "retryable", "mapped"),
    [
        (400, False, 400),
        (429, True, 429),
        (500, True, 502),
        (503, False, 503),
        (401, False, 401),
        (408, True, 408),
    ],
)
def test_api_errors_keep_the_providers_status(status: int, retryable: bool, mapped: int) -> None:
    failure = opencode_error(_api_error(status, retryable), "oc")
    assert isinstance(failure, BackendHTTPError)
    assert failure.backend_status == status
    assert failure.status_code == mapped
    assert failure.backend == "oc"
    assert failure.retryable is retryable
    assert "provider said no" in failure.message
    # Only the serving layer retries, and it follows OpenCode's isRetryable over the
    # status: a provider 503 OpenCode will not retry is not retried; a 408 it will is.
    assert is_transient(failure) is retryable


@pytest.mark.parametrize("retryable", [True, False])
def test_an_api_error_without_a_status_is_a_backend_error(retryable: bool) -> None:
    failure = opencode_error(_api_error(None, retryable), "oc")
    assert failure is not None
    assert type(failure) is BackendError
    assert failure.status_code == 502
    assert failure.retryable is retryable and is_transient(failure) is retryable
    assert "provider said no" in failure.message


@pytest.mark.parametrize(
    ("error", "cls", "status", "words"),
    [
        (
            {"name": "ContextOverflowError", "data": {"message": "too long by 300 tokens"}},
            ContextLengthError,
            400,
            "too long by 300 tokens",
        ),
        (
            {"name": "ProviderAuthError", "data": {"providerID": "gw", "message": "bad key"}},
            BackendError,
            502,
            "provider 'gw' rejected its credentials: bad key",
        ),
        (
            {"name": "MessageAbortedError", "data": {"message": "Aborted"}},
            BackendError,
            502,
            "aborted",
        ),
        (
            {"name": "UnknownError", "data": {"message": "kaput"}},
            BackendError,
            502,
            "UnknownError: kaput",
        ),
        (
            {"name": "ContentFilterError", "data": {"message": "filtered"}},
            BackendError,
            502,
            "ContentFilterError: filtered",
        ),
        ({"message": "no name at all"}, BackendError, 502, "UnknownError: no name at all"),
    ],
    ids=["context", "auth", "aborted", "unknown-error", "unknown-name", "nameless"],
)
def test_opencode_errors_map_to_gateway_errors(
    error: dict[str, Any], cls: type[LLMBridgeError], status: int, words: str
) -> None:
    failure = opencode_error(error, "oc")
    assert failure is not None
    assert type(failure) is cls
    assert failure.status_code == status
    assert words in failure.message
    assert not is_transient(failure)  # only what OpenCode marks isRetryable is retried


@pytest.mark.parametrize("error", [None, "text", {"name": "MessageOutputLengthError"}])
def test_what_is_not_a_failure(error: Any) -> None:
    assert opencode_error(error, "oc") is None


def test_session_error_fails_and_ends_the_turn() -> None:
    turn = Turn("oc")
    feed_all(turn, [event("session.error", sessionID=SID, error=_api_error(400, False))])
    assert turn.done
    assert isinstance(turn.failure, BackendHTTPError)


def test_an_assistant_message_error_is_the_failure_and_the_first_one_wins() -> None:
    turn = Turn("oc")
    feed_all(
        turn,
        [
            message_updated("msg_a", "assistant", error=_api_error(429, True)),
            event("session.error", sessionID=SID, error=_api_error(500, False)),
        ],
    )
    assert isinstance(turn.failure, BackendHTTPError)
    assert turn.failure.backend_status == 429 and turn.failure.retryable


def test_permission_and_question_requests_are_collected_to_reject() -> None:
    turn = Turn("oc")
    feed_all(
        turn,
        [
            event(
                "permission.asked",
                id="per_1",
                sessionID=SID,
                permission="bash",
                patterns=["*"],
                metadata={},
                always=[],
                tool={"messageID": "msg_a", "callID": "call_1"},
            ),
            event("question.asked", id="que_1", sessionID=SID, questions=[]),
        ],
    )
    assert turn.to_reject == [("permission", "per_1"), ("question", "que_1")]
    assert not turn.done


def test_a_tool_part_is_not_emitted() -> None:
    turn = Turn("oc")
    tool = part_updated(
        "prt_x",
        "msg_a",
        "tool",
        callID="call_1",
        tool="bash",
        state={"status": "pending", "input": {"command": "ls"}, "raw": ""},
    )
    assert feed_all(turn, [*prologue(), tool]) == []
    assert not turn.produced


@pytest.mark.parametrize(
    "junk",
    [
        {"type": "message.part.delta"},
        {"type": "message.part.updated", "properties": {"part": "x"}},
        {"type": "message.updated", "properties": {"info": {"role": "assistant"}}},
        {"type": "session.status", "properties": {"status": "idle"}},
        {"type": "server.heartbeat", "properties": {}},
        {"type": "message.part.delta", "properties": {"field": "text", "delta": 3}},
    ],
)
def test_malformed_events_are_ignored(junk: dict[str, Any]) -> None:
    turn = Turn("oc")
    assert turn.feed(junk) == []
    assert not turn.done and turn.failure is None
