"""What every route needs: the router, the metrics and the limits of one gateway."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from starlette.requests import Request

from llmbridge.backends.base import Backend
from llmbridge.gateway.auth import KeyChecker
from llmbridge.gateway.config import GatewayConfig
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.gateway.router import ModelRouter

__all__ = ["GatewayState", "state_of"]


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    backends: dict[str, Backend]
    router: ModelRouter
    keys: KeyChecker
    metrics: GatewayMetrics = field(default_factory=GatewayMetrics)
    started_at: float = field(default_factory=time.time)

    @property
    def max_body(self) -> int:
        return self.config.server.max_body_bytes


def state_of(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
