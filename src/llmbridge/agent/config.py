"""The agent service's part of the configuration file (the ``agent:`` section).

``gateway.config.GatewayConfig`` holds it as ``agent``; ``gateway.config.load_config``
fills in what comes from the environment (the default database file, the Tavily key).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from llmbridge.serving.config import Strict

__all__ = ["AgentConfig", "DomainName"]

DomainName = Literal["eldercare"]
"""The domains the agent knows (``agent.domains.registry.DOMAINS``, by the same names)."""


class AgentConfig(Strict):
    """The agent service (docs/AGENT.md): its database and defaults for its turns."""

    enabled: bool = True
    """Serve ``/agent/...`` (the database is opened when the gateway starts)."""
    database: str | None = None
    """A SQLite path or ``postgresql://`` URL (``--db`` / ``LLMBRIDGE_DB`` set it);
    ``None``: ``$XDG_DATA_HOME/llmbridge/agent.db`` (gateway.config fills it in)."""
    model: str | None = None
    """The model of turns that name none; ``None``: the default backend's model."""
    history_budget: int = Field(3000, ge=0)
    """Tokens of conversation history (pins, summaries, messages) sent per turn."""
    summaries: bool = True
    """Summarise older exchanges of long sessions in the background."""
    summary_model: str | None = None
    """The model that writes summaries; ``None``: each session's own model."""
    web_search: bool | None = None
    """Offer the ``web_search`` tool (Tavily); ``None``: when a Tavily key is set."""
    tavily_api_key: str | None = None
    """The key ``web_search`` uses; defaults to the ``TAVILY_API_KEY`` environment
    variable (read by gateway.config's reader)."""
    store_responses: Literal["default", "explicit", "off"] = "default"
    """Which ``/v1/responses`` replies are kept for ``previous_response_id`` and ``GET``
    (docs/RESPONSES.md, "Stateful responses"): ``default`` every one unless the request
    says ``"store": false`` (OpenAI's API default, which clients that continue by id
    rely on); ``explicit`` only those that say ``"store": true``; ``off`` none (each
    save costs a database write, about 2 ms of CPU on SQLite)."""
    max_document_bytes: int = Field(2_000_000, gt=0)
    """The largest document content (UTF-8 bytes) ``/agent/documents`` indexes; over
    it, a 413 naming this limit (``agent.documents.MAX_DOCUMENT_BYTES``)."""
    domains: tuple[DomainName, ...] = ("eldercare",)
    """The domains plugged in (``agent.domains``), in the order their context comes in
    a turn; ``[]``: none (no ``/agent/patients`` routes; sessions' ``subject_id`` is
    kept unchecked)."""

    @field_validator("domains")
    @classmethod
    def _each_once(cls, names: tuple[DomainName, ...]) -> tuple[DomainName, ...]:
        repeated = sorted({name for name in names if names.count(name) > 1})
        if repeated:
            raise ValueError(f"names a domain more than once: {repeated}")
        return names
