"""Public model name -> (backend, backend model name).

Resolution order: an exact route name or alias; then glob routes in file order;
then the default backend (with ``default_model``, or the requested name passed on);
with ``restrict_models`` an unmatched name is a ``ModelNotFoundError`` instead.
The router also holds what serving needs per backend beyond the name: its circuit
breaker, the retry policy and each route's fallbacks (serving/resilience.py). A
route with several servers (``backends:``) resolves to the first of them; its
``DeploymentPool`` (serving/deployments.py) orders them per request, in
``Models.open``.
"""

from __future__ import annotations

import asyncio
import fnmatch
import logging
import time
from dataclasses import dataclass, replace

from llmbridge.backends.base import Backend
from llmbridge.core.errors import LLMBridgeError, ModelNotFoundError
from llmbridge.core.frozen import faster_frozen_init
from llmbridge.core.model_info import ModelInfo
from llmbridge.serving.config import ModelRoute, ServingConfig
from llmbridge.serving.deployments import DeploymentPool
from llmbridge.serving.resilience import CircuitBreaker, RetryPolicy

__all__ = ["ModelRouter", "Resolved"]

log = logging.getLogger("llmbridge.router")

_GLOB_CHARS = frozenset("*?[")


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class Resolved:
    """Where a request for ``public_name`` goes."""

    public_name: str
    backend: Backend
    backend_model: str
    route: ModelRoute | None = None
    """The configured route that matched, if any (for its per-model settings)."""


class ModelRouter:
    INFO_TTL = 300.0
    """Seconds a backend's report about a model is reused."""

    def __init__(self, config: ServingConfig, backends: dict[str, Backend]) -> None:
        self.backends = backends
        self.restrict = config.restrict_models
        self._exact: dict[str, ModelRoute] = {}
        self._globs: list[ModelRoute] = []
        for route in config.routes():
            if _GLOB_CHARS & set(route.name):
                self._globs.append(route)
            else:
                self._exact.setdefault(route.name, route)
            for alias in route.aliases:
                self._exact.setdefault(alias, route)
        # Routes with several servers, by identity: a Resolved carries its route object.
        self._pools = {
            id(route): DeploymentPool(route)
            for route in (*self._exact.values(), *self._globs)
            if len(route.deployments) > 1
        }
        pooled = [d.name for pool in self._pools.values() for d in pool.deployments]
        self.counted = frozenset(pooled)
        """Backends whose requests in flight are counted in the shared state (those
        that serve a route with several servers, whichever route a request came by)."""
        self.timed = frozenset(
            d.name
            for pool in self._pools.values()
            if pool.route.strategy == "latency"
            for d in pool.deployments
        )
        """Backends whose time to first token is observed (``latency`` routes)."""
        resilience = config.resilience
        self.retry = RetryPolicy(
            resilience.retries, resilience.backoff_ms, resilience.max_retry_after_s
        )
        self.breakers = {
            name: CircuitBreaker(b, resilience.breaker_failures, resilience.breaker_reset_s)
            for name, b in backends.items()
        }
        self._default_fallbacks = config.default_fallbacks
        default_name = config.resolved_default_backend()
        self.default_backend = backends.get(default_name) if default_name else None
        self._info: dict[tuple[str, str], tuple[ModelInfo | None, float]] = {}
        self.default_model = config.default_model
        if self.default_backend is not None and self.default_model is None:
            # The embedded backend serves one model: every unmatched name maps onto it.
            public = getattr(self.default_backend, "public_name", None)
            if isinstance(public, str):
                self.default_model = public

    def resolve(self, name: str) -> Resolved:
        route = self._exact.get(name)
        if route is None:
            route = next((r for r in self._globs if fnmatch.fnmatchcase(name, r.name)), None)
        if route is not None:
            return Resolved(name, self.backends[route.backend], route.model or name, route)
        if self.default_backend is None or self.restrict:
            raise ModelNotFoundError(name)
        return Resolved(name, self.default_backend, self.default_model or name)

    def pool(self, resolved: Resolved) -> DeploymentPool | None:
        """The deployments of ``resolved``'s route, when it has several."""
        return self._pools.get(id(resolved.route)) if resolved.route is not None else None

    def deployment(self, resolved: Resolved, name: str) -> Resolved:
        """``resolved`` served by the configured backend ``name`` (one of its route's)."""
        backend = self.backends[name]
        return Resolved(resolved.public_name, backend, resolved.backend_model, resolved.route)

    def fallbacks(self, resolved: Resolved) -> list[Resolved]:
        """Where ``resolved`` falls back to, in order (serving/resilience.py)."""
        targets = resolved.route.fallbacks if resolved.route else self._default_fallbacks
        name = resolved.public_name
        return [Resolved(name, self.backends[t.backend], t.model or name) for t in targets]

    async def list_models(self) -> list[ModelInfo]:
        """Every model served: explicit routes first, then the default backend's own list.

        A backend that cannot be listed right now is skipped (and logged) rather than
        failing the whole listing.
        """
        listed: dict[str, list[ModelInfo]] = {}

        async def fetch(name: str, backend: Backend) -> None:
            try:
                listed[name] = await backend.list_models()
            except LLMBridgeError as exc:
                log.warning("cannot list models of backend %s: %s", name, exc.message)
                listed[name] = []

        await asyncio.gather(*(fetch(n, b) for n, b in self.backends.items()))
        out: dict[str, ModelInfo] = {}
        for route_name, route in self._exact.items():
            backend_model = route.model or route_name
            found = next(
                (m for m in listed.get(route.backend, []) if m.backend_model == backend_model),
                None,
            )
            base = found or ModelInfo(name=route_name, backend=route.backend)
            out[route_name] = replace(
                base, name=route_name, backend=route.backend, backend_model=backend_model
            )
        if self.default_backend is not None:
            for info in listed.get(self.default_backend.name, []):
                out.setdefault(info.name, info)
        return list(out.values())

    async def model_info(self, resolved: Resolved) -> ModelInfo | None:
        """What the backend reports about the resolved model (capabilities, context),
        cached for ``INFO_TTL`` seconds; ``None`` when the backend cannot say."""
        key = (resolved.backend.name, resolved.backend_model)
        cached = self._info.get(key)
        now = time.monotonic()
        if cached is not None and now - cached[1] < self.INFO_TTL:
            return cached[0]
        try:
            info: ModelInfo | None = await resolved.backend.show_model(resolved.backend_model)
        except LLMBridgeError as exc:
            log.info("no model info for %s from %s: %s", key[1], key[0], exc.message)
            info = None
        self._info[key] = (info, now)
        return info

    def forget(self, backend: str, backend_model: str) -> None:
        """Drop what ``model_info`` keeps of a model that changed on its backend (it
        was pulled, created, copied over or deleted there)."""
        self._info.pop((backend, backend_model), None)

    async def show(self, name: str) -> ModelInfo:
        resolved = self.resolve(name)
        info = await resolved.backend.show_model(resolved.backend_model)
        return replace(info, name=name, backend=resolved.backend.name)
