"""What the console's "Backends and routes" page shows, read from what the gateway
already knows: each backend's probe (gateway/health.py, the same cached probe as
``/health``), its circuit (serving/resilience.py), its requests in flight and recent
time to first token in the shared state (serving/deployments.py keeps them for the
backends of routes with several servers), the routes with their deployments and
strategy (serving/config.py), the workers (gateway/server/workers.py) and the shared state's
kind and whether it is degraded (state/failover.py).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from llmbridge.gateway.state import GatewayState
from llmbridge.serving.config import FallbackTarget
from llmbridge.serving.deployments import in_flight_key, latency_key

__all__ = ["BackendRow", "RouteRow", "Status", "gateway_status"]


@dataclass(frozen=True, slots=True)
class BackendRow:
    name: str
    kind: str
    ok: bool
    detail: str | None
    probe_ms: float | None
    """How long its health probe took."""
    circuit: str
    """``closed``, ``open`` or ``half_open``."""
    in_flight: int | None
    """Requests in flight, when the shared state counts them (a pooled deployment)."""
    ttft_ms: float | None
    """Recent time to first token (a ``latency`` route's deployment)."""


@dataclass(frozen=True, slots=True)
class RouteRow:
    name: str
    deployments: list[tuple[str, int]]
    """Each server's backend name and weight."""
    strategy: str | None
    """``None`` for a route with one server."""
    model: str | None
    aliases: list[str]
    fallbacks: list[str]
    affinity: bool


@dataclass(slots=True)
class Status:
    backends: list[BackendRow]
    routes: list[RouteRow]
    default_backend: str | None
    state_kind: str
    state_degraded: bool
    workers: list[dict[str, Any]] = field(default_factory=list)
    uptime_s: float = 0.0


async def gateway_status(state: GatewayState, now: float) -> Status:
    """Everything the page shows, probes run (or reused) concurrently."""
    models = state.models
    configured = models.backends
    names = list(configured)
    shared = models.state
    probes = asyncio.gather(*(state.health.probe(n, configured[n]) for n in names))
    counted = [n for n in names if n in models.router.counted]
    timed = [n for n in names if n in models.router.timed]
    results, in_flight, ttft = await asyncio.gather(
        probes,
        shared.in_flight([in_flight_key(n) for n in counted]),
        shared.latencies([latency_key(n) for n in timed]),
    )
    backends = []
    for name, result in zip(names, results, strict=True):
        seconds = ttft.get(latency_key(name))
        backends.append(
            BackendRow(
                name=name,
                kind=configured[name].kind,
                ok=result.ok,
                detail=result.detail,
                probe_ms=result.latency_ms,
                circuit=models.router.breakers[name].state,
                in_flight=in_flight.get(in_flight_key(name)) if name in counted else None,
                ttft_ms=None if seconds is None else seconds * 1000,
            )
        )
    routes = []
    for route in state.config.routes():
        deployments = [(d.name, d.weight) for d in route.deployments]
        routes.append(
            RouteRow(
                name=route.name,
                deployments=deployments,
                strategy=route.strategy if len(deployments) > 1 else None,
                model=route.model,
                aliases=list(route.aliases),
                fallbacks=[_target(f) for f in route.fallbacks],
                affinity=route.affinity,
            )
        )
    return Status(
        backends=backends,
        routes=routes,
        default_backend=state.config.resolved_default_backend(),
        state_kind=shared.kind,
        state_degraded=shared.degraded,
        workers=state.workers.statuses() if state.workers is not None else [],
        uptime_s=now - state.started_at,
    )


def _target(target: FallbackTarget) -> str:
    """A fallback as text: its backend, and the model it is asked for when renamed."""
    return f"{target.backend} ({target.model})" if target.model else target.backend
