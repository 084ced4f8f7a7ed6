"""The OpenCode ``SessionProvider`` (seed 004): OpenCode profiled as the agent it is.

One spawned ``opencode serve`` per (mode, model) group, reused across that group's
scenarios and iterations (startup takes seconds); a new ``init`` for another group
replaces it. Each server is isolated as the gateway's backend isolates its own
(backends/opencode/server.py: temporary HOME/XDG, configuration in
``OPENCODE_CONFIG_CONTENT``, offline switches), and more: a clean environment holding
only PATH and the mode's variables. Here OpenCode keeps its tools; what they may do is
the configured permission policy, and ``external_directory`` is always denied, so a
profiled agent works inside its own temporary directory.

Prompts go out with ``prompt_async`` after subscribing to the session's events
(backends/opencode/events.py); the turn ends on ``session.status`` idle or
``session.idle``, de-duplicated, and ``session.error`` is recorded. Permission
requests are answered by the policy, questions refused. At the deadline the session
is aborted and ``PromptTimeoutError`` raised with the metrics so far. The server is
health-checked before each session and restarted, once, if it does not answer.
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
from collections.abc import Mapping
from typing import Any

from llmbridge.backends.http import HTTPSettings, HTTPTransport
from llmbridge.backends.opencode.events import EventHub, id_time_ms
from llmbridge.backends.opencode.server import OpenCodeProvider as ModelProvider
from llmbridge.backends.opencode.server import OpenCodeServer, SpawnSettings
from llmbridge.core.errors import LLMBridgeError
from llmbridge.profiler.metrics import Price, prompt_result
from llmbridge.profiler.provider import PromptTimeoutError, ProviderError
from llmbridge.profiler.trace import build_trace
from llmbridge.profiler.types import (
    PromptResult,
    ProviderConfig,
    SessionHandle,
    SessionTrace,
)

__all__ = ["OpenCodeSessionProvider"]

log = logging.getLogger("llmbridge.profiler")

_POLICIES: dict[str, Any] = {
    "allow": {"*": "allow", "external_directory": "deny"},
    "deny": {"*": "deny"},
    # Every request reaches the provider, which refuses it (exercises permission.asked).
    "ask-reject": {"*": "ask", "external_directory": "deny"},
}
_SETTLE_SECONDS = 5.0
"""After an abort, how long to wait for OpenCode to close the turn (idle)."""


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
        self._group: tuple[str, str, str] | None = None
        self._http: HTTPTransport | None = None
        self._events_http: HTTPTransport | None = None
        self._hub: EventHub | None = None
        self._system: dict[str, str | None] = {}
        self._users: dict[str, set[str]] = {}
        """Per session, the user messages of earlier prompts."""

    # -- lifecycle --------------------------------------------------------------------

    async def init(self, config: ProviderConfig) -> None:
        group = (config.mode, config.model, config.permission)
        if self._group == group and self.server is not None and await self._healthy():
            self.config = config
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
        try:
            await self.server.start()
        except LLMBridgeError as exc:
            raise ProviderError(f"OpenCode did not start: {exc.message}") from exc
        assert self.server.url is not None
        headers = self.server.headers
        self._http = HTTPTransport("opencode", self.server.url, HTTPSettings(read=600), headers)
        self._events_http = HTTPTransport(
            "opencode", self.server.url, HTTPSettings(read=30), headers
        )
        self._hub = EventHub(self._event_transport, "opencode")
        self._hub.start()
        try:
            await self._hub.wait_connected(30)
        except LLMBridgeError as exc:
            raise ProviderError(exc.message) from exc

    def _event_transport(self) -> HTTPTransport:
        assert self._events_http is not None
        return self._events_http

    async def shutdown(self) -> None:
        if self._hub is not None:
            await self._hub.aclose()
        for transport in (self._http, self._events_http):
            if transport is not None:
                await transport.aclose()
        if self.server is not None:
            await self.server.stop()
        self.server, self._hub, self._http, self._events_http = None, None, None, None
        self._group = None

    async def _call(self, method: str, path: str, body: Any = None) -> Any:
        if self._http is None:
            raise ProviderError("the provider is not initialised")
        try:
            return await self._http.request_json(method, path, body)
        except LLMBridgeError as exc:
            raise ProviderError(f"OpenCode {method} /{path}: {exc.message}") from exc

    async def _healthy(self) -> bool:
        if self.server is None or self.server.exited or self._http is None:
            return False
        verdict, body = await self._http.probe("global/health")
        return verdict.ok and isinstance(body, dict) and body.get("healthy") is True

    # -- sessions -----------------------------------------------------------------------

    async def create_session(
        self, *, system_instructions: str | None, scenario_id: str, iteration: int
    ) -> SessionHandle:
        if self.config is None:
            raise ProviderError("init() first")
        if not await self._healthy():
            log.warning("OpenCode is not healthy: restarting it once")
            await self._restart()
        # A title: OpenCode then makes no title-generation LLM call to skew the metrics.
        title = f"{scenario_id or 'session'} #{iteration}"
        reply = await self._call("POST", "session", {"title": title})
        sid = str(reply["id"])
        self._system[sid] = system_instructions or self.config.system_instructions
        return SessionHandle(sid, self.id, time.time(), scenario_id, iteration)

    async def _restart(self) -> None:
        assert self.config is not None
        config = self.config
        await self.shutdown()
        self.config, self._group = config, (config.mode, config.model, config.permission)
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
        if self.config.mode != "default":
            body["agent"] = self.config.mode
        if system := self._system.get(handle.session_id):
            body["system"] = system
        return body

    async def prompt(
        self,
        handle: SessionHandle,
        text: str,
        timeout: float,  # noqa: ASYNC109 - the contract's own parameter (seed 004)
    ) -> PromptResult:
        if self._hub is None:
            raise ProviderError("init() first")
        sid = handle.session_id
        started = time.perf_counter()
        user_id: str | None = None
        timed_out = False
        with self._hub.subscribe(sid) as queue:
            await self._call("POST", f"session/{sid}/prompt_async", self._prompt_body(handle, text))
            terminal: str | None = None
            try:
                async with asyncio.timeout(timeout):
                    user_id, terminal = await self._await_idle(queue, sid, user_id)
            except TimeoutError:
                timed_out = True
                await self._call("POST", f"session/{sid}/abort", {})
                try:
                    async with asyncio.timeout(_SETTLE_SECONDS):
                        user_id, terminal = await self._await_idle(queue, sid, user_id)
                except TimeoutError:
                    log.warning("session %s did not settle after the abort", sid)
        detected_ms = time.time() * 1000
        emitted_ms = id_time_ms(terminal, detected_ms) if terminal else None
        if terminal is not None and emitted_ms is not None and not timed_out:
            self.completion_lag_ms.append(detected_ms - emitted_ms)
            self.terminal_events.append((terminal, detected_ms))
        measured_ms = (time.perf_counter() - started) * 1000
        messages = await self._call("GET", f"session/{sid}/message")
        if user_id is None:  # no event named it: the last user message is ours
            users = [m for m in messages if m["info"]["role"] == "user"]
            if not users:
                raise ProviderError(f"session {sid} has no user message after the prompt")
            user_id = str(users[-1]["info"]["id"])
            self._users.setdefault(sid, set()).add(user_id)
        price = self.prices.get(self.config.model) if self.config else None
        result = prompt_result(
            messages, user_id, measured_ms=measured_ms, timed_out=timed_out, price=price
        )
        if timed_out:
            raise PromptTimeoutError(f"the prompt did not finish within {timeout:g} s", result)
        return result

    async def _await_idle(
        self, queue: asyncio.Queue[dict[str, Any] | None], sid: str, user_id: str | None
    ) -> tuple[str | None, str | None]:
        """Wait for the end of the turn: this prompt's user message id (once seen) and
        the id of the event that ended the turn."""
        while True:
            event = await queue.get()
            if event is None:
                raise ProviderError("OpenCode's event stream was lost mid-prompt")
            kind = event.get("type")
            props = event.get("properties") or {}
            if kind == "message.updated":
                info = props.get("info") or {}
                # OpenCode also re-sends earlier user messages (to add their summary):
                # this prompt's is the first one not seen before.
                seen = self._users.setdefault(sid, set())
                if info.get("role") == "user" and user_id is None and info.get("id") not in seen:
                    user_id = str(info.get("id"))
                    seen.add(user_id)
            elif kind == "session.idle" or (
                kind == "session.status" and (props.get("status") or {}).get("type") == "idle"
            ):
                return user_id, event.get("id")
            elif kind == "session.error":
                log.info("session %s reported an error: %s", sid, props.get("error"))
            elif kind == "permission.asked":
                await self._answer_permission(str(props.get("id")))
            elif kind == "question.asked":
                await self._call("POST", f"question/{props.get('id')}/reject", {})

    async def _answer_permission(self, request_id: str) -> None:
        assert self.config is not None
        reply = "once" if self.config.permission == "allow" else "reject"
        await self._call("POST", f"permission/{request_id}/reply", {"reply": reply})

    async def export_session(self, handle: SessionHandle) -> SessionTrace:
        messages = await self._call("GET", f"session/{handle.session_id}/message")
        return build_trace(handle.session_id, messages)

    async def destroy_session(self, handle: SessionHandle) -> None:
        self._system.pop(handle.session_id, None)
        self._users.pop(handle.session_id, None)
        await self._call("DELETE", f"session/{handle.session_id}")
