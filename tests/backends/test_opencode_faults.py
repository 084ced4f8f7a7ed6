"""The ``opencode`` backend against a fake OpenCode server (opencode_fake.py):
completion, a lost event stream, a lost warm session, provider errors, deadlines,
permission and question requests. Every deadline is under a second, every wait a
bounded poll, everything on 127.0.0.1.

Only the serving layer retries (the backend used to retry inside too, so
one failure could be retried twice over): each transient failure is shown failing
the backend alone at once, with one prompt, and retried once in a new session
through ``Models.chat`` (``resilience.retries`` 1, the default)."""

from __future__ import annotations

import asyncio
from contextlib import aclosing
from typing import Any

import pytest

from llmbridge.backends.opencode import OpenCodeBackend
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    BackendTimeoutError,
    BackendUnavailableError,
)
from llmbridge.core.events import (
    PartDelta,
    ResponseEnd,
    ResponseStart,
    StreamEvent,
)
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason
from llmbridge.serving.config import ServingConfig
from llmbridge.serving.models import Models
from llmbridge.serving.resilience import is_transient
from tests.backends.opencode_fake import (
    DROP,
    Event,
    FakeOpenCode,
    Prompt,
    chat_request,
    closing,
    collect,
    deleted,
    delta,
    ev,
    eventually,
    make_backend,
    opening,
    reply,
    session_error,
    text_of,
)
from tests.serving.tally import Tally


def served(fake: FakeOpenCode, backend: OpenCodeBackend) -> tuple[Models, Tally]:
    """``backend`` behind the serving layer, as the gateway and the agent call it:
    the default resilience policy (one retry), without the pause before it."""
    config = ServingConfig.model_validate(
        {
            "backends": {backend.name: {"type": "opencode", "url": fake.url}},
            "resilience": {"backoff_ms": 0},
        }
    )
    tally = Tally()
    return Models(config, {backend.name: backend}, observer=tally), tally


async def collect_served(models: Models, request: ChatRequest | None = None) -> list[StreamEvent]:
    async with aclosing(models.chat(request or chat_request())) as events:
        return [event async for event in events]


# -- completion ------------------------------------------------------------------------


@pytest.mark.parametrize("idle", ["status", "idle", "both"])
async def test_the_turn_ends_on_either_idle_signal(
    fake: FakeOpenCode, backend: OpenCodeBackend, idle: str
) -> None:
    fake.prompts.append(Prompt(events=reply("Hel", "lo", " there", idle=idle)))
    events = await collect(backend)
    assert isinstance(events[0], ResponseStart)
    assert text_of(events) == "Hello there"
    end = events[-1]
    assert isinstance(end, ResponseEnd) and end.stop_reason == StopReason.END_TURN
    assert end.usage.input_tokens == 12 and end.usage.output_tokens == 3
    body = fake.prompt_bodies()[0]
    assert body["model"] == {"providerID": "p", "modelID": "m"}
    assert body["tools"] == {"*": False} and body["agent"] == "llmbridge"
    assert body["parts"] == [{"type": "text", "text": "Say hello"}]


async def test_events_of_other_sessions_are_ignored(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        own = reply("mine")(sid)
        theirs = reply("NOT MINE")("ses_other")
        # Interleaved, and the other session finishes first.
        return [*theirs[:3], *own[:7], *theirs[3:], *own[7:]]

    fake.prompts.append(Prompt(events=events))
    events_out = await collect(backend)
    assert text_of(events_out) == "mine"
    assert isinstance(events_out[-1], ResponseEnd)


async def test_a_duplicated_event_is_delivered_once(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        twice = delta(sid, "Hello", event_id="evt_same")
        again = delta(sid, "Hello", event_id="evt_same")
        return [
            *opening(sid),
            twice,
            again,
            delta(sid, " world"),
            *closing(sid, "Hello world"),
            *closing(sid, "Hello world"),  # idle twice, as OpenCode has sent it
        ]

    fake.prompts.append(Prompt(events=events))
    events_out = await collect(backend)
    assert text_of(events_out) == "Hello world"
    assert sum(isinstance(e, ResponseEnd) for e in events_out) == 1


async def test_a_turn_without_text_still_answers(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), *closing(sid, "")]))
    events = await collect(backend)
    assert isinstance(events[0], ResponseStart) and isinstance(events[-1], ResponseEnd)
    assert text_of(events) == ""


# -- a lost event stream ---------------------------------------------------------------


async def test_a_stream_lost_before_output_is_retried_in_a_new_session(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    models, tally = served(fake, backend)
    fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), DROP]))
    fake.prompts.append(Prompt(events=reply("second", " time")))
    events = await collect_served(models)
    assert text_of(events) == "second time"
    assert tally.retries == ["oc"]
    first, second = fake.prompted()
    assert first != second
    assert fake.event_connections == 2  # the hub reconnected
    await eventually(deleted(fake, first))
    assert fake.cleanup_of(first) == [f"POST /session/{first}/abort", f"DELETE /session/{first}"]
    await eventually(deleted(fake, second))
    assert backend.breakdowns[0].outcome == "BackendUnavailableError"
    assert backend.breakdowns[1].outcome == "ok"


def _stream_lost(sid: str) -> list[Event | str]:
    return [*opening(sid), DROP]


def _retryable_provider_error(sid: str) -> list[Event | str]:
    return session_error(api_error(503, True))(sid)


@pytest.mark.parametrize(
    ("script", "error", "words"),
    [
        (Prompt(events=_stream_lost), BackendUnavailableError, "event stream was lost"),
        (Prompt(status=404), BackendUnavailableError, "is gone"),
        (Prompt(events=_retryable_provider_error), BackendHTTPError, r"provider failed \(503\)"),
    ],
    ids=["stream-lost", "session-gone", "retryable-provider-error"],
)
async def test_the_backend_alone_never_retries_a_transient_failure(
    fake: FakeOpenCode,
    backend: OpenCodeBackend,
    script: Prompt,
    error: type[BackendError],
    words: str,
) -> None:
    fake.prompts.extend([script, Prompt(events=reply("must not be used"))])
    with pytest.raises(error, match=words) as info:
        await collect(backend)
    assert is_transient(info.value)  # the serving layer's to retry
    (sid,) = fake.prompted()
    assert len(fake.prompts) == 1
    await eventually(deleted(fake, sid))
    assert backend.breakdowns[0].outcome == error.__name__


async def test_a_stream_lost_after_output_fails_without_a_retry(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    models, tally = served(fake, backend)
    fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), delta(sid, "partial"), DROP]))
    fake.prompts.append(Prompt(events=reply("must not be used")))
    received: list[StreamEvent] = []
    with pytest.raises(BackendUnavailableError, match="event stream was lost"):
        async with aclosing(models.chat(chat_request())) as events:
            async for item in events:
                received.append(item)
    assert text_of(received) == "partial"
    assert tally.retries == []
    assert sum(isinstance(e, ResponseStart) for e in received) == 1
    (sid,) = fake.prompted()
    assert len(fake.prompts) == 1
    await eventually(deleted(fake, sid))
    assert fake.cleanup_of(sid)[0] == f"POST /session/{sid}/abort"


async def test_hanging_up_ends_the_turns_subscription_before_close_returns(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    # The turn's inner generator holds the session's event subscription; closing the
    # outer stream closes it too (aclosing), not at garbage collection.
    fake.prompts.append(
        Prompt(events=lambda sid: [*opening(sid), delta(sid, "a"), delta(sid, "b")])
    )
    stream = backend.chat(chat_request())
    async with aclosing(stream):
        async for item in stream:
            if isinstance(item, PartDelta):
                break
    (sid,) = fake.prompted()
    assert sid not in backend.hub._queues
    await eventually(deleted(fake, sid))
    assert fake.cleanup_of(sid)[0] == f"POST /session/{sid}/abort"


# -- a warm session gone ----------------------------------------------------------------


async def test_a_vanished_warm_session_is_replaced(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, pool_size=2)
    await opencode.start()
    try:
        models, tally = served(fake, opencode)
        await eventually(lambda: len(fake.created()) == 2)
        fake.prompts.append(Prompt(status=404))
        fake.prompts.append(Prompt(events=reply("fine")))
        events = await collect_served(models)
        assert text_of(events) == "fine"
        assert tally.retries == ["oc"]
        first, second = fake.prompted()
        assert first != second
        assert {first, second} <= set(fake.created())
        await eventually(deleted(fake, first))
    finally:
        await opencode.aclose()


async def test_a_second_missing_session_surfaces_the_error(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, pool_size=2)
    await opencode.start()
    try:
        models, _ = served(fake, opencode)
        await eventually(lambda: len(fake.created()) == 2)
        fake.prompts.extend([Prompt(status=404), Prompt(status=404), Prompt(events=reply("x"))])
        with pytest.raises(BackendUnavailableError, match="is gone") as info:
            await collect_served(models)
        # OpenCode's 404 is about its session, not the caller's request: a 503.
        assert info.value.status_code == 503
        assert isinstance(info.value.__cause__, BackendHTTPError)
        assert info.value.__cause__.backend_status == 404
        assert len(fake.prompted()) == 2 and len(fake.prompts) == 1
        for sid in fake.prompted():
            await eventually(deleted(fake, sid))
    finally:
        await opencode.aclose()


# -- a session not created in time ---------------------------------------------------------


async def test_a_session_not_created_in_time_fails_the_backend_alone_at_once(
    fake: FakeOpenCode,
) -> None:
    opencode = make_backend(fake.url, prompt=0.3)
    await opencode.start()
    try:
        fake.create_delays.append(1.0)
        fake.prompts.append(Prompt(events=reply("must not be used")))
        with pytest.raises(
            BackendUnavailableError, match=r"did not create a session within 0\.3 s"
        ) as info:
            await collect(opencode)
        assert is_transient(info.value) and info.value.status_code == 503
        assert len(fake.created()) == 1 and fake.prompted() == []
    finally:
        await opencode.aclose()


async def test_a_session_not_created_in_time_is_retried_by_serving(
    fake: FakeOpenCode,
) -> None:
    opencode = make_backend(fake.url, prompt=0.3)
    await opencode.start()
    try:
        models, tally = served(fake, opencode)
        fake.create_delays.append(1.0)
        fake.prompts.append(Prompt(events=reply("second session")))
        assert text_of(await collect_served(models)) == "second session"
        assert tally.retries == ["oc"]
        _slow, fast = fake.created()
        assert fake.prompted() == [fast]
    finally:
        await opencode.aclose()


# -- provider errors reported by OpenCode -----------------------------------------------


def api_error(status: int, retryable: bool) -> dict[str, Any]:
    return {
        "name": "APIError",
        "data": {
            "message": f"provider failed ({status})",
            "statusCode": status,
            "isRetryable": retryable,
        },
    }


async def test_a_retryable_provider_error_before_output_is_retried_once(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    models, tally = served(fake, backend)
    fake.prompts.append(Prompt(events=session_error(api_error(503, True))))
    fake.prompts.append(Prompt(events=reply("recovered")))
    assert text_of(await collect_served(models)) == "recovered"
    assert len(fake.prompted()) == 2 and tally.retries == ["oc"]


async def test_a_retryable_error_twice_surfaces(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    models, tally = served(fake, backend)
    fake.prompts.extend([Prompt(events=session_error(api_error(429, True)))] * 3)
    with pytest.raises(BackendHTTPError) as info:
        await collect_served(models)
    assert info.value.status_code == 429
    assert len(fake.prompted()) == 2 and tally.retries == ["oc"]  # once, not twice over


@pytest.mark.parametrize("status", [400, 500])
async def test_a_non_retryable_provider_error_is_not_retried(
    fake: FakeOpenCode, backend: OpenCodeBackend, status: int
) -> None:
    """Not even a provider 500, which serving would retry by its status: OpenCode
    said a retry will not help."""
    models, tally = served(fake, backend)
    fake.prompts.append(Prompt(events=session_error(api_error(status, False))))
    fake.prompts.append(Prompt(events=reply("must not be used")))
    with pytest.raises(BackendHTTPError) as info:
        await collect_served(models)
    assert info.value.backend_status == status
    assert f"provider failed ({status})" in info.value.message
    assert tally.retries == []
    (sid,) = fake.prompted()
    await eventually(deleted(fake, sid))
    assert fake.cleanup_of(sid) == [f"POST /session/{sid}/abort", f"DELETE /session/{sid}"]


async def test_a_retryable_error_after_output_is_not_retried(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        return [*opening(sid), delta(sid, "half"), *session_error(api_error(503, True))(sid)[-2:]]

    models, tally = served(fake, backend)
    fake.prompts.append(Prompt(events=events))
    received: list[StreamEvent] = []
    with pytest.raises(BackendHTTPError):
        async with aclosing(models.chat(chat_request())) as stream:
            async for item in stream:
                received.append(item)
    assert text_of(received) == "half"
    assert len(fake.prompted()) == 1 and tally.retries == []


# -- deadlines ---------------------------------------------------------------------------


async def test_silence_times_out_and_the_session_is_aborted_then_deleted(
    fake: FakeOpenCode,
) -> None:
    opencode = make_backend(fake.url, prompt=0.3, idle=1.0)
    await opencode.start()
    try:
        models, tally = served(fake, opencode)
        loop = asyncio.get_running_loop()
        started = loop.time()
        with pytest.raises(BackendTimeoutError) as info:
            await collect_served(models)
        assert 0.25 < loop.time() - started < 1.5
        assert info.value.status_code == 504
        assert "did not start its reply within 0.3 s" in info.value.message
        (sid,) = fake.prompted()  # a timeout is not retried, by serving either
        assert tally.retries == []
        await eventually(deleted(fake, sid))
        assert fake.cleanup_of(sid) == [f"POST /session/{sid}/abort", f"DELETE /session/{sid}"]
        assert opencode.breakdowns[0].outcome == "BackendTimeoutError"
    finally:
        await opencode.aclose()


async def test_a_provider_retry_message_is_named_in_the_timeout(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, prompt=0.3, idle=1.0)
    await opencode.start()
    try:

        def events(sid: str) -> list[Event | str]:
            status = {"type": "retry", "attempt": 1, "message": "Cannot connect to API", "next": 1}
            return [*opening(sid), ev("session.status", sessionID=sid, status=status)]

        fake.prompts.append(Prompt(events=events))
        with pytest.raises(BackendTimeoutError) as info:
            await collect(opencode)
        assert "retrying its model provider: Cannot connect to API" in info.value.message
    finally:
        await opencode.aclose()


async def test_a_reply_that_goes_silent_times_out_mid_stream(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, prompt=0.3, idle=0.6)
    await opencode.start()
    try:
        fake.prompts.append(Prompt(events=lambda sid: [*opening(sid), delta(sid, "and then")]))
        received: list[StreamEvent] = []
        with pytest.raises(BackendTimeoutError, match=r"sent nothing more for 0\.6 s"):
            async for item in opencode.chat(chat_request()):
                received.append(item)
        assert text_of(received) == "and then"
        (sid,) = fake.prompted()
        await eventually(deleted(fake, sid))
        assert fake.cleanup_of(sid)[0] == f"POST /session/{sid}/abort"
    finally:
        await opencode.aclose()


def steady_reply(pieces: int) -> list[str]:
    return [f"piece{n} " for n in range(pieces)]


async def test_a_reply_that_keeps_streaming_outlasts_the_idle_deadline(
    fake: FakeOpenCode,
) -> None:
    """Claude Code writing a file through OpenCode: a long reply, streaming steadily.
    Events 0.1 s apart take well over the 0.6 s idle deadline in all, but no gap
    between two of them comes near it, so the whole reply arrives."""
    opencode = make_backend(fake.url, prompt=2.0, idle=0.6)
    await opencode.start()
    try:
        pieces = steady_reply(12)
        fake.prompts.append(Prompt(events=reply(*pieces), gap=0.1))
        events = await collect(opencode)
        assert text_of(events) == "".join(pieces)
        end = events[-1]
        assert isinstance(end, ResponseEnd) and end.stop_reason == StopReason.END_TURN
        breakdown = opencode.breakdowns[0]
        assert breakdown.outcome == "ok"
        assert breakdown.completion is not None and breakdown.completion > 0.6
    finally:
        await opencode.aclose()


async def test_the_optional_total_deadline_still_bounds_a_streaming_reply(
    fake: FakeOpenCode,
) -> None:
    opencode = make_backend(fake.url, prompt=2.0, idle=0.6, total=1.0)
    await opencode.start()
    try:
        fake.prompts.append(Prompt(events=reply(*steady_reply(12)), gap=0.1))
        received: list[StreamEvent] = []
        with pytest.raises(BackendTimeoutError, match=r"did not finish its reply within 1 s"):
            async for item in opencode.chat(chat_request()):
                received.append(item)
        assert text_of(received).startswith("piece0 ")  # output had been sent
        (sid,) = fake.prompted()  # output had been sent: no retry
        await eventually(deleted(fake, sid))
        assert fake.cleanup_of(sid)[0] == f"POST /session/{sid}/abort"
    finally:
        await opencode.aclose()


async def test_provider_retry_reports_do_not_keep_a_silent_reply_alive(
    fake: FakeOpenCode,
) -> None:
    """After some output the provider stops answering and OpenCode reports its
    retries: those are not progress, so the idle deadline still fires."""
    opencode = make_backend(fake.url, prompt=2.0, idle=0.6)
    await opencode.start()
    try:

        def events(sid: str) -> list[Event | str]:
            status = {"type": "retry", "attempt": 1, "message": "overloaded", "next": 1}
            retrying = ev("session.status", sessionID=sid, status=status)
            return [*opening(sid), delta(sid, "so far"), *[retrying] * 12]

        fake.prompts.append(Prompt(events=events, gap=0.1))
        with pytest.raises(BackendTimeoutError, match=r"sent nothing more for 0\.6 s") as info:
            await collect(opencode)
        assert "retrying its model provider: overloaded" in info.value.message
    finally:
        await opencode.aclose()


# -- permission and question requests ---------------------------------------------------


async def test_permission_and_question_requests_are_refused(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    def events(sid: str) -> list[Event | str]:
        asked = ev(
            "permission.asked",
            id="per_1",
            sessionID=sid,
            permission="bash",
            patterns=["ls"],
            metadata={},
            always=[],
            tool={"messageID": "msg_a", "callID": "call_1"},
        )
        question = ev("question.asked", id="que_1", sessionID=sid, questions=[])
        foreign = ev("permission.asked", id="per_other", sessionID="ses_other", permission="x")
        return [*opening(sid), foreign, asked, question, *reply("done")(sid)[len(opening(sid)) :]]

    fake.prompts.append(Prompt(events=events))
    assert text_of(await collect(backend)) == "done"
    await eventually(lambda: "/question/que_1/reject" in fake.paths("POST"))
    await eventually(lambda: "/permission/per_1/reply" in fake.paths("POST"))
    (reply_call,) = [c for c in fake.calls if c.path == "/permission/per_1/reply"]
    assert reply_call.body["reply"] == "reject"
    assert not any("per_other" in path for path in fake.paths())
