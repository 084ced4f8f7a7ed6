"""The OpenCode ``SessionProvider`` (seed 004): OpenCode profiled as the agent it is.

One spawned ``opencode serve`` per (mode, model) group, reused across that group's
scenarios and iterations (startup takes seconds) and by the next group when its
process would be the same (``modes.server_key``: the model, the mode's environment,
the permission policy and the configuration; a mode's agent and instructions go
with each prompt); another ``init`` replaces it. Each server is isolated as the
gateway's backend isolates its own (backends/opencode/server.py: temporary
HOME/XDG, configuration in ``OPENCODE_CONFIG_CONTENT``, offline switches), and
more: a clean environment holding only PATH and the mode's variables. Here OpenCode
keeps its tools; what they may do is the configured permission policy, and
``external_directory`` is always denied, so a profiled agent works inside its own
directory.

That directory is the server's empty working directory, or, for a scenario with a
workspace, the iteration's workspace: OpenCode serves one instance per project
directory, chosen per request by the ``x-opencode-directory`` header (the JS SDK's
``directory`` option), so such a session gets its own transports and event stream
carrying that header (OpenCode's ``/event`` is per instance), and its instance is
disposed with the session.

Prompts go out with ``prompt_async`` after subscribing to the session's events
(backends/opencode/event_hub.py). Seed 004's terminal events end the turn (``TurnWatch``):
``session.status`` idle or ``session.idle`` (de-duplicated), ``session.error``
(recorded as the prompt's error, never as a timeout: an unknown agent, say, emits it
and no idle ever follows), and a ``step-finish`` part of this prompt's reply whose
reason ends OpenCode's loop. The turn's end is measured there; the provider then lets
the session go idle (briefly, bounded) before it reads the messages, so they are
final. Permission requests are answered by the policy, questions refused. At the
deadline the session is aborted and ``PromptTimeoutError`` raised with the metrics
so far. The server is health-checked before each session and restarted, once, if
it does not answer: under ``--concurrency N`` the check and the restart hold one
lock for the server, and health is checked again once it is held, so iterations that
find the same server dead share one restart (each restart would otherwise stop the
server the previous one had just started).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import os
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal
from urllib.parse import quote

from llmbridge.backends.http import HTTPSettings, HTTPTransport
from llmbridge.backends.opencode.event_hub import EventHub, id_time_ms
from llmbridge.backends.opencode.server import OpenCodeProvider as ModelProvider
from llmbridge.backends.opencode.server import OpenCodeServer, SpawnSettings
from llmbridge.core.errors import LLMBridgeError
from llmbridge.profiler.providers.provider import PromptTimeoutError, ProviderError
from llmbridge.profiler.records.metrics import Price, prompt_result
from llmbridge.profiler.records.modes import combine_instructions, server_key
from llmbridge.profiler.records.trace import build_trace, error_text
from llmbridge.profiler.records.types import (
    CostMetrics,
    PromptMetrics,
    PromptResult,
    ProviderConfig,
    SessionHandle,
    SessionTrace,
    TimingMetrics,
    TokenMetrics,
)

__all__ = ["OpenCodeSessionProvider", "TurnWatch"]

log = logging.getLogger("llmbridge.profiler")

_POLICIES: dict[str, Any] = {
    "allow": {"*": "allow", "external_directory": "deny"},
    "deny": {"*": "deny"},
    # Every request reaches the provider, which refuses it (exercises permission.asked).
    "ask-reject": {"*": "ask", "external_directory": "deny"},
}
_SETTLE_SECONDS = 5.0
"""After an abort or a terminal event other than idle, how long to wait for the
session to go idle before its messages are read anyway."""
_LOOP_CONTINUES = ("tool-calls", "unknown")
"""Step finish reasons after which OpenCode's prompt loop runs another step
(session/prompt.ts: it stops on a finish other than these)."""

Event = dict[str, Any]
Verdict = Literal["idle", "error", "step-finish"]


@dataclass
class TurnWatch:
    """One prompt's view of its session's events: which of them ends the turn.

    ``seen_users`` are the user messages of the session's earlier prompts (OpenCode
    re-sends them to add their summary); this prompt's is the first other one."""

    seen_users: set[str]
    user_id: str | None = None
    steps: set[str] = field(default_factory=set)
    """This prompt's assistant messages (LLM steps): ``parentID`` is its user message."""
    error: str | None = None
    """The first ``session.error``'s message."""

    def observe(self, event: Event) -> Verdict | None:
        """What ``event`` means for the turn: ``None`` while it goes on."""
        kind = event.get("type")
        props = event.get("properties") or {}
        if kind == "message.updated":
            info = props.get("info") or {}
            role, mid = info.get("role"), info.get("id")
            if role == "user" and self.user_id is None and mid not in self.seen_users:
                self.user_id = str(mid)
                self.seen_users.add(self.user_id)
            elif role == "assistant" and self.user_id and info.get("parentID") == self.user_id:
                self.steps.add(str(mid))
        elif kind == "message.part.updated":
            part = props.get("part") or {}
            if (
                part.get("type") == "step-finish"
                and part.get("messageID") in self.steps
                and part.get("reason") not in _LOOP_CONTINUES
            ):
                return "step-finish"
        elif kind == "session.idle" or (
            kind == "session.status" and (props.get("status") or {}).get("type") == "idle"
        ):
            return "idle"
        elif kind == "session.error":
            if self.error is None:
                self.error = error_text(props.get("error") or "session.error")
            return "error"
        return None


@dataclass
class _Channel:
    """How one OpenCode instance (project directory) is reached: calls and events."""

    http: HTTPTransport
    events_http: HTTPTransport
    hub: EventHub
    directory: Path | None = None
    """``None``: the server's own working directory."""

    async def aclose(self) -> None:
        await self.hub.aclose()
        await self.http.aclose()
        await self.events_http.aclose()


class OpenCodeSessionProvider:
    id = "opencode"

    def __init__(self, *, command: str = "opencode", prices: Mapping[str, Price] | None = None):
        self.command = command
        self.prices = dict(prices or {})
        self.server: OpenCodeServer | None = None
        self.config: ProviderConfig | None = None
        self.completion_lag_ms: list[float] = []
        """Per finished prompt: from OpenCode emitting the event that ended the turn
        (its id's timestamp) to this provider knowing (the benchmark reads it)."""
        self.terminal_events: list[tuple[str, float]] = []
        """Per finished prompt: that event's id and when the provider knew (Unix ms)."""
        self.spawns = 0
        """Servers started (a reused one is not counted again)."""
        self._group: str | None = None
        self._channel: _Channel | None = None
        self._channels: dict[str, _Channel] = {}
        """Per session in a workspace, its instance's channel."""
        self._system: dict[str, str | None] = {}
        self._users: dict[str, set[str]] = {}
        """Per session, the user messages of earlier prompts."""
        self._server_lock = asyncio.Lock()
        """Held to check the server's health and restart it: the provider holds one
        server at a time, so this is one lock per server."""
        self._restarts = 0
        """Restarts done (tried and ended, well or not): a caller that finds it moved
        after waiting for the lock waited through one."""
        self._restart_failure: str | None = None
        """Why the last restart failed; ``None`` after one that worked."""

    # -- lifecycle --------------------------------------------------------------------

    async def init(self, config: ProviderConfig) -> None:
        group = server_key(config)
        if self._group == group and self.server is not None and await self._healthy():
            self.config = config  # another mode on the same server: new agent/instructions
            return
        await self.shutdown()
        self.config, self._group = config, group
        await self._spawn(config)

    def _settings(self, config: ProviderConfig) -> SpawnSettings:
        options = config.options
        providers: dict[str, ModelProvider] = {}
        endpoint = options.get("endpoint")
        if isinstance(endpoint, Mapping):
            provider, _, model = config.model.partition("/")
            providers[provider] = ModelProvider(
                base_url=str(endpoint["url"]),
                api_key=endpoint.get("api_key"),
                models={model: dict(endpoint.get("limits") or {})},
            )
        environment = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), **config.environment}
        extra: dict[str, Any] = {"permission": _POLICIES[config.permission]}
        extra.update(options.get("opencode_config") or {})
        return SpawnSettings(
            command=str(options.get("command") or self.command),
            default_model=config.model,
            providers=providers,
            extra_config=extra,
            plain=False,
            environment=environment,
            startup_timeout=float(options.get("startup_timeout", 60)),
        )

    async def _spawn(self, config: ProviderConfig) -> None:
        self.server = OpenCodeServer(spawn=self._settings(config))
        self.spawns += 1
        try:
            await self.server.start()
        except LLMBridgeError as exc:
            raise ProviderError(f"OpenCode did not start: {exc.message}") from exc
        self._channel = await self._open_channel(None)

    async def _open_channel(self, directory: Path | None) -> _Channel:
        assert self.server is not None and self.server.url is not None
        headers = dict(self.server.headers)
        if directory is not None:
            # OpenCode decodes the header (it may hold any path character).
            headers["x-opencode-directory"] = quote(str(directory), safe="/")
        http = HTTPTransport("opencode", self.server.url, HTTPSettings(read=600), headers)
        events_http = HTTPTransport("opencode", self.server.url, HTTPSettings(read=30), headers)
        channel = _Channel(http, events_http, EventHub(lambda: events_http, "opencode"), directory)
        channel.hub.start()
        try:
            await channel.hub.wait_connected(30)
        except LLMBridgeError as exc:
            await channel.aclose()
            raise ProviderError(exc.message) from exc
        return channel

    async def shutdown(self) -> None:
        for channel in [*self._channels.values(), self._channel]:
            if channel is not None:
                await channel.aclose()
        self._channels.clear()
        if self.server is not None:
            await self.server.stop()
        self.server, self._channel, self._group = None, None, None

    def _channel_of(self, sid: str | None) -> _Channel:
        channel = self._channels.get(sid or "") or self._channel
        if channel is None:
            raise ProviderError("the provider is not initialised")
        return channel

    async def _call(self, method: str, path: str, body: Any = None, sid: str | None = None) -> Any:
        """A call to the instance session ``sid`` lives in (the server's own without)."""
        channel = self._channel_of(sid)
        try:
            return await channel.http.request_json(method, path, body)
        except LLMBridgeError as exc:
            raise ProviderError(f"OpenCode {method} /{path}: {exc.message}") from exc

    async def _healthy(self) -> bool:
        if self.server is None or self.server.exited or self._channel is None:
            return False
        verdict, body = await self._channel.http.probe("global/health")
        return verdict.ok and isinstance(body, dict) and body.get("healthy") is True

    # -- sessions -----------------------------------------------------------------------

    async def create_session(
        self,
        *,
        system_instructions: str | None,
        scenario_id: str,
        iteration: int,
        workspace: Path | None = None,
    ) -> SessionHandle:
        if self.config is None:
            raise ProviderError("init() first")
        await self._ensure_healthy()
        channel = await self._open_channel(workspace) if workspace is not None else None
        # A title: OpenCode then makes no title-generation LLM call to skew the metrics.
        title = f"{scenario_id or 'session'} #{iteration}"
        try:
            target = channel or self._channel_of(None)
            reply: Any = await target.http.request_json("POST", "session", {"title": title})
        except LLMBridgeError as exc:
            if channel is not None:
                await channel.aclose()
            raise ProviderError(f"OpenCode POST /session: {exc.message}") from exc
        sid = str(reply["id"])
        if channel is not None:
            self._channels[sid] = channel
        self._system[sid] = combine_instructions(
            self.config.system_instructions, system_instructions
        )
        return SessionHandle(sid, self.id, time.time(), scenario_id, iteration)

    async def _ensure_healthy(self) -> None:
        """Seed 004: if the server is unhealthy, restart it and retry once. Iterations
        that find it unhealthy together wait for one another at the lock; the first
        restarts it and the others, checking again, find it healthy. One that waited
        through a restart that failed gets that failure rather than trying another."""
        restarts = self._restarts
        if await self._healthy():
            return
        async with self._server_lock:
            if await self._healthy():
                return  # another iteration restarted it while this one waited
            if self._restarts != restarts and self._restart_failure is not None:
                raise ProviderError(self._restart_failure)
            log.warning("OpenCode is not healthy: restarting it once")
            self._restart_failure = None
            try:
                await self._restart()
            except ProviderError as exc:
                self._restart_failure = str(exc)
                raise
            finally:
                self._restarts += 1

    async def _restart(self) -> None:
        assert self.config is not None
        config = self.config
        await self.shutdown()
        self.config, self._group = config, server_key(config)
        await self._spawn(config)
        if not await self._healthy():
            raise ProviderError("OpenCode is still unhealthy after a restart")

    def _prompt_body(self, handle: SessionHandle, text: str) -> dict[str, Any]:
        assert self.config is not None
        provider, _, model = self.config.model.partition("/")
        body: dict[str, Any] = {
            "model": {"providerID": provider, "modelID": model},
            "parts": [{"type": "text", "text": text}],
        }
        if self.config.agent:
            body["agent"] = self.config.agent
        if system := self._system.get(handle.session_id):
            body["system"] = system
        return body

    async def prompt(
        self,
        handle: SessionHandle,
        text: str,
        timeout: float,  # noqa: ASYNC109 - the contract's own parameter (seed 004)
    ) -> PromptResult:
        sid = handle.session_id
        channel = self._channel_of(sid)
        started = time.perf_counter()
        watch = TurnWatch(self._users.setdefault(sid, set()))
        timed_out = False
        terminal: str | None = None
        measured_ms: float | None = None
        with channel.hub.subscribe(sid) as queue:
            await self._call(
                "POST", f"session/{sid}/prompt_async", self._prompt_body(handle, text), sid
            )
            verdict: Verdict | None = None
            try:
                async with asyncio.timeout(timeout):
                    verdict, terminal = await self._await_terminal(queue, sid, watch)
            except TimeoutError:
                timed_out = True
                await self._call("POST", f"session/{sid}/abort", {}, sid)
            measured_ms = (time.perf_counter() - started) * 1000
            detected_ms = time.time() * 1000
            if verdict != "idle":
                await self._settle(queue, sid, watch)
        emitted_ms = id_time_ms(terminal, detected_ms) if terminal else None
        if terminal is not None and emitted_ms is not None and not timed_out:
            self.completion_lag_ms.append(detected_ms - emitted_ms)
            self.terminal_events.append((terminal, detected_ms))
        messages = await self._call("GET", f"session/{sid}/message", None, sid)
        result = self._result(messages, sid, watch, measured_ms, timed_out)
        if timed_out:
            raise PromptTimeoutError(f"the prompt did not finish within {timeout:g} s", result)
        return result

    def _result(
        self,
        messages: list[dict[str, Any]],
        sid: str,
        watch: TurnWatch,
        measured_ms: float,
        timed_out: bool,
    ) -> PromptResult:
        if watch.user_id is None:  # no event named it: the last user message is ours
            users = [m for m in messages if m["info"]["role"] == "user"]
            if users and str(users[-1]["info"]["id"]) not in watch.seen_users:
                watch.user_id = str(users[-1]["info"]["id"])
                watch.seen_users.add(watch.user_id)
        if watch.user_id is None:
            if watch.error is None and not timed_out:
                raise ProviderError(f"session {sid} has no user message after the prompt")
            # OpenCode refused the prompt before storing it (an unknown agent, say).
            return PromptResult(
                text="",
                metrics=PromptMetrics(
                    TokenMetrics(), TimingMetrics(None, measured_ms), (), CostMetrics()
                ),
                completion_reason="timeout" if timed_out else "error",
                error=None if timed_out else watch.error,
            )
        price = self.prices.get(self.config.model) if self.config else None
        result = prompt_result(
            messages, watch.user_id, measured_ms=measured_ms, timed_out=timed_out, price=price
        )
        if watch.error is not None and not timed_out and result.completion_reason != "error":
            # session.error reported what the messages do not show (seed 004: an error).
            result = dataclasses.replace(result, completion_reason="error", error=watch.error)
        elif watch.error is not None and result.error is None and not timed_out:
            result = dataclasses.replace(result, error=watch.error)
        return result

    async def _await_terminal(
        self, queue: asyncio.Queue[Event | None], sid: str, watch: TurnWatch
    ) -> tuple[Verdict, str | None]:
        """Wait for the event that ends the turn: what it was, and its id."""
        while True:
            event = await queue.get()
            if event is None:
                raise ProviderError("OpenCode's event stream was lost mid-prompt")
            if verdict := watch.observe(event):
                return verdict, event.get("id")
            kind = event.get("type")
            props = event.get("properties") or {}
            if kind == "permission.asked":
                await self._answer_permission(str(props.get("id")), sid)
            elif kind == "question.asked":
                await self._call("POST", f"question/{props.get('id')}/reject", {}, sid)

    async def _settle(self, queue: asyncio.Queue[Event | None], sid: str, watch: TurnWatch) -> None:
        """Let the session go idle after a terminal event other than idle (or an
        abort), so its messages are final when read: at most ``_SETTLE_SECONDS``."""
        status = await self._call("GET", "session/status", None, sid)
        if isinstance(status, dict) and sid not in status:
            return  # idle already: OpenCode leaves idle sessions out of the map
        try:
            async with asyncio.timeout(_SETTLE_SECONDS):
                while (await self._await_terminal(queue, sid, watch))[0] != "idle":
                    pass
        except TimeoutError:
            log.warning("session %s did not go idle within %g s", sid, _SETTLE_SECONDS)
        except ProviderError as exc:
            log.warning("session %s: %s", sid, exc)

    async def _answer_permission(self, request_id: str, sid: str) -> None:
        assert self.config is not None
        reply = "once" if self.config.permission == "allow" else "reject"
        await self._call("POST", f"permission/{request_id}/reply", {"reply": reply}, sid)

    async def export_session(self, handle: SessionHandle) -> SessionTrace:
        sid = handle.session_id
        messages = await self._call("GET", f"session/{sid}/message", None, sid)
        return build_trace(sid, messages)

    async def destroy_session(self, handle: SessionHandle) -> None:
        """Delete the session. Seed 004 makes this a no-op, but OpenCode keeps every
        session in its database and the server is reused across iterations and
        groups, so they would pile up (docs/PROFILER.md)."""
        sid = handle.session_id
        self._system.pop(sid, None)
        self._users.pop(sid, None)
        try:
            await self._call("DELETE", f"session/{sid}", None, sid)
        finally:
            channel = self._channels.pop(sid, None)
            if channel is not None:
                await channel.hub.aclose()
                try:  # the workspace's instance: its watchers and processes end with it
                    await channel.http.request_json("POST", "instance/dispose", {})
                except LLMBridgeError as exc:
                    log.warning("could not dispose OpenCode's instance: %s", exc.message)
                await channel.aclose()
