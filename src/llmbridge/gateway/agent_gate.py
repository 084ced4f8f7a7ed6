"""The agent API's requests that call a model, counted as the dialect routes count
theirs (issue 17): ``KeyGate`` fills the hook ``agent/gate.py`` names, and
``gateway/app.py`` sets it on the ``MountedAgent``.

``admit`` is ``gateway/admission.py``'s ``admitted`` for the turn's model: the
request's database key (``ACCOUNT`` in the scope; a static key or auth off counts
nothing) checked against its globs, budget, parallel slot, requests and tokens per
minute, the caller's text estimated as the prompt (the whole prompt, persona,
documents and history, is built inside the turn; what the turn really used is
added when it ends, as for any reply). A refusal is recorded in the ledger with its
status, as ``pipeline.serve_chat`` records one, and raised for the agent's error
path, which adds ``refusal_headers`` (OpenAI-shaped: the agent API's errors are).

``AgentPass`` then sums the usage of every model call of the request (a tool loop
makes several) into one ``Metered`` record, whose endpoint is the route's path
template and whose model is the model the turn used. ``finish`` gives the key's
slot back and adds the tokens to its window, once, however the request ended.
"""

from __future__ import annotations

from collections.abc import Mapping

from starlette.requests import Request

from llmbridge.accounts.limits import OPEN, Admission
from llmbridge.backends.base import Backend
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.response import Usage
from llmbridge.features.token_count import count_text_tokens
from llmbridge.gateway.accounting import Metered, metered
from llmbridge.gateway.admission import account_of, admitted, refusal_headers, total_tokens
from llmbridge.gateway.state import GatewayState
from llmbridge.web.render import Dialect, new_request_id

__all__ = ["AgentPass", "KeyGate"]


class AgentPass:
    """One admitted agent request: its key's admission and its ledger record."""

    __slots__ = ("admission", "finished", "meter", "usage")

    def __init__(self, admission: Admission, meter: Metered | None) -> None:
        self.admission = admission
        self.meter = meter
        self.usage: Usage | None = None
        """Every model call's usage so far, summed."""
        self.finished = False

    def first_event(self) -> None:
        # The request's time to first token: its first model call's first event.
        if self.meter is not None and self.meter.ttft_s is None:
            self.meter.first_event()

    def add_usage(self, usage: Usage) -> None:
        self.usage = usage if self.usage is None else self.usage.plus(usage)

    def headers(self) -> Mapping[str, str]:
        return self.admission.headers(Dialect.OPENAI)

    async def finish(self, status: int) -> None:
        if self.finished:
            return
        self.finished = True
        meter = self.meter
        if meter is not None:
            if self.usage is not None:
                meter.add_usage(self.usage)
            meter.finish(status)
        await self.admission.finish(total_tokens(self.usage))


class KeyGate:
    """``agent.gate.ModelGate`` over this gateway's keys, limits and usage ledger."""

    def __init__(self, state: GatewayState) -> None:
        self.state = state

    async def admit(
        self, request: Request, model: str, *, endpoint: str, streamed: bool, prompt: str
    ) -> AgentPass:
        state = self.state
        meter = metered(
            state.ledger,
            state.prices,
            request.scope,
            request_id=new_request_id(),
            model=model,
            endpoint=endpoint,
            streamed=streamed,
        )
        if meter is not None:
            meter.backend = self._backend(model)
        record = account_of(request)
        try:
            admission = OPEN
            if record is not None:
                tokens = count_text_tokens(prompt) if record.tpm is not None else 0
                admission = await admitted(request, model, state, prompt_tokens=tokens)
        except LLMBridgeError as exc:
            if meter is not None:
                meter.finish(exc.status_code)
            raise
        return AgentPass(admission, meter)

    def refusal_headers(self, error: LLMBridgeError) -> dict[str, str]:
        return refusal_headers(error, Dialect.OPENAI)

    def _backend(self, model: str) -> Backend | None:
        """The backend ``model`` resolves to, when its route has one server. Which of
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
        return resolved.backend
