"""The agent API's requests that call a model, admitted and recorded as the dialect
routes' are (key limits, the ledger): ``KeyGate`` fills the hook ``agent/gate.py`` names, and
``gateway/app.py`` sets it on the ``MountedAgent``.

``admit`` opens the request's ``Exchange`` (exchange.py) for the turn's model:
the request's database key (``ACCOUNT`` in the scope; a static key or auth off counts
nothing) checked against its globs, budget (a reservation of the turn's worst case),
parallel slot, requests and tokens per minute, the caller's text estimated as the
prompt (the whole prompt, persona, documents and history, is built inside the turn;
what the turn really used is counted when it ends, as for any reply). A refusal is
recorded in the ledger with its status and raised for the agent's error path, which
adds ``refusal_headers`` (OpenAI-shaped: the agent API's errors are).

``AgentPass`` then sums the usage of every model call of the request (a tool loop
makes several, ``Usage.plus``) and hands the sum to the exchange once
(``Exchange.agent_usage``), whose endpoint is the route's path template and whose model
is the model the turn used. ``finish`` settles the key and
writes the one ledger row, once, however the request ended.

``memory_usage_recorder`` puts the agent's background memory calls (summaries,
compaction, fact extraction: agent/memory/summariser.py), which belong to no request,
in the same ledger: one row per call, endpoint ``/agent memory:<kind>``, dialect
``agent``, priced like any call of that model, no key (the gateway's own work for a
session).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from starlette.requests import Request

from llmbridge.accounts.ledger import UsageRecord
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.response import Usage
from llmbridge.features.token_count import count_text_tokens
from llmbridge.gateway.exchange.admission import refusal_headers
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.state import GatewayState
from llmbridge.serving.router import Resolved
from llmbridge.web.render import Dialect, new_request_id

__all__ = ["AgentPass", "KeyGate", "memory_usage_recorder"]


class AgentPass:
    """One admitted agent request: its ``Exchange``, with its model calls' usage summed."""

    __slots__ = ("exchange", "usage")

    def __init__(self, exchange: Exchange) -> None:
        self.exchange = exchange
        self.usage: Usage | None = None
        """Every model call's usage so far, summed."""

    def first_event(self) -> None:
        # The request's time to first token: its first model call's first event.
        self.exchange.first_event()

    def add_usage(self, usage: Usage) -> None:
        self.usage = usage if self.usage is None else self.usage.plus(usage)

    def headers(self) -> Mapping[str, str]:
        return self.exchange.headers()

    async def finish(self, status: int) -> None:
        exchange = self.exchange
        if exchange.done:
            return
        if self.usage is not None:
            exchange.agent_usage(self.usage)
        await exchange.finish(status)


class KeyGate:
    """``agent.gate.ModelGate`` over this gateway's keys, limits and usage ledger."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state

    async def admit(
        self, request: Request, model: str, *, endpoint: str, streamed: bool, prompt: str
    ) -> AgentPass:
        exchange = Exchange(self.state, request.scope, endpoint=endpoint, dialect=Dialect.OPENAI)
        exchange.asked(model, streamed=streamed)
        resolved = self._resolved(model)
        if resolved is not None:
            exchange.served_by(resolved)
        record = exchange.record
        try:
            if record is not None:
                counts = record.tpm is not None or record.budget_usd is not None
                tokens = count_text_tokens(prompt) if counts else 0
                exchange.counted_prompt(tokens)
                await exchange.admit_call(prompt_tokens=tokens)
        except LLMBridgeError as exc:
            exchange.failed(exc)
            await exchange.finish()
            raise
        return AgentPass(exchange)

    def refusal_headers(self, error: LLMBridgeError) -> dict[str, str]:
        return refusal_headers(error, Dialect.OPENAI)

    def _resolved(self, model: str) -> Resolved | None:
        """Where ``model`` resolves to, when its route has one server. Which of
        several deployments served is decided inside ``Models.chat``, which the agent
        does not see: the ledger then leaves the backend unnamed (and names the
        route's server even when a fallback served a turn)."""
        models = self.state.models
        try:
            resolved = models.resolve(model)
        except LLMBridgeError:  # an unknown model: its turn fails with the 404
            return None
        if models.router.pool(resolved) is not None:
            return None
        return resolved


def memory_usage_recorder(state: GatewayState) -> Callable[[str, str, Usage | None], None]:
    """The hook ``Summariser.on_usage`` calls after each memory call (module docstring)."""

    def record(kind: str, model: str, usage: Usage | None) -> None:
        ledger = state.ledger
        if ledger is None:
            return
        cost = state.prices.cost(model, usage) if usage is not None else None
        ledger.record(
            UsageRecord(
                request_id=new_request_id(),
                model=model,
                status=200,
                endpoint=f"/agent memory:{kind}",
                input_tokens=usage.input_tokens if usage else None,
                output_tokens=usage.output_tokens if usage else None,
                reasoning_tokens=usage.reasoning_tokens if usage else None,
                cached_tokens=usage.cache_read_input_tokens if usage else None,
                cost_usd=cost,
                replica=ledger.replica,
                dialect="agent",
            )
        )

    return record
