"""The ``opencode`` backend against a fake OpenCode server (opencode_fake.py): the
session pool and cleanup, discovery, health and the model list."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from typing import Any

import pytest

from llmbridge.backends.opencode import OpenCodeBackend
from llmbridge.backends.opencode.sessions import DENY_ALL, SESSION_TITLE
from llmbridge.core.errors import (
    BackendError,
)
from llmbridge.core.events import (
    PartDelta,
)
from tests.backends.opencode_fake import (
    Event,
    FakeOpenCode,
    Prompt,
    chat_request,
    closing,
    collect,
    deleted,
    ev,
    eventually,
    make_backend,
    opening,
    reply,
    session_error,
    text_of,
)
from tests.conftest import RunningServer

# -- the session pool and cleanup --------------------------------------------------------


async def test_a_warm_pool_serves_requests_and_is_refilled(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url, pool_size=2)
    await opencode.start()
    try:
        await eventually(lambda: len(fake.created()) == 2)
        warm = fake.created()
        for call in fake.calls:
            if call.path == "/session":
                assert call.body["request"] == {"title": SESSION_TITLE, "permission": DENY_ALL}
        fake.prompts.append(Prompt(events=reply("pooled")))
        assert text_of(await collect(opencode)) == "pooled"
        (sid,) = fake.prompted()
        assert sid in warm
        await eventually(lambda: len(fake.created()) == 3)  # its replacement
        await eventually(lambda: opencode.breakdowns[0].cleaned)
        breakdown = opencode.breakdowns[0]
        assert breakdown.pooled and breakdown.session_id == sid and breakdown.outcome == "ok"
        assert fake.cleanup_of(sid) == [f"DELETE /session/{sid}"]  # finished: no abort
    finally:
        await opencode.aclose()
    # Closing deletes the warm sessions too.
    for sid in fake.created():
        assert fake.cleanup_of(sid) == [f"DELETE /session/{sid}"]


def _other_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t is not asyncio.current_task() and not t.done()]


async def test_closing_at_once_leaves_no_session_behind(fake: FakeOpenCode) -> None:
    """Sessions still being created for the pool when the backend closes are deleted."""
    opencode = make_backend(fake.url, pool_size=3)
    await opencode.start()
    await opencode.aclose()
    assert len(fake.created()) == 3
    for sid in fake.created():
        assert fake.cleanup_of(sid) == [f"DELETE /session/{sid}"]
    assert _other_tasks() == []


async def test_closing_leaves_no_background_task_behind(fake: FakeOpenCode) -> None:
    opencode = make_backend(fake.url)
    await opencode.start()
    try:

        def events(sid: str) -> list[Event | str]:
            asked = ev("permission.asked", id="per_2", sessionID=sid, permission="bash")
            return [*opening(sid), asked, *closing(sid, "")]

        fake.prompts.append(Prompt(events=events))
        await collect(opencode)
    finally:
        await opencode.aclose()
    assert _other_tasks() == []


async def test_without_a_pool_the_session_is_created_on_the_request_path(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    await asyncio.sleep(0.05)
    assert fake.created() == []
    fake.prompts.append(Prompt(events=reply("made now")))
    assert text_of(await collect(backend)) == "made now"
    assert fake.created() == fake.prompted()
    await eventually(lambda: bool(backend.breakdowns) and backend.breakdowns[0].cleaned)
    breakdown = backend.breakdowns[0]
    assert not breakdown.pooled and breakdown.session is not None
    assert breakdown.cleanup is not None and breakdown.cleanup >= 0
    await asyncio.sleep(0.05)
    assert len(fake.created()) == 1  # nothing is created ahead


async def test_a_client_that_stops_reading_aborts_and_deletes_the_session(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=reply("one", " two", " three"), gap=0.05))
    stream = backend.chat(chat_request())
    assert isinstance(stream, AsyncGenerator)  # what the gateway closes when a client leaves
    async for item in stream:
        if isinstance(item, PartDelta):
            break
    await stream.aclose()
    (sid,) = fake.prompted()
    await eventually(deleted(fake, sid))
    assert fake.cleanup_of(sid) == [f"POST /session/{sid}/abort", f"DELETE /session/{sid}"]
    await eventually(lambda: bool(backend.breakdowns) and backend.breakdowns[0].cleaned)
    assert backend.breakdowns[0].outcome == "cancelled"


async def test_sessions_are_deleted_whatever_the_outcome(
    fake: FakeOpenCode, backend: OpenCodeBackend
) -> None:
    fake.prompts.append(Prompt(events=reply("ok")))
    await collect(backend)
    fake.prompts.append(
        Prompt(events=session_error({"name": "UnknownError", "data": {"message": "x"}}))
    )
    with pytest.raises(BackendError, match="UnknownError: x"):
        await collect(backend)
    ok, failed = fake.prompted()
    await eventually(deleted(fake, ok))
    await eventually(deleted(fake, failed))
    assert fake.cleanup_of(ok) == [f"DELETE /session/{ok}"]
    assert fake.cleanup_of(failed) == [f"POST /session/{failed}/abort", f"DELETE /session/{failed}"]


# -- discovery, health and models ---------------------------------------------------------


async def test_a_server_without_our_agent_gets_no_agent_in_prompts(fake: FakeOpenCode) -> None:
    fake.reset(agents=("build", "plan"))
    opencode = make_backend(fake.url)
    await opencode.start()
    try:
        fake.prompts.append(Prompt(events=reply("plain")))
        assert text_of(await collect(opencode)) == "plain"
        (body,) = fake.prompt_bodies()
        assert "agent" not in body
        assert body["tools"] == {"*": False}
    finally:
        await opencode.aclose()


async def test_the_servers_default_model_is_used_without_one_of_our_own(
    fake: FakeOpenCode,
) -> None:
    fake.reset(config_model="p/served")
    opencode = OpenCodeBackend("oc", url=fake.url, pool_size=0)
    await opencode.start()
    try:
        fake.prompts.append(Prompt(events=reply("x")))
        fake.prompts.append(Prompt(events=reply("y")))
        await collect(opencode, chat_request(model="homeassistant"))
        await collect(opencode, chat_request(model="p/m"))
        first, second = fake.prompt_bodies()
        assert first["model"] == {"providerID": "p", "modelID": "served"}
        assert second["model"] == {"providerID": "p", "modelID": "m"}
    finally:
        await opencode.aclose()


async def test_health_reports_the_version(fake: FakeOpenCode, backend: OpenCodeBackend) -> None:
    health = await backend.health()
    assert health.ok
    assert "OpenCode 1.18.33 (external, restarts: 0)" in health.detail
    assert health.latency_ms is not None and health.latency_ms >= 0


async def test_health_of_an_unreachable_server_says_so() -> None:
    sock = RunningServer.reserve()
    port = sock.getsockname()[1]
    sock.close()  # nothing listens there now
    opencode = make_backend(f"http://127.0.0.1:{port}", prompt=0.3)
    try:
        loop = asyncio.get_running_loop()
        started = loop.time()
        health = await opencode.health()
        assert loop.time() - started < 2
        assert not health.ok
        assert "event stream did not open within 0.3 s" in health.detail
        assert "unreachable" in health.detail
    finally:
        await opencode.aclose()


async def test_list_models_names_provider_models_with_their_limits(fake: FakeOpenCode) -> None:
    providers = [
        {
            "id": "gw",
            "models": {
                "thinker": {
                    "limit": {"context": 32768, "output": 4096},
                    "capabilities": {"reasoning": True, "input": {"image": True}},
                    "family": "qwen",
                },
                "plain": {"limit": {"context": 0}, "capabilities": {"reasoning": False}},
            },
        },
        {"id": "alpha", "models": {"a": {}}},
    ]
    fake.reset(providers=providers)
    opencode = make_backend(fake.url)
    await opencode.start()
    try:
        models = await opencode.list_models()
    finally:
        await opencode.aclose()
    by_name = {m.name: m for m in models}
    assert [m.name for m in models] == ["alpha/a", "gw/plain", "gw/thinker"]
    thinker = by_name["gw/thinker"]
    assert thinker.context_length == 32768 and thinker.backend == "oc"
    assert thinker.capabilities == {"completion", "tools", "thinking", "vision"}
    assert thinker.family == "qwen" and thinker.details == {"provider": "gw"}
    plain = by_name["gw/plain"]
    assert plain.context_length is None
    assert plain.capabilities == {"completion", "tools"}  # tools always: emulated
    assert by_name["alpha/a"].capabilities == {"completion", "tools"}
