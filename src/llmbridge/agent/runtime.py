"""The agent service wired as the gateway and the CLI run it.

``AgentRuntime.open(config.agent, models, database=...)`` builds the agent's repository
(``AgentStore``) on the product's ``Database`` it is handed (the gateway's one,
store/database.py), or on one of its own opened and migrated from the URL it is handed
instead (``llmbridge agent``: ``GatewayConfig.database_url()``), and builds the
service over the serving layer's ``Models`` (the gateway's own way to call a model:
models without native tools get them emulated, failures are retried and fall back), with
the document store, the domains ``agent.domains`` names (``agent.domains.registry``:
their context providers, and the subject check of the one that owns sessions' subjects),
the ``web_search`` tool when a Tavily key is configured, and the background summariser
(unless ``agent.summaries`` is off), which writes with ``agent.summary_model``, else
each session's own model, and the MCP gateway's tools when it is handed one
(``mcp``: agent/mcp_tools.py, offered to the personas whose ``mcp_tools`` name them).
Turns and summaries share one ``TurnGate`` keyed by backend,
so a summary never holds a reply back. ``aclose`` stops the summariser, and closes the
database only if it opened it.

The gateway opens one in its lifespan (``gateway/app.py``) and serves it under
``/agent/``; ``llmbridge agent`` (``cli/agent.py``) opens
one on the same database and talks to it directly.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from llmbridge.agent.config import AgentConfig
from llmbridge.agent.documents import DocumentStore
from llmbridge.agent.domains.domain import Domain
from llmbridge.agent.domains.registry import open_domains, subject_domain
from llmbridge.agent.mcp_tools import McpTools
from llmbridge.agent.memory import MemoryConfig, Summariser
from llmbridge.agent.service import AgentService
from llmbridge.agent.store import AgentStore
from llmbridge.agent.tools import ToolRegistry, web_search_tool
from llmbridge.agent.turns import TurnGate
from llmbridge.core.errors import InvalidRequestError, LLMBridgeError, NotFoundError
from llmbridge.serving.models import Models
from llmbridge.store.database import Database

__all__ = ["AgentRuntime", "default_tools"]

log = logging.getLogger("llmbridge.agent")

D = TypeVar("D", bound=Domain)


def default_tools(config: AgentConfig) -> ToolRegistry:
    """``web_search`` when asked for, or (unset) when a Tavily key is configured: a
    tool that can only fail would cost every turn a round."""
    wanted = config.web_search
    if wanted is None:
        wanted = bool(config.tavily_api_key)
    return ToolRegistry([web_search_tool(api_key=config.tavily_api_key)] if wanted else [])


@dataclass(slots=True)
class AgentRuntime:
    store: AgentStore
    service: AgentService
    documents: DocumentStore
    domains: tuple[Domain, ...]
    """The configured domains, in order (``agent.domains``)."""
    models: Models
    config: AgentConfig
    summariser: Summariser | None = None
    _default_model: str | None = None
    _model_lock: asyncio.Lock = field(default_factory=asyncio.Lock)

    @classmethod
    async def open(
        cls,
        config: AgentConfig,
        models: Models,
        *,
        tools: ToolRegistry | None = None,
        database: Database | str | Path,
        mcp: McpTools | None = None,
    ) -> AgentRuntime:
        """The service on ``database``, or on a database of its own opened on that URL
        (module docstring)."""
        if isinstance(database, Database):
            store = AgentStore(database)
        else:
            store = await AgentStore.open(database)
        documents = DocumentStore(store, max_bytes=config.max_document_bytes)
        turns = TurnGate(models.backend_name)
        summariser = None
        if config.summaries:
            summariser = Summariser(store, models.chat, config.summary_model, gate=turns)
        domains = open_domains(config.domains, store)
        subjects = subject_domain(domains)
        service = AgentService(
            store,
            models,
            tools=tools if tools is not None else default_tools(config),
            providers=[p for domain in domains for p in domain.context_providers()],
            subject_check=subjects.check_subject if subjects is not None else None,
            documents=documents,
            memory=MemoryConfig(budget=config.history_budget),
            summariser=summariser,
            turns=turns,
            mcp=mcp,
        )
        return cls(
            store=store,
            service=service,
            documents=documents,
            domains=domains,
            models=models,
            config=config,
            summariser=summariser,
            _default_model=config.model or models.router.default_model,
        )

    def domain(self, kind: type[D]) -> D:
        """The configured domain of type ``kind`` (its routes' way to its records);
        ``NotFoundError`` when it is off."""
        for domain in self.domains:
            if isinstance(domain, kind):
                return domain
        raise NotFoundError(f"no {kind.__name__}: agent.domains leaves it out")

    async def model_for(self, requested: str | None) -> str:
        """The model of a turn: the one requested, else ``agent.model``, else the
        default backend's (its configured or only model, else the first it lists)."""
        if requested:
            return requested
        if self._default_model is None:
            async with self._model_lock:
                if self._default_model is None:
                    self._default_model = await self._first_listed()
        if self._default_model is None:
            raise InvalidRequestError(
                "no model: name one in the request ('model') or set agent.model in the "
                "configuration",
                param="model",
            )
        return self._default_model

    async def _first_listed(self) -> str | None:
        router = self.models.router
        backend = router.default_backend
        if backend is None or router.restrict:
            return None
        try:
            listed = await backend.list_models()
        except LLMBridgeError as exc:
            log.warning("cannot list the models of backend %s: %s", backend.name, exc.message)
            return None
        return listed[0].name if listed else None

    async def aclose(self) -> None:
        if self.summariser is not None:
            await self.summariser.aclose()
        await self.store.close()
