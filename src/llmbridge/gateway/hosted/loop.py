"""The MCP tool loop of one model request: ``McpLoop`` (docs/MCP.md, "MCP tools for any
model").

``plan`` checks what the request asks (core/hosted_mcp.py ``HostedMcp``): each server is
a configured ``mcp.servers`` entry or has a URL that ``mcp.allowed_urls`` allows (else
a 400 naming the setting: the gateway never becomes a way to reach other hosts), and a
URL given for a configured server is allowed too or is the gateway's own
``/mcp/<server>`` of it. ``open`` connects the servers only the request names, for
this request, with the headers and token it gave (``McpGateway.request_server``),
lists each server's tools the key may see (``McpGateway.tools_for``) and the request
allows, and offers them to the model as function tools ``<server>__<tool>`` beside
the client's own (a backend without tools gets them through
features/tool_emulation.py like any tool).

``open`` then runs the calls the client approved (an answered ``mcp_approval_request``)
and opens the first round; ``events`` yields the answer: the first round's
``ResponseStart``, the servers' tool lists, then each round's parts with the model's
MCP calls taken out and, after the round, those calls run (``McpGateway.call_tool``,
the one path a tool call takes: the key's ``mcp_tools`` and limits, its ledger row,
metrics and span) and their results fed back to the next round (a ``tool_choice``
that forces a call holds for the first round only). It stops when a round calls no MCP
tool, calls a client tool (that call goes back to the client as usual), asks for an
approval, or after ``mcp.max_tool_rounds`` rounds (``McpRoundsSpent``, then
``max_tokens``: the dialects' incomplete answer). One ``ResponseEnd`` carries every
round's usage summed.

Each round is a model request in the ledger: the first is the route's ``Exchange``
(admitted on the key as any request), each later one an ``Exchange`` of its own whose
request id is the client's with ``-r<n>`` added, not admitted again (the client's
request holds the key's slot) and counted to the key when it ends: its tokens to the
tokens per minute, its cost through its row. A later round that fails fails the
client's request too (its row has the round's error).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import anyio
import mcp_types as types
import orjson
from mcp.shared.exceptions import MCPError
from starlette.types import Scope

from llmbridge.core.errors import InvalidRequestError, LLMBridgeError
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamError,
    StreamEvent,
    UsageUpdate,
)
from llmbridge.core.hosted_mcp import (
    TOOL_SEPARATOR,
    HostedEvent,
    HostedMcp,
    McpApprovalAsked,
    McpCallEnded,
    McpCallStarted,
    McpRoundsSpent,
    McpServerUse,
    McpToolsListed,
    model_tool_name,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import (
    Message,
    Part,
    ToolCallPart,
    ToolChoice,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.mcp.config import MAX_SERVER_NAME, is_server_name
from llmbridge.mcp.endpoints import McpGateway
from llmbridge.mcp.results import result_text
from llmbridge.mcp.upstream import Upstream
from llmbridge.serving.models import Reply
from llmbridge.serving.prepare import Changes

__all__ = ["McpLoop"]


@dataclass(frozen=True, slots=True)
class _Offered:
    """A tool the model may call: its server and the server's name of it."""

    use: McpServerUse
    tool: str


class McpLoop:
    """The loop of one request (module docstring)."""

    def __init__(
        self, exchange: Exchange, chat: ChatRequest, hosted: HostedMcp, *, announce: bool
    ) -> None:
        self.exchange = exchange
        self.chat = chat
        self.hosted = hosted
        self.announce = announce
        """Whether the first event says the prompt's size (Anthropic's message_start)."""
        self.offered: dict[str, _Offered] = {}
        self.uses: dict[str, McpServerUse] = {}
        self.items: list[HostedEvent] = []
        """What comes before the first round's parts: the lists, approved calls."""
        self.reply: Reply | None = None
        self.first: StreamEvent | None = None
        self.changes = Changes()
        self.connected: dict[str, Upstream] = {}
        """The servers only the request names, connected for it (``_offer``)."""
        self._connections = contextlib.AsyncExitStack()

    @property
    def scope(self) -> Scope:
        return self.exchange.scope

    @property
    def mcp(self) -> McpGateway:
        mcp = self.exchange.state.mcp
        assert mcp is not None  # plan refused the request otherwise
        return mcp

    # -- before the first round ----------------------------------------------------------

    def plan(self) -> None:
        """Check the servers the request names (module docstring); 400s raised."""
        state = self.exchange.state
        config = state.config.mcp
        mcp = state.mcp
        for use in self.hosted.servers:
            where = f"{use.param}.{use.url_field}"
            configured = mcp is not None and use.label in mcp.upstreams
            if use.url is not None and not (
                (configured and self._own_endpoint(use)) or config.url_allowed(use.url)
            ):
                raise InvalidRequestError(
                    f"Invalid '{where}': the MCP server URL {use.url!r} is not in the "
                    "gateway's mcp.allowed_urls (empty unless configured): name a server "
                    "of mcp.servers instead.",
                    param=where,
                    code="mcp_url_not_allowed",
                )
            if mcp is None or not (configured or use.url is not None):
                servers = ", ".join(mcp.upstreams) if mcp is not None else ""
                raise InvalidRequestError(
                    f"Invalid '{use.param}': no MCP server named {use.label!r} in the "
                    f"gateway's mcp.servers ({servers or 'empty'}), and no URL the "
                    "gateway's mcp.allowed_urls allows to connect to instead.",
                    param=use.param,
                    code="mcp_server_not_configured",
                )
            if not configured and not is_server_name(use.label):
                raise InvalidRequestError(
                    f"Invalid '{use.param}': {use.label!r} cannot name an MCP server: "
                    f"letters, digits, '-' and '_' (never '__'), at most {MAX_SERVER_NAME}.",
                    param=use.param,
                )
            if use.label in self.uses:
                raise InvalidRequestError(
                    f"Invalid '{use.param}': the MCP server {use.label!r} is named twice.",
                    param=use.param,
                )
            self.uses[use.label] = use
        for approval in self.hosted.approvals:
            if approval.server not in self.uses:
                raise InvalidRequestError(
                    f"Invalid 'input': the approved call {approval.request_id!r} is of the MCP "
                    f"server {approval.server!r}, which the request's tools do not name.",
                    param="input",
                )

    async def _offer(self) -> None:
        """Connect the servers only the request names, then offer every server's tools
        the key may see and the request allows (module docstring); 400s raised."""
        mcp = self.mcp
        definitions: list[ToolDefinition] = []
        for use in self.uses.values():
            if use.label not in mcp.upstreams:
                assert use.url is not None  # plan refused the request otherwise
                headers = dict(use.headers)
                self.connected[use.label] = await self._connections.enter_async_context(
                    mcp.request_server(use.label, use.url, headers)
                )
            definitions += self._listed(use, mcp)
        taken = {tool.name for tool in self.chat.tools}
        for definition in definitions:
            if definition.name in taken:
                raise InvalidRequestError(
                    f"Invalid 'tools': a tool named {definition.name!r} is also an MCP "
                    "server's tool (<server>__<tool>); rename it.",
                    param="tools",
                )
        self.chat = replace(self.chat, tools=(*self.chat.tools, *definitions))

    def _own_endpoint(self, use: McpServerUse) -> bool:
        """Whether ``use.url`` is this gateway's own ``/mcp/<server>`` of its server
        (the Anthropic connector needs a URL; this one reaches no other host)."""
        url = urlsplit(use.url or "")
        host = next((v for k, v in self.scope.get("headers", ()) if k == b"host"), b"")
        own = url.netloc.encode("latin-1", "replace") == host and host != b""
        return own and url.path.rstrip("/").endswith(f"/mcp/{use.label}")

    def _listed(self, use: McpServerUse, mcp: McpGateway) -> list[ToolDefinition]:
        connected = self.connected.get(use.label)
        upstream = connected or mcp.upstreams[use.label]
        listed = mcp.tools_for(use.label, self.scope, upstream=connected)
        tools = [t for t in listed if use.allows(t.name)]
        error = None
        if upstream.state != "up":
            error = f"the MCP server {use.label!r} is {upstream.state}"
            if upstream.error:
                error += f" ({upstream.error})"
        self.items.append(
            McpToolsListed(
                new_id("mcpl_"), use.label, tuple(_tool_listing(t) for t in tools), error
            )
        )
        definitions = []
        for tool in tools:
            name = model_tool_name(use.label, tool.name)
            self.offered[name] = _Offered(use, tool.name)
            definitions.append(
                ToolDefinition(name, tool.description or "", dict(tool.input_schema))
            )
        return definitions

    async def open(self) -> StreamEvent:
        """Run the approved calls, then open the first round: its first event (an
        error before it is raised, for the route to render)."""
        await self._offer()
        approved = self.hosted.approvals
        results: dict[str, ToolResultPart] = {}
        for approval in approved:
            name = model_tool_name(approval.server, approval.tool)
            call = ToolCallPart(approval.request_id, name, _arguments(approval.arguments))
            if approval.approve:
                ended = await self._run(self.uses[approval.server], approval.tool, call)
                ended = replace(ended, approval_request_id=approval.request_id)
                self.items.append(ended)
            else:
                reason = approval.reason or "no reason given"
                ended = McpCallEnded(
                    approval.request_id,
                    approval.server,
                    approval.tool,
                    approval.arguments,
                    error=f"the user refused this call ({reason})",
                    error_status=403,
                )
            results[approval.request_id] = _result(ended, name)
        if results:
            self.chat = replace(self.chat, messages=_filled(self.chat.messages, results))
        state = self.exchange.state
        models = state.models
        prepared = await models.prepare(self.chat)
        self.exchange.served_by(prepared.target)
        self.reply = reply = await models.open(self.chat, prepared)
        self.exchange.served(reply)
        self.changes = reply.prepared.changes
        first = reply.first
        if isinstance(first, ResponseStart):
            tokens = first.input_tokens
            if tokens is None and self.announce:
                tokens = await self.exchange.estimate_prompt(self.chat)
            first = replace(first, model=self.chat.model, input_tokens=tokens)
        else:
            first = ResponseStart(new_id("resp_"), self.chat.model, time.time())
        self.first = first
        return first

    async def aclose(self) -> None:
        """End the round in progress and disconnect the servers the request connected
        (``events`` does once it has ended; this is for an answer cut before)."""
        try:
            if self.reply is not None:
                await self.reply.rest.aclose()
        finally:
            await self._connections.aclose()

    # -- the rounds ----------------------------------------------------------------------

    async def events(self) -> AsyncIterator[HostedEvent]:
        """The answer (module docstring); ``open`` has run."""
        assert self.first is not None and self.reply is not None
        yield self.first
        for item in self.items:
            yield item
        exchange, reply, round_ = self.exchange, self.reply, 1
        total = Usage()
        rounds = self.exchange.state.config.mcp.max_tool_rounds
        while True:
            played = _Round(self)
            try:
                async for event in played.play(exchange, reply):
                    yield event
            finally:
                if exchange is not self.exchange:
                    settled = played.end is not None or played.error is not None
                    with anyio.CancelScope(shield=True):
                        await exchange.finish(None if settled else 499)
            if played.error is not None:
                return
            total = total.plus(played.usage)
            end = played.end
            assert end is not None
            asked = False
            results: list[ToolResultPart] = []
            for call in played.calls:
                offered = self._offered(call.name)
                if offered is None:
                    continue
                if offered.use.needs_approval(offered.tool):
                    asked = True
                    yield McpApprovalAsked(call.id, offered.use.label, offered.tool, _text(call))
                    continue
                started = McpCallStarted(call.id, offered.use.label, offered.tool, _text(call))
                yield started
                ended = await self._run(offered.use, offered.tool, call)
                yield ended
                results.append(_result(ended, call.name))
            stop = end.stop_reason
            if not results or asked or played.client_calls:
                if asked and not played.client_calls:
                    stop = StopReason.END_TURN
                yield ResponseEnd(stop, total, end.timings, end.stop_sequence)
                return
            if round_ >= rounds:
                yield McpRoundsSpent(round_)
                yield ResponseEnd(StopReason.MAX_TOKENS, total, end.timings)
                return
            round_ += 1
            messages = [Message("assistant", tuple(played.parts))]
            messages += [Message("tool", (result,)) for result in results]
            self.chat = replace(
                self.chat,
                messages=(*self.chat.messages, *messages),
                tool_choice=_after_first(self.chat.tool_choice),
            )
            exchange = self._round_exchange(round_)
            try:
                reply = await self._open_round(exchange)
            except LLMBridgeError as exc:
                exchange.failed(exc)
                await exchange.finish()
                self.exchange.failed(exc)
                yield StreamError(exc)
                return

    def _round_exchange(self, round_: int) -> Exchange:
        route = self.exchange
        exchange = Exchange(
            route.state,
            route.scope,
            endpoint=route.endpoint,
            dialect=route.dialect,
            request_id=f"{route.request_id}-r{round_}",
        )
        exchange.asked(self.chat.model, streamed=self.chat.stream, chat=self.chat)
        exchange.admitted_within()
        return exchange

    async def _open_round(self, exchange: Exchange) -> Reply:
        models = self.exchange.state.models
        prepared = await models.prepare(self.chat)
        exchange.served_by(prepared.target)
        reply = await models.open(self.chat, prepared)
        exchange.served(reply)
        return reply

    def _offered(self, name: str) -> _Offered | None:
        """The MCP tool the model called by ``name``: one offered, or one of a hosted
        server that was not (the call is refused on the one path, and recorded)."""
        offered = self.offered.get(name)
        if offered is not None:
            return offered
        server, separator, tool = name.partition(TOOL_SEPARATOR)
        use = self.uses.get(server)
        return _Offered(use, tool) if separator and use is not None and tool else None

    async def _run(self, use: McpServerUse, tool: str, call: ToolCallPart) -> McpCallEnded:
        """Call ``tool`` of ``use``'s server through ``McpGateway.call_tool``."""
        arguments = _text(call)
        ended = McpCallEnded(call.id, use.label, tool, arguments)
        if not use.allows(tool):
            return replace(
                ended, error=f"{tool!r} is not in the request's allowed_tools", error_status=403
            )
        try:
            result = await self.mcp.call_tool(
                use.label,
                tool,
                call.arguments,
                scope=self.scope,
                endpoint=self.exchange.endpoint,
                within_request=True,
                upstream=self.connected.get(use.label),
            )
        except LLMBridgeError as exc:
            return replace(ended, error=exc.message, error_status=exc.status_code)
        except MCPError as exc:
            status = 400 if exc.code == types.INVALID_PARAMS else 502
            return replace(ended, error=str(exc), error_status=status)
        text = result_text(result)
        if result.is_error:
            return replace(ended, error=text)
        return replace(ended, output=text)


class _Round:
    """One round's events passed on, its MCP calls held back."""

    def __init__(self, loop: McpLoop) -> None:
        self.loop = loop
        self.parts: list[Part] = []
        self.calls: list[ToolCallPart] = []
        self.client_calls = False
        self.usage = Usage()
        self.end: ResponseEnd | None = None
        self.error: LLMBridgeError | None = None
        """What the round failed with (its ``StreamError``, passed on)."""

    async def play(self, exchange: Exchange, reply: Reply) -> AsyncIterator[StreamEvent]:
        hidden = False
        async with contextlib.aclosing(exchange.watch(reply.first, reply.rest)) as events:
            async for event in events:
                if isinstance(event, ResponseStart):
                    if event.input_tokens is not None:
                        self.usage = self.usage.merged(Usage(input_tokens=event.input_tokens))
                elif isinstance(event, PartStart):
                    part = event.part
                    hidden = isinstance(part, ToolCallPart) and self._is_mcp(part.name)
                    if not hidden:
                        yield event
                elif isinstance(event, PartDelta):
                    if not hidden:
                        yield event
                elif isinstance(event, PartEnd):
                    self.parts.append(event.part)
                    if hidden:
                        assert isinstance(event.part, ToolCallPart)
                        self.calls.append(event.part)
                        hidden = False
                        continue
                    self.client_calls |= isinstance(event.part, ToolCallPart)
                    yield event
                elif isinstance(event, UsageUpdate):
                    self.usage = self.usage.merged(event.usage)
                elif isinstance(event, ResponseEnd):
                    self.usage = self.usage.merged(event.usage)
                    self.end = event
                    return
                elif isinstance(event, StreamError):
                    # The client's request fails with its round (its row says so), noted
                    # before the error is passed on: the encoder stops reading after it.
                    self.error = event.error
                    self.loop.exchange.failed(event.error)
                    yield event
                    return

    def _is_mcp(self, name: str) -> bool:
        return self.loop._offered(name) is not None


def _after_first(choice: ToolChoice | None) -> ToolChoice | None:
    """A choice that forces a call (``required``, a named tool) holds for the first
    round: forced every round, the model could never answer."""
    if choice is not None and choice.mode in ("any", "tool"):
        return ToolChoice("auto", disable_parallel=choice.disable_parallel)
    return choice


def _tool_listing(tool: types.Tool) -> dict[str, object]:
    listed: dict[str, object] = {
        "name": tool.name,
        "input_schema": tool.input_schema,
        "description": tool.description,
    }
    if tool.annotations is not None:
        listed["annotations"] = tool.annotations.model_dump(mode="json", exclude_none=True)
    return listed


def _text(call: ToolCallPart) -> str:
    if call.raw_arguments is not None:
        return call.raw_arguments
    return orjson.dumps(call.arguments).decode()


def _arguments(text: str) -> dict[str, object]:
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _result(ended: McpCallEnded, name: str) -> ToolResultPart:
    if ended.error is not None:
        return ToolResultPart(ended.item_id, ended.error, is_error=True, name=name)
    return ToolResultPart(ended.item_id, ended.output or "", name=name)


def _filled(
    messages: tuple[Message, ...], results: dict[str, ToolResultPart]
) -> tuple[Message, ...]:
    """``messages`` with the empty results of the answered approvals filled in."""
    filled = []
    for message in messages:
        parts = message.parts
        if message.role == "tool":
            parts = tuple(
                results.get(part.tool_call_id, part) if isinstance(part, ToolResultPart) else part
                for part in parts
            )
        filled.append(replace(message, parts=parts))
    return tuple(filled)
