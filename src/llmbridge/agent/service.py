"""The agent service: ``run_agent``, ``run_agent_stream`` and ``list_sessions``
(seed 002's ``agentService``), generalised and made transactional, plus the
owner-scoped operations the HTTP API and the CLI need (personas, sessions, messages,
pins, summaries; documents and a domain's records are ``DocumentStore`` and the
domain's own, ``agent.domains``). ``owner`` is the caller's API key identity, ``None``
when unscoped (``store.access`` has the rules); a turn runs with its request's owner
and sees only that owner's session, personas, documents and domain records.

A session may name its subject (``subject_id``: what it is about). With a
``subject_check`` (the domain that owns subjects: eldercare's patients), a session
naming one ``owner`` may not see is refused (404) when it is created or changed;
without one, the id is kept as given. The context providers get the session's
subject with every turn (``ContextRequest.subject_id``).

A turn:

1. The model is resolved first (an unknown model or persona fails before anything
   is stored). Settings merge persona first, then the request
   (``persona_settings.merge_settings``) into neutral parameters
   (``persona_settings.generation_params``); the serving layer fits them to the backend.
2. The user message is stored (committed) before generation.
3. The prompt, stable part first so a local model's prefix cache hits
   (``prompt``): the system prompt (persona, custom prompt, focus instructions),
   then the hybrid-memory history (``memory``), then one user message with this
   turn's context (documents, the context providers' blocks) and the input.
   Each provider's block is sized by the model's context window
   (``context_providers.context_budget``: the route's ``context_length``, else the backend's
   report), unless the service was given a fixed ``context_budget``.
4. The tool loop: the model is asked with the registry's tools (offered on every
   backend; the gateway pipeline emulates them for models without native tools).
   When it calls tools, one round's calls run in parallel and their results go
   back to it, for at most ``max_rounds`` rounds (default 5); then one last answer
   is generated without tools, as the seed's second generation. A tool with a
   marker (``web_search``: ``[SEARCHING_ONLINE]``) shows it once before it runs.
   The persona's MCP tools (its ``mcp_tools`` globs, with the service's ``mcp``:
   agent/mcp_tools.py) are offered beside the registry's, called with the key of
   the request that started the turn (``AgentRequest.caller``), their failures
   error results like any tool's.
5. The assistant message is stored when the answer completes, with the turn's tool
   calls and results and its token usage. If the stream breaks (a backend error,
   the consumer stopping, cancellation), whatever was already produced is stored
   marked ``incomplete`` and the error propagates; nothing produced, nothing stored
   beyond the user message.
   Turns of one session run one at a time, in arrival order
   (``agent.session_locks``), so each turn's history holds only answered questions
   and each answer follows its own question.
6. The summariser (on by default in ``AgentRuntime``) is scheduled in the
   background with the turn's model (or its own). The turn is registered in
   ``turns`` (``agent.turns``) from start to end, so a background summary on the same
   backend waits for it, or is cancelled when the turn starts: summarising never
   delays a reply.

``summarise`` writes one summary now, whatever the threshold (the API's
``POST /agent/sessions/{id}/summaries``).

Streaming events: ``AgentStart`` (ids), ``AgentDelta`` (text, markers included),
``AgentToolCall`` / ``AgentToolResult``, then ``AgentDone`` (the stored message id,
the full text and the token usage: the seed's ``{delta, done, tokenUsage}``).
The stored content is the model's text without markers, so they never come back
through the history.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Sequence
from contextlib import aclosing
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol

from llmbridge.agent.context_providers import (
    ContextProvider,
    ContextRequest,
    context_budget,
    gather_context,
)
from llmbridge.agent.documents import DocumentStore
from llmbridge.agent.domains.domain import SubjectCheck
from llmbridge.agent.gate import CallMeter, metered
from llmbridge.agent.mcp_tools import MCP_SEPARATOR, McpTools, McpTurnTools, TurnCaller
from llmbridge.agent.memory import MemoryBuilder, MemoryConfig, Summariser
from llmbridge.agent.persona_settings import AgentSettings, generation_params, merge_settings
from llmbridge.agent.prompt import assemble_turn, build_system_prompt, build_turn_context
from llmbridge.agent.session_locks import SessionLocks
from llmbridge.agent.store import (
    AgentStore,
    PersonaRecord,
    PinRecord,
    SessionRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.agent.tools import ToolRegistry, UnknownToolError
from llmbridge.agent.turns import TurnGate
from llmbridge.core.accumulate import Accumulator
from llmbridge.core.errors import InvalidRequestError, NotFoundError
from llmbridge.core.events import PartDelta, TextDelta
from llmbridge.core.messages import Message, TextPart, ToolCallPart, ToolResultPart
from llmbridge.core.request import ChatRequest, GenerationParams, ResponseFormat
from llmbridge.core.response import Usage
from llmbridge.core.stream import ChatFn, EventStream

__all__ = [
    "AgentDelta",
    "AgentDone",
    "AgentEvent",
    "AgentReply",
    "AgentRequest",
    "AgentService",
    "AgentStart",
    "AgentToolCall",
    "AgentToolResult",
    "ModelCaller",
]

log = logging.getLogger("llmbridge.agent")

FINAL_ROUND_NOTE = (
    "You have access to current tool results. Use them to provide accurate, up-to-date information."
)


class ModelCaller(Protocol):
    """How the agent reaches models: ``serving.models.Models``, the gateway's own way
    (request preparation, emulated tools, retries, fallbacks, the breaker)."""

    def backend_name(self, model: str) -> str: ...

    async def context_window(self, model: str) -> int | None: ...

    def chat(self, request: ChatRequest) -> EventStream: ...


@dataclass(frozen=True, slots=True)
class AgentRequest:
    """One turn (the seed's ``RunAgentParams``)."""

    input: str
    model: str
    session_id: str | None = None
    """An existing session, a new one by this id, or ``None`` for a new session."""
    persona_id: str | None = None
    """Defaults to the session's persona."""
    system_prompt: str = ""
    """The request's custom system prompt (after the persona's, before the focus)."""
    settings: AgentSettings | None = None
    """Overrides of the persona's settings."""
    document_ids: tuple[int, ...] | None = None
    """Search only these documents (the seed's ``fileIds``); ``None``: all."""
    tools: bool | tuple[str, ...] = True
    """``True``: every tool the agent has; ``False``: none; names: just those, each a
    tool's name or an alias (``tavily_search`` for ``web_search``), or an MCP tool's
    ``<server>__<tool>`` (offered when the persona's ``mcp_tools`` and the key allow
    it and its server is up). Another name the agent has no tool for is an
    ``InvalidRequestError`` before anything is stored."""
    history_budget: int | None = None
    """Tokens for the history context (default: the memory config's, 3000)."""
    owner: str | None = None
    """The caller's API key identity (``store.access``); ``None``: unscoped."""
    caller: TurnCaller | None = None
    """The HTTP request that started the turn: whose key its MCP tool calls are made
    with (``None``: no request, no key, as in the CLI)."""


@dataclass(frozen=True, slots=True)
class AgentStart:
    session_id: str
    user_message_id: int
    kind: Literal["start"] = "start"


@dataclass(frozen=True, slots=True)
class AgentDelta:
    text: str
    kind: Literal["delta"] = "delta"


@dataclass(frozen=True, slots=True)
class AgentToolCall:
    id: str
    name: str
    arguments: dict[str, Any]
    round: int
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True, slots=True)
class AgentToolResult:
    id: str
    name: str
    content: str
    is_error: bool
    round: int
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True, slots=True)
class AgentDone:
    session_id: str
    message_id: int
    text: str
    """Everything shown, markers included."""
    usage: Usage
    rounds: int
    """Model calls made."""
    kind: Literal["done"] = "done"

    @property
    def total_tokens(self) -> int:
        return (self.usage.input_tokens or 0) + (self.usage.output_tokens or 0)


AgentEvent = AgentStart | AgentDelta | AgentToolCall | AgentToolResult | AgentDone


@dataclass(frozen=True, slots=True)
class AgentReply:
    """The non-streaming result (the seed's ``{reply, tokenUsage}``)."""

    session_id: str
    user_message_id: int
    message_id: int
    text: str
    usage: Usage
    rounds: int
    tool_calls: tuple[AgentToolCall, ...] = ()
    tool_results: tuple[AgentToolResult, ...] = ()

    @property
    def total_tokens(self) -> int:
        return (self.usage.input_tokens or 0) + (self.usage.output_tokens or 0)


@dataclass(slots=True)
class _Turn:
    """What a turn produced so far (stored, complete or not, when it ends)."""

    session_id: str
    model: str
    answer: list[str] = field(default_factory=list)
    shown: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    results: list[dict[str, Any]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    rounds: int = 0

    def add_usage(self, usage: Usage) -> None:
        # Cached input tokens are summed too: on a local model they say what
        # the prompt cache saved over the turn's rounds.
        summed = self.usage.plus(usage)
        self.usage = replace(
            summed, input_tokens=summed.input_tokens or 0, output_tokens=summed.output_tokens or 0
        )

    @property
    def produced(self) -> bool:
        return bool(self.answer or self.calls)

    def tool_data(self) -> dict[str, Any] | None:
        if not self.calls:
            return None
        return {"calls": self.calls, "results": self.results}


class AgentService:
    """Personas, sessions, memory, documents, context providers and tools over the
    gateway's models (module docstring)."""

    def __init__(
        self,
        store: AgentStore,
        models: ModelCaller,
        *,
        tools: ToolRegistry | None = None,
        providers: Sequence[ContextProvider] = (),
        subject_check: SubjectCheck | None = None,
        documents: DocumentStore | None = None,
        memory: MemoryConfig | None = None,
        summariser: Summariser | None = None,
        max_rounds: int = 5,
        document_budget: int = 1000,
        context_budget: int | None = None,
        turns: TurnGate | None = None,
        mcp: McpTools | None = None,
    ) -> None:
        self.store = store
        self.models = models
        self.tools = tools or ToolRegistry()
        self.mcp = mcp
        """The MCP gateway's tools (agent/mcp_tools.py); ``None``: no MCP tools."""
        self.providers = tuple(providers)
        self.subject_check = subject_check
        """How a session's subject is checked (module docstring); ``None``: it is not."""
        self.documents = documents
        self.memory = MemoryBuilder(store, memory)
        self.summariser = summariser
        self.max_rounds = max_rounds
        self.document_budget = document_budget
        self.context_budget = context_budget
        """A fixed budget for each provider's block; ``None``: sized by the model."""
        if turns is None:
            turns = summariser.gate if summariser is not None and summariser.gate else None
        self.turns = turns or TurnGate(models.backend_name)
        """Turns in flight, per backend (background summaries yield to them)."""
        if summariser is not None and summariser.gate is None:
            summariser.gate = self.turns
        self.session_locks = SessionLocks()
        """One turn at a time per session (``agent.session_locks``)."""

    # -- personas ---------------------------------------------------------------------

    async def create_persona(
        self,
        *,
        name: str,
        prompt: str = "",
        settings: AgentSettings | None = None,
        persona_id: str | None = None,
        owner: str | None = None,
    ) -> PersonaRecord:
        """A new persona (``ConflictError`` when ``persona_id`` is taken)."""
        return await self.store.create_persona(
            persona_id,
            name=name,
            prompt=prompt,
            settings=settings.set_values() if settings is not None else {},
            owner=owner,
        )

    async def personas(self, *, owner: str | None = None) -> list[PersonaRecord]:
        return await self.store.list_personas(owner=owner)

    async def get_persona(self, persona_id: str, *, owner: str | None = None) -> PersonaRecord:
        """A persona ``owner`` may see (``NotFoundError`` for any other)."""
        return await self.store.get_persona(persona_id, owner=owner)

    async def update_persona(
        self,
        persona_id: str,
        *,
        owner: str | None = None,
        name: str | None = None,
        prompt: str | None = None,
        settings: AgentSettings | None = None,
    ) -> PersonaRecord:
        return await self.store.update_persona(
            persona_id,
            owner=owner,
            name=name,
            prompt=prompt,
            settings=settings.set_values() if settings is not None else None,
        )

    async def delete_persona(self, persona_id: str, *, owner: str | None = None) -> None:
        if not await self.store.delete_persona(persona_id, owner=owner):
            raise NotFoundError(f"no persona {persona_id!r}")

    # -- sessions -----------------------------------------------------------------------

    async def create_session(
        self,
        *,
        name: str = "",
        persona_id: str | None = None,
        subject_id: int | None = None,
        owner: str | None = None,
    ) -> SessionRecord:
        """A new session of ``owner``'s, with a persona and a subject it may see."""
        await self._check_references(persona_id, subject_id, owner)
        # A persona deleted meanwhile: the store's NotFoundError.
        return await self.store.create_session(
            name=name, persona_id=persona_id, subject_id=subject_id, owner=owner
        )

    async def get_session(self, session_id: str, *, owner: str | None = None) -> SessionRecord:
        """``owner``'s session ``session_id`` (``NotFoundError`` for anyone else's)."""
        return await self.store.get_session(session_id, owner=owner)

    async def update_session(
        self, session_id: str, *, owner: str | None = None, **fields: Any
    ) -> SessionRecord:
        """Set the ``name``, ``persona_id`` or ``subject_id`` of ``owner``'s session."""
        await self.get_session(session_id, owner=owner)
        await self._check_references(fields.get("persona_id"), fields.get("subject_id"), owner)
        return await self.store.update_session(session_id, owner=owner, **fields)

    async def delete_session(self, session_id: str, *, owner: str | None = None) -> None:
        if not await self.store.delete_session(session_id, owner=owner):
            raise NotFoundError(f"no session {session_id!r}")

    async def list_sessions(
        self, limit: int = 100, offset: int = 0, *, owner: str | None = None
    ) -> list[SessionRecord]:
        """Sessions, newest first (``owner``'s only)."""
        return await self.store.list_sessions(limit, offset, owner=owner)

    async def messages(
        self,
        session_id: str,
        *,
        owner: str | None = None,
        after_id: int | None = None,
        limit: int = 100,
    ) -> list[StoredMessage]:
        """Up to ``limit`` messages after ``after_id``, oldest first."""
        await self.get_session(session_id, owner=owner)
        return await self.store.first_messages(session_id, limit, after_id=after_id)

    async def add_pin(
        self,
        session_id: str,
        content: str,
        *,
        owner: str | None = None,
        message_id: int | None = None,
    ) -> PinRecord:
        """Pin a fact to ``owner``'s session (optionally the message it came from)."""
        await self.get_session(session_id, owner=owner)
        if message_id is not None:
            await self.store.get_message(session_id, message_id)
        return await self.store.add_pin(session_id, content, message_id=message_id)

    async def pins(
        self, session_id: str, *, owner: str | None = None, limit: int = 1000
    ) -> list[PinRecord]:
        await self.get_session(session_id, owner=owner)
        return await self.store.pins(session_id, limit)

    async def delete_pin(self, session_id: str, pin_id: int, *, owner: str | None = None) -> None:
        await self.get_session(session_id, owner=owner)
        if not await self.store.delete_pin(pin_id, session_id=session_id):
            raise NotFoundError(f"no pin {pin_id} in session {session_id!r}")

    async def summaries(
        self, session_id: str, *, owner: str | None = None, limit: int = 100
    ) -> list[SummaryRecord]:
        """Up to ``limit`` newest summaries, oldest first."""
        await self.get_session(session_id, owner=owner)
        return await self.store.last_summaries(session_id, limit)

    async def summarise(
        self,
        session_id: str,
        *,
        owner: str | None = None,
        model: str | None = None,
        default_model: Callable[[str | None], Awaitable[str]] | None = None,
        meter: CallMeter | None = None,
    ) -> SummaryRecord | None:
        """Write one summary of ``owner``'s session now, whatever the threshold: its
        oldest unsummarised messages but the last exchange, with ``summary_model``'s
        model. ``None`` when there is nothing to summarise. ``meter`` hears of the
        model call (``agent.gate``: a key's limits and the usage ledger)."""
        chosen = await self.summary_model(
            session_id, owner=owner, model=model, default_model=default_model
        )
        summariser = self.summariser or Summariser(self.store, self.models.chat)
        chat = metered(self.models.chat, meter) if meter is not None else None
        return await summariser.summarise_once(session_id, model=chosen, force=True, chat=chat)

    async def summary_model(
        self,
        session_id: str,
        *,
        owner: str | None = None,
        model: str | None = None,
        default_model: Callable[[str | None], Awaitable[str]] | None = None,
    ) -> str:
        """The model ``summarise`` writes ``owner``'s session's summary with:
        ``model``, else the summariser's, else the session's own (its last answer's),
        else ``default_model(None)``. ``NotFoundError`` for a session ``owner`` may
        not see or an unknown model; a 400 when there is no model at all."""
        await self.get_session(session_id, owner=owner)
        configured = self.summariser.model if self.summariser is not None else None
        chosen = model or configured or await self._session_model(session_id)
        if chosen is None and default_model is not None:
            chosen = await default_model(None)
        if not chosen:
            raise InvalidRequestError(
                "no model to summarise with: name one ('model')", param="model"
            )
        self.models.backend_name(chosen)  # an unknown model fails before any work
        return chosen

    async def _session_model(self, session_id: str) -> str | None:
        """The model of the session's newest answer among its last few messages."""
        recent = await self.store.last_messages(session_id, 20)
        return next((m.model for m in reversed(recent) if m.model), None)

    async def _check_references(
        self, persona_id: str | None, subject_id: int | None, owner: str | None
    ) -> None:
        if persona_id is not None:
            await self.get_persona(persona_id, owner=owner)
        if subject_id is not None and self.subject_check is not None:
            await self.subject_check(subject_id, owner=owner)

    # -- turns --------------------------------------------------------------------------

    async def run_agent(
        self, request: AgentRequest, *, meter: CallMeter | None = None
    ) -> AgentReply:
        """One turn, answered whole (``meter``: as ``run_agent_stream``'s)."""
        start: AgentStart | None = None
        calls: list[AgentToolCall] = []
        results: list[AgentToolResult] = []
        async with aclosing(self.run_agent_stream(request, meter=meter)) as events:
            async for event in events:
                if isinstance(event, AgentStart):
                    start = event
                elif isinstance(event, AgentToolCall):
                    calls.append(event)
                elif isinstance(event, AgentToolResult):
                    results.append(event)
                elif isinstance(event, AgentDone):
                    assert start is not None
                    return AgentReply(
                        session_id=event.session_id,
                        user_message_id=start.user_message_id,
                        message_id=event.message_id,
                        text=event.text,
                        usage=event.usage,
                        rounds=event.rounds,
                        tool_calls=tuple(calls),
                        tool_results=tuple(results),
                    )
        raise RuntimeError("the agent stream ended without a reply")  # pragma: no cover

    async def run_agent_stream(
        self, request: AgentRequest, *, meter: CallMeter | None = None
    ) -> AsyncGenerator[AgentEvent, None]:
        """One turn, streamed (module docstring). ``meter`` hears of each of the
        turn's model calls: its first event and its usage (``agent.gate``: how the
        gateway counts a turn against a key's limits and in the usage ledger)."""
        self.models.backend_name(request.model)  # an unknown model fails before any work
        self.offered_tools(request.tools)  # so does an unknown tool
        backend = self.turns.begin(request.model)
        try:
            turn = self._turn(request, metered(self.models.chat, meter))
            serialised = self.session_locks.serialise(request.session_id, turn)
            async with aclosing(serialised) as events:
                async for event in events:
                    yield event
        finally:
            self.turns.end(backend)

    async def _turn(self, request: AgentRequest, chat: ChatFn) -> AsyncGenerator[AgentEvent, None]:
        persona = await self._persona(request.persona_id, request.owner)
        session = await self._session(request)
        if persona is None and session.persona_id:
            persona = await self._persona(session.persona_id, None)
        stored_settings = AgentSettings.model_validate(persona.settings) if persona else None
        settings = merge_settings(stored_settings, request.settings)
        params = generation_params(settings)
        text = request.input.strip()
        user = await self.store.add_message(session.id, "user", text)
        yield AgentStart(session.id, user.id)

        system = build_system_prompt(persona.prompt if persona else "", request.system_prompt)
        context = await self._turn_context(request, session)
        history = await self.memory.build(
            session.id, before_id=user.id, budget=request.history_budget
        )
        messages = assemble_turn(system, history.messages, context, text)
        turn = _Turn(session.id, request.model)
        loop = self._loop(request, settings, params, messages, turn, chat)
        completed = False
        try:
            async for event in loop:
                yield event
            completed = True
        finally:
            # Close the model's stream first (a stopped consumer cancels the backend
            # call), then keep what was already produced.
            await loop.aclose()
            if not completed and turn.produced:
                await asyncio.shield(self._store_answer(turn, "incomplete"))
        message_id = await asyncio.shield(self._store_answer(turn, "complete"))
        if self.summariser is not None:
            # Starts once this turn has ended (``turns``), never before the reply.
            self.summariser.schedule(session.id, request.model)
        yield AgentDone(session.id, message_id, "".join(turn.shown), turn.usage, turn.rounds)

    def offered_tools(self, tools: bool | Sequence[str]) -> ToolRegistry:
        """The tools a turn offers (``AgentRequest.tools``); ``InvalidRequestError``
        (``param: tools``) naming a tool the agent does not have."""
        if tools is True:
            return self.tools
        if tools is False:
            return ToolRegistry(max_parallel=self.tools.max_parallel)
        # An MCP tool's name is checked by the gateway when it is offered: its server
        # may be down now, and up by the next turn.
        own = [name for name in tools if name in self.tools or MCP_SEPARATOR not in name]
        try:
            return self.tools.only(own)
        except UnknownToolError as exc:
            raise InvalidRequestError(f"tools: {exc}", param="tools") from exc

    def _turn_tools(self, request: AgentRequest, settings: AgentSettings) -> ToolRegistry:
        """The registry's tools the request chose, and the MCP tools of the persona's
        ``mcp_tools`` the request's key may use (agent/mcp_tools.py), listed now:
        whatever servers are up as the turn starts."""
        tools = self.offered_tools(request.tools)
        if self.mcp is None or not settings.mcp_tools or request.tools is False:
            return tools
        names = None if isinstance(request.tools, bool) else request.tools
        mcp = McpTurnTools(self.mcp, settings.mcp_tools, request.caller, names=names)
        return tools.extended(mcp.tools(), fallback=mcp)

    async def _persona(self, persona_id: str | None, owner: str | None) -> PersonaRecord | None:
        if not persona_id:
            return None
        return await self.store.get_persona(persona_id, owner=owner)

    async def _session(self, request: AgentRequest) -> SessionRecord:
        name = request.input.strip()[:80]
        if request.session_id is None:
            return await self.store.create_session(
                name=name, persona_id=request.persona_id, owner=request.owner
            )
        return await self.store.ensure_session(
            request.session_id, name=name, persona_id=request.persona_id, owner=request.owner
        )

    async def _turn_context(self, request: AgentRequest, session: SessionRecord) -> str:
        documents = ""
        if self.documents is not None:
            documents = await self.documents.document_context(
                request.input,
                budget=self.document_budget,
                document_ids=request.document_ids,
                owner=request.owner,
            )
        domain = await gather_context(
            self.providers,
            ContextRequest(
                request.input,
                session_id=session.id,
                persona_id=request.persona_id or session.persona_id,
                subject_id=session.subject_id,
                budget=await self._context_budget(request.model),
                owner=request.owner,
            ),
        )
        return build_turn_context(documents, domain)

    async def _context_budget(self, model: str) -> int:
        """Tokens for each provider's block: fixed, or sized by ``model``'s window."""
        if self.context_budget is not None:
            return self.context_budget
        try:
            window = await self.models.context_window(model)
        except Exception:  # an unknown window costs the sizing, not the turn
            log.warning("cannot learn the context window of %s", model, exc_info=True)
            window = None
        return context_budget(window)

    async def _loop(
        self,
        request: AgentRequest,
        settings: AgentSettings,
        params: GenerationParams,
        messages: list[Message],
        turn: _Turn,
        chat_fn: ChatFn,
    ) -> AsyncGenerator[AgentEvent, None]:
        tools = self._turn_tools(request, settings)
        offered = tools.definitions()
        fmt = ResponseFormat("json") if settings.output_format == "json" else None
        shown_markers: set[str] = set()
        for number in range(self.max_rounds + 1):
            final = not offered or number == self.max_rounds
            if final and number > 0:
                messages = _final_round(messages)
            chat = ChatRequest(
                model=request.model,
                messages=tuple(messages),
                stream=True,
                params=params,
                tools=() if final else offered,
                response_format=fmt,
            )
            turn.rounds += 1
            accumulator = Accumulator()
            async with aclosing(chat_fn(chat)) as stream:
                async for event in stream:
                    accumulator.add(event)  # raises a StreamError's error
                    if isinstance(event, PartDelta) and isinstance(event.delta, TextDelta):
                        turn.answer.append(event.delta.text)
                        turn.shown.append(event.delta.text)
                        yield AgentDelta(event.delta.text)
            response = accumulator.response()
            turn.add_usage(response.usage)
            calls = response.message.tool_calls
            if final or not calls:
                return
            for call in calls:
                tool = tools.get(call.name)
                if tool is not None and tool.marker and tool.marker not in shown_markers:
                    shown_markers.add(tool.marker)
                    turn.shown.append(f"{tool.marker}\n\n")
                    yield AgentDelta(f"{tool.marker}\n\n")
                turn.calls.append({"id": call.id, "name": call.name, "arguments": call.arguments})
                yield AgentToolCall(call.id, call.name, dict(call.arguments), number)
            results = await tools.execute_all(calls)
            for result in results:
                turn.results.append(
                    {
                        "id": result.tool_call_id,
                        "name": result.name,
                        "content": result.content,
                        "is_error": result.is_error,
                    }
                )
                yield AgentToolResult(
                    result.tool_call_id,
                    result.name or "",
                    result.content,
                    result.is_error,
                    number,
                )
            messages = [*messages, response.message, Message("tool", tuple(results))]

    async def _store_answer(self, turn: _Turn, status: Literal["complete", "incomplete"]) -> int:
        stored = await self.store.add_message(
            turn.session_id,
            "assistant",
            "".join(turn.answer),
            status=status,
            tool_data=turn.tool_data(),
            model=turn.model,
            input_tokens=turn.usage.input_tokens,
            output_tokens=turn.usage.output_tokens,
        )
        return stored.id


def _final_round(messages: list[Message]) -> list[Message]:
    """The seed's last generation once the tool rounds are spent: no tools, and the
    tool traffic flattened into a system note (a request with tool calls in its
    history but no tools offered is refused by some APIs)."""
    results: list[str] = []
    kept: list[Message] = []
    for message in messages:
        calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
        outputs = [p for p in message.parts if isinstance(p, ToolResultPart)]
        for output in outputs:
            results.append(f"[{output.name or output.tool_call_id}] {output.content}")
        if calls or outputs:
            text = message.text
            if text and message.role == "assistant":
                kept.append(Message("assistant", (TextPart(text),)))
            continue
        kept.append(message)
    note = FINAL_ROUND_NOTE + "\n\nCurrent tool results:\n" + "\n\n".join(results)
    insert_at = next((i for i, m in enumerate(kept) if m.role != "system"), len(kept))
    kept.insert(insert_at, Message("system", (TextPart(note),)))
    return kept
