"""The serving layer on its own (serving/models.py): one ``chat`` for every caller,
with request preparation, retries, fallbacks and the circuit breaker, and the
agent's turns served through it (a dead primary with a configured fallback
used to fail an agent turn with 503 while the same gateway request was served)."""

from __future__ import annotations

from contextlib import aclosing
from pathlib import Path
from typing import Any

import pytest

from llmbridge.agent.service import AgentRequest, AgentService
from llmbridge.agent.store import AgentStore
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import (
    BackendHTTPError,
    BackendUnavailableError,
    ModelNotFoundError,
)
from llmbridge.core.events import StreamEvent
from llmbridge.core.messages import Message, TextPart, ToolDefinition
from llmbridge.core.request import ChatRequest, GenerationParams
from llmbridge.serving.config import ServingConfig
from llmbridge.serving.models import Models, open_models
from tests.serving.tally import Tally


def _models(primary: ScriptedBackend, spare: ScriptedBackend, **extra: Any) -> Models:
    config = ServingConfig.model_validate(
        {
            "backends": {primary.name: {"type": "scripted"}, spare.name: {"type": "scripted"}},
            "models": [
                {
                    "name": "main",
                    "backend": primary.name,
                    "model": "big",
                    "fallbacks": [{"backend": spare.name, "model": "small"}],
                }
            ],
            "default_backend": primary.name,
            "resilience": {"backoff_ms": 0},
            **extra,
        }
    )
    return Models(config, {primary.name: primary, spare.name: spare}, observer=Tally())


def _request(model: str = "main", **fields: Any) -> ChatRequest:
    return ChatRequest(model=model, messages=(Message("user", (TextPart("hi"),)),), **fields)


def _down() -> Script:
    return Script(fail_before=BackendUnavailableError("connection refused"))


async def _collect(models: Models, request: ChatRequest) -> list[StreamEvent]:
    async with aclosing(models.chat(request)) as events:
        return [event async for event in events]


async def test_a_transient_failure_is_retried_once_on_the_same_backend() -> None:
    primary, spare = ScriptedBackend("primary"), ScriptedBackend("spare")
    primary.enqueue(_down())
    models = _models(primary, spare)
    reply = await models.open(_request())
    async with aclosing(reply.rest):
        pass
    assert len(primary.requests) == 2 and not spare.requests
    assert reply.prepared.changes.fallback is None
    assert isinstance(models.observer, Tally) and models.observer.retries == ["primary"]


async def test_a_dead_primary_falls_back_and_says_so() -> None:
    primary, spare = ScriptedBackend("primary"), ScriptedBackend("spare")
    primary.enqueue(_down(), _down())  # the try and its retry
    models = _models(primary, spare)
    reply = await models.open(_request())
    async with aclosing(reply.rest):
        pass
    assert [r.model for r in spare.requests] == ["small"]
    assert reply.prepared.changes.fallback == "spare/small"
    assert reply.prepared.target.backend is spare
    assert isinstance(models.observer, Tally) and models.observer.fallbacks == ["spare"]


async def test_a_non_transient_failure_is_neither_retried_nor_fallen_back() -> None:
    primary, spare = ScriptedBackend("primary"), ScriptedBackend("spare")
    primary.enqueue(Script(fail_before=BackendHTTPError("bad", backend_status=400)))
    models = _models(primary, spare)
    with pytest.raises(BackendHTTPError):
        await _collect(models, _request())
    assert len(primary.requests) == 1 and not spare.requests


async def test_every_target_down_raises_the_last_targets_failure() -> None:
    primary, spare = ScriptedBackend("primary"), ScriptedBackend("spare")
    primary.enqueue(_down(), _down())
    spare.enqueue(Script(fail_before=BackendUnavailableError("spare is down too")), _down())
    with pytest.raises(BackendUnavailableError, match="spare is down too"):
        await _collect(_models(primary, spare), _request())
    assert len(primary.requests) == len(spare.requests) == 2


async def test_chat_streams_the_whole_reply_and_raises_before_the_first_event() -> None:
    primary, spare = ScriptedBackend("primary"), ScriptedBackend("spare")
    models = _models(primary, spare, restrict_models=True)
    response = await accumulate(models.chat(_request()))
    assert response.message.text == "Hello from llmbridge."
    with pytest.raises(ModelNotFoundError):
        await _collect(models, _request("nothing-by-this-name"))


async def test_preparation_is_reported_as_data() -> None:
    primary, spare = ScriptedBackend("primary"), ScriptedBackend("spare")
    models = _models(primary, spare)
    tool = ToolDefinition("get_time", "The time", {"type": "object", "properties": {}})
    # The scripted backend reports its models' capabilities; "tools" is among them.
    prepared = await models.prepare(_request(tools=(tool,)))
    assert prepared.request.model == "big" and not prepared.changes.tools_emulated
    # A backend without repeat_penalty gets the converted frequency_penalty.
    fitted = await models.prepare(
        _request(params=GenerationParams(repeat_penalty=1.1)),
        models.resolve("main"),
    )
    assert fitted.request.params.repeat_penalty == 1.1  # scripted takes it natively
    assert fitted.changes.params == ()


async def test_an_agent_turn_is_served_by_the_fallback(tmp_path: Path) -> None:
    """The defect this guards: the agent used to call the router's backend directly, so
    a dead primary failed the turn although a fallback was configured."""
    primary = ScriptedBackend("primary", default=_down())
    spare = ScriptedBackend("spare", default=Script(text=["from ", "the spare"]))
    models = _models(primary, spare)
    store = await AgentStore.open(str(tmp_path / "agent.db"))
    try:
        service = AgentService(store, models)
        reply = await service.run_agent(AgentRequest("hello", model="main"))
        assert reply.text == "from the spare"
        assert [r.model for r in spare.requests] == ["small"]
    finally:
        await store.close()


async def test_open_models_starts_and_closes_the_backends() -> None:
    class Watched(ScriptedBackend):
        started = closed = 0

        async def start(self) -> None:
            Watched.started += 1

        async def aclose(self) -> None:
            Watched.closed += 1

    config = ServingConfig.model_validate({"backends": {"w": {"type": "scripted"}}})
    async with open_models(config, backends={"w": Watched("w")}) as models:
        assert Watched.started == 1 and Watched.closed == 0
        assert models.backend_name("anything") == "w"
    assert Watched.closed == 1


async def test_a_backend_that_fails_to_start_is_reported_not_fatal() -> None:
    class Broken(ScriptedBackend):
        async def start(self) -> None:
            raise BackendUnavailableError("no such server")

    config = ServingConfig.model_validate(
        {
            "backends": {"b": {"type": "scripted"}, "ok": {"type": "scripted"}},
            "default_backend": "ok",
        }
    )
    async with open_models(config, backends={"b": Broken("b"), "ok": ScriptedBackend("ok")}) as m:
        assert list(m.failed_to_start) == ["b"]
        assert (await accumulate(m.chat(_request("x")))).message.text


def test_a_self_provider_needs_a_served_address() -> None:
    from llmbridge.serving.build import build_backend
    from llmbridge.serving.config import OpenCodeBackendConfig

    config = OpenCodeBackendConfig.model_validate(
        {"type": "opencode", "providers": {"gw": {"url": "self"}}}
    )
    with pytest.raises(ValueError, match="nothing serves HTTP"):
        build_backend("oc", config)
