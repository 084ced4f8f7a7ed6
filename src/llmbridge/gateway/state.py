"""What every route needs: the models (serving/models.py), the metrics and the limits
of one gateway."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from starlette.requests import Request

from llmbridge.accounts.ledger import UsageLedger
from llmbridge.accounts.prices import PriceTable
from llmbridge.accounts.service import Accounts
from llmbridge.core.request_limits import RequestLimits
from llmbridge.gateway.config import GatewayConfig
from llmbridge.gateway.health import HealthProbes
from llmbridge.gateway.metrics import GatewayMetrics
from llmbridge.gateway.server.workers import WorkerBoard
from llmbridge.gateway.stored_responses import ResponseStore
from llmbridge.serving.models import Models
from llmbridge.store.database import OpenOnce
from llmbridge.store.outages import OutageLog
from llmbridge.web.auth import KeyChecker

if TYPE_CHECKING:
    from llmbridge.gateway.telemetry import Tracing
    from llmbridge.mcp.endpoints import McpGateway

__all__ = ["GatewayState", "state_of"]


@dataclass(slots=True)
class GatewayState:
    config: GatewayConfig
    models: Models
    """Every configured model (``models.router`` resolves names, ``models.backends``)."""
    keys: KeyChecker
    metrics: GatewayMetrics
    started_at: float = field(default_factory=time.time)
    database: OpenOnce = field(init=False)
    """The product's database (keys, ledger, the agent's tables, stored responses): one
    ``Database``, opened and migrated once by the first part of the gateway that needs
    it, closed once at shutdown (store/database.py)."""
    accounts: Accounts = field(init=False)
    """Keys (static and in the database), the master key, per-key limits (create_app)."""
    ledger: UsageLedger | None = None
    """The usage ledger when accounting is on (``server.ledger``), opened in the lifespan."""
    responses: ResponseStore | None = None
    """The stored Responses (gateway/stored_responses.py), on ``database``, set in the
    lifespan when they are on (``stored_responses_on``: whether the agent serves or
    not) and the database opened."""
    responses_error: str | None = None
    """Why the stored Responses could not be opened (the kind of failure only)."""
    workers: WorkerBoard | None = None
    """This process's place among ``llmbridge serve --workers N`` (gateway/server/workers.py);
    ``None`` when it serves alone."""
    tracing: Tracing | None = None
    """This process's OpenTelemetry tracer when ``telemetry.otlp_endpoint`` is set
    (gateway/telemetry.py, opened in the lifespan); ``None``: tracing is off."""

    mcp: McpGateway | None = None
    """The MCP gateway (``/mcp``) when ``mcp.servers`` or ``mcp.allowed_urls`` names any
    (mcp/endpoints.py)."""

    limits: RequestLimits = field(init=False)
    """What one request may hold (``server.max_body_bytes`` and ``server.limits``)."""
    health: HealthProbes = field(init=False)
    """The backends' probes for ``/health``, each reused for ``server.health_cache_s``."""
    prices: PriceTable = field(init=False)
    """The configuration's ``prices:`` (accounts/prices.py)."""
    console_outage: OutageLog = field(
        default_factory=lambda: OutageLog(
            logging.getLogger("llmbridge.console"),
            "console",
            "its pages answer 503 'database unavailable' until it does",
        )
    )
    """The console's reads of the database, down or not: said once per outage."""

    def __post_init__(self) -> None:
        server = self.config.server
        self.limits = server.limits.request_limits(server.max_body_bytes)
        self.health = HealthProbes(server.health_cache_s)
        self.prices = PriceTable(self.config.prices)


def state_of(request: Request) -> GatewayState:
    state: GatewayState = request.app.state.gateway
    return state
