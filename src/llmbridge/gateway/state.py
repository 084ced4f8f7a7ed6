"""What every route needs: the router, the metrics and the limits of one gateway."""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request

from llmbridge.backends.base import Backend
from llmbridge.core.limits import RequestLimits
from llmbridge.gateway.config import GatewayConfig
from llmbridge.gateway.health import HealthProbes
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.serving.router import ModelRouter
from llmbridge.web.auth import KeyChecker

if TYPE_CHECKING:  # the agent imports the gateway's pipeline, which imports this module
    from llmbridge.agent.runtime import AgentRuntime

__all__ = ["GatewayState", "state_of"]


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    backends: dict[str, Backend]
    router: ModelRouter
    keys: KeyChecker
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    started_at: float = field(default_factory=time.time)
    agent: AgentRuntime | None = None
    """The agent service, once the lifespan opened its database (``routes/agent.py``)."""
    agent_error: str | None = None
    """Why the agent service is not there (its database could not be opened)."""

    limits: RequestLimits = field(init=False)
    """What one request may hold (``server.max_body_bytes`` and ``server.limits``)."""
    health: HealthProbes = field(init=False)
    """The backends' probes for ``/health``, each reused for ``server.health_cache_s``."""

    def __post_init__(self) -> None:
        server = self.config.server
        self.limits = server.limits.request_limits(server.max_body_bytes)
        self.health = HealthProbes(server.health_cache_s)


def state_of(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
