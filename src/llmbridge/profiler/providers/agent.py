"""The agent-service ``SessionProvider``: the same scenarios, run on ``llmbridge.agent``.

The agent service runs in process, over its own store (a temporary SQLite file
unless the scenarios file names a database) and the serving layer's ``Models``
(``serving.models.open_models``, the gateway's own way to call a model): by
default the zero-configuration gateway (the embedded model), or, with
``gateway_url``, a running llmbridge reached as an OpenAI-compatible backend.
Every session uses the scenarios file's persona, and its mode's instructions before
the scenario's (a mode's environment and OpenCode agent do not apply in process).

The trace is recorded live from ``run_agent_stream``'s events, with this process's
clock: a ``turn_boundary`` when a prompt starts and when the model answers after a
tool round, ``tool_call`` / ``tool_result`` (or ``error``) per tool, one
``text_output`` per round's text. The agent reports a prompt's token usage as a
whole, so it sits on the prompt's first turn boundary.
"""

from __future__ import annotations

import asyncio
import tempfile
import time
import uuid
from collections.abc import Mapping
from contextlib import aclosing
from pathlib import Path
from typing import Any

from llmbridge.core.errors import LLMBridgeError
from llmbridge.profiler.providers.provider import PromptTimeoutError, ProviderError
from llmbridge.profiler.records.metrics import Price, cost_of
from llmbridge.profiler.records.modes import combine_instructions
from llmbridge.profiler.records.trace_builder import TraceBuilder, now_ms
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptMetrics,
    PromptResult,
    ProviderConfig,
    SessionHandle,
    SessionTrace,
    TimingMetrics,
    TokenMetrics,
    ToolCallRecord,
    TraceEvent,
)
from llmbridge.serving.models import Models

__all__ = ["AgentSessionProvider"]


def _text(builder: TraceBuilder, text: str) -> None:
    """A piece of the answer: merged into the step's text so far (stamped when it
    began, with no duration of its own)."""
    last = builder.events[-1]
    if last.type == "text_output" and last.turn == builder.turn:
        builder.events[-1] = TraceEvent(
            "text_output", last.turn, last.timestamp_ms, text=(last.text or "") + text
        )
    else:
        builder.events.append(TraceEvent("text_output", builder.turn, now_ms(), text=text))


class AgentSessionProvider:
    id = "agent"

    def __init__(
        self,
        settings: Any,
        *,
        gateway_url: str | None = None,
        prices: Mapping[str, Price] | None = None,
    ) -> None:
        self.settings = settings
        self.gateway_url = gateway_url
        self.prices = dict(prices or {})
        self.config: ProviderConfig | None = None
        self._service: Any = None
        self._models: Models | None = None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._persona_id: str | None = None
        self._recorders: dict[str, TraceBuilder] = {}
        self._system: dict[str, str | None] = {}

    async def init(self, config: ProviderConfig) -> None:
        self.config = config
        if self._service is not None:
            return
        from llmbridge.agent.service import AgentService
        from llmbridge.agent.store.repository import AgentStore
        from llmbridge.serving.config import ServingConfig
        from llmbridge.serving.models import open_models

        raw: dict[str, Any] = {}
        if self.gateway_url:
            url = self.gateway_url.rstrip("/") + "/v1"
            raw = {"backends": {"gateway": {"type": "openai", "url": url}}}
        models = self._models = open_models(ServingConfig.model_validate(raw))
        await models.start()
        for name, exc in models.failed_to_start.items():
            raise ProviderError(f"backend {name} did not start: {exc.message}") from exc
        database = self.settings.database
        if database is None:
            self._tmp = tempfile.TemporaryDirectory(prefix="llmbridge-profile-agent-")
            database = str(Path(self._tmp.name) / "agent.db")
        store = await AgentStore.open(database)
        persona = dict(self.settings.persona or {})
        self._persona_id = "profiler"
        await store.put_persona(
            self._persona_id,
            name=str(persona.get("name", "profiler")),
            prompt=str(persona.get("prompt", "")),
            settings=dict(persona.get("settings") or {}),
        )
        self._service = AgentService(store, models)

    async def shutdown(self) -> None:
        if self._service is not None:
            await self._service.store.close()
            self._service = None
        if self._models is not None:
            await self._models.aclose()
            self._models = None
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    async def create_session(
        self,
        *,
        system_instructions: str | None,
        scenario_id: str,
        iteration: int,
        workspace: Path | None = None,
    ) -> SessionHandle:
        # ``workspace`` is not used: the agent service's only built-in tool is
        # web_search, it has no filesystem tools, so a scenario's workspace checks see
        # the workspace as its setup left it (docs/PROFILER.md, "Workspaces").
        if self._service is None or self.config is None:
            raise ProviderError("init() first")
        record = await self._service.store.create_session(
            f"profile-{uuid.uuid4().hex[:12]}",
            name=f"{scenario_id} #{iteration}",
            persona_id=self._persona_id,
        )
        self._recorders[record.id] = TraceBuilder()
        self._system[record.id] = combine_instructions(
            self.config.system_instructions, system_instructions
        )
        return SessionHandle(record.id, self.id, time.time(), scenario_id, iteration)

    async def prompt(
        self,
        handle: SessionHandle,
        text: str,
        timeout: float,  # noqa: ASYNC109 - seed 004's signature
    ) -> PromptResult:
        from llmbridge.agent.service import (
            AgentDelta,
            AgentDone,
            AgentRequest,
            AgentToolCall,
            AgentToolResult,
        )

        if self._service is None or self.config is None:
            raise ProviderError("init() first")
        recorder = self._recorders[handle.session_id]
        request = AgentRequest(
            input=text,
            model=self.config.model,
            session_id=handle.session_id,
            system_prompt=self._system.get(handle.session_id) or "",
        )
        started = time.perf_counter()
        first: float | None = None
        pieces: list[str] = []
        records: list[ToolCallRecord] = []
        tokens = TokenMetrics()
        timed_out, error = False, None
        first_boundary = len(recorder.events)
        recorder.open_step(now_ms())
        after_tools = False
        try:
            async with asyncio.timeout(timeout):
                stream = self._service.run_agent_stream(request)
                async with aclosing(stream) as events:
                    async for event in events:
                        if isinstance(event, AgentDelta | AgentToolCall) and after_tools:
                            recorder.close_step(now_ms())
                            recorder.open_step(now_ms())
                            after_tools = False
                        if isinstance(event, AgentDelta):
                            first = first if first is not None else time.perf_counter()
                            pieces.append(event.text)
                            _text(recorder, event.text)
                        elif isinstance(event, AgentToolCall):
                            recorder.tool_call(now_ms(), event.name, event.id, event.arguments)
                        elif isinstance(event, AgentToolResult):
                            failed = event.content if event.is_error else None
                            output = None if event.is_error else event.content
                            records.append(recorder.tool_result(now_ms(), event.id, output, failed))
                            after_tools = True
                        elif isinstance(event, AgentDone):
                            usage = event.usage
                            tokens = TokenMetrics(
                                input=usage.input_tokens or 0,
                                output=usage.output_tokens or 0,
                                cache_read=usage.cache_read_input_tokens or 0,
                                cache_write=usage.cache_creation_input_tokens or 0,
                            )
        except TimeoutError:
            timed_out = True
        except LLMBridgeError as exc:
            error = exc.message
        total = (time.perf_counter() - started) * 1000
        recorder.close_step(now_ms())
        price = self.prices.get(self.config.model)
        cost = cost_of(tokens, price) if price is not None else CostMetrics()
        # The agent reports the prompt's usage whole: it (and its cost, when priced) goes on
        # the first boundary.
        cost_usd = cost.total_usd if cost.source != "none" else None
        recorder.set_step_usage(first_boundary, tokens, cost_usd)
        if timed_out:
            recorder.error(now_ms(), f"timeout after {timeout:g} s")
        elif error:
            recorder.error(now_ms(), error)
        reason: CompletionReason = "timeout" if timed_out else "error" if error else "stop"
        result = PromptResult(
            text="".join(pieces),
            metrics=PromptMetrics(
                tokens=tokens,
                timing=TimingMetrics(
                    ttft_ms=None if first is None else (first - started) * 1000,
                    total_ms=total,
                    tools_ms=_tool_times(records),
                ),
                tool_calls=tuple(records),
                cost=cost,
            ),
            completion_reason=reason,
            error=error,
        )
        if timed_out:
            raise PromptTimeoutError(f"the prompt did not finish within {timeout:g} s", result)
        return result

    async def export_session(self, handle: SessionHandle) -> SessionTrace:
        recorder = self._recorders.get(handle.session_id)
        if recorder is None:
            raise ProviderError(f"unknown session {handle.session_id}")
        return recorder.session_trace(handle.session_id)

    async def destroy_session(self, handle: SessionHandle) -> None:
        self._recorders.pop(handle.session_id, None)
        self._system.pop(handle.session_id, None)
        if self._service is not None:
            await self._service.store.delete_session(handle.session_id)


def _tool_times(records: list[ToolCallRecord]) -> dict[str, float]:
    out: dict[str, float] = {}
    for record in records:
        out[record.name] = out.get(record.name, 0.0) + (record.duration_ms or 0.0)
    return out
