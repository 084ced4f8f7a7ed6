"""Agent tools: a registry of JSON-schema tools, their execution, and web search.

``ToolRegistry`` holds ``Tool`` values (a name, a description, a JSON Schema for the
arguments, an async handler). ``execute_all`` runs one round's calls in parallel,
at most ``max_parallel`` at a time (unbounded fan-out is a reported failure mode of
other agent loops: one turn, hundreds of concurrent calls) and each within its
timeout. A call never raises: an unknown tool, arguments that do not match the
schema, a handler's exception or a timeout become an error result the model reads,
so the loop can go on and the model can say what went wrong (a handler that raises
``ToolError`` gives the model its message as it is). ``extended`` adds a turn's own
tools (its MCP tools: agent/mcp_tools.py) to a copy, and a ``ToolFallback`` runs the
calls of names the registry has not but the fallback claims (an MCP tool the turn did
not offer, whose call the MCP gateway refuses on the key's permission).

``web_search`` is built in, over a pluggable ``SearchProvider``; it also answers to
seed 002's name for it, ``tavily_search`` (``Tool.aliases``), so a persona written for
the seed, whose prompt tells the model to call ``tavily_search``, and a client that
names the tool so still reach it. The default provider is Tavily, with the key the
configuration holds (``agent.tavily_api_key``, read from ``TAVILY_API_KEY`` by
gateway/config.py); without one, ``TavilySearch`` raises
``SearchNotConfiguredError`` saying how to configure it, and a ``web_search_tool()``
without a provider or key returns that message as the tool's error result. Running
it shows the seed's ``[SEARCHING_ONLINE]`` marker to the user.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, runtime_checkable

import httpx
import jsonschema
from jsonschema import Draft202012Validator
from referencing import Registry

from llmbridge.core.messages import ToolCallPart, ToolDefinition, ToolResultPart

__all__ = [
    "SEARCHING_ONLINE",
    "SEED_SEARCH_NAME",
    "TAVILY_API_KEY_ENV",
    "SearchError",
    "SearchNotConfiguredError",
    "SearchProvider",
    "SearchResult",
    "TavilySearch",
    "Tool",
    "ToolError",
    "ToolFallback",
    "ToolRegistry",
    "UnknownToolError",
    "web_search_tool",
]

log = logging.getLogger("llmbridge.agent")

SEARCHING_ONLINE = "[SEARCHING_ONLINE]"
"""The seed's marker, shown to the user before a web search runs."""
TAVILY_API_KEY_ENV = "TAVILY_API_KEY"
SEED_SEARCH_NAME = "tavily_search"
"""Seed 002's name for the search tool, which ``web_search`` answers to as well."""

ToolHandler = Callable[[dict[str, Any]], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class Tool:
    """A tool the agent can offer and run."""

    name: str
    description: str
    parameters: dict[str, Any]
    """JSON Schema of the arguments object."""
    handler: ToolHandler
    marker: str | None = None
    """Text shown to the user (once per turn) when the tool runs."""
    timeout: float = 30.0
    aliases: tuple[str, ...] = ()
    """Other names the tool answers to: a call, or a client choosing tools, may use
    them. It is offered to the model under ``name`` only."""

    def definition(self) -> ToolDefinition:
        return ToolDefinition(self.name, self.description, self.parameters)


class UnknownToolError(ValueError):
    """Tools named that are not in the registry (by name or alias)."""


class ToolError(Exception):
    """A tool's own failure, raised by its handler: the model reads the message as it
    is (other exceptions are shown with their type's name)."""


@runtime_checkable
class ToolFallback(Protocol):
    """Runs the calls of tool names a registry does not have but this claims."""

    def claims(self, name: str) -> bool:
        """Whether a call to ``name`` is this fallback's to run."""
        ...

    async def run(self, call: ToolCallPart) -> ToolResultPart:
        """The call's result; every failure an error result, never an exception."""
        ...


@dataclass(slots=True)
class _Entry:
    tool: Tool
    validator: Draft202012Validator = field(repr=False)


class ToolRegistry:
    """Named tools and their execution (module docstring)."""

    def __init__(
        self,
        tools: Sequence[Tool] = (),
        *,
        max_parallel: int = 8,
        fallback: ToolFallback | None = None,
    ) -> None:
        self._tools: dict[str, _Entry] = {}
        self._aliases: dict[str, str] = {}
        """Alias -> the name of the tool that answers to it."""
        self.max_parallel = max_parallel
        self.fallback = fallback
        """What runs a call to a name this registry has not (module docstring)."""
        for tool in tools:
            self.register(tool)

    def register(self, tool: Tool) -> None:
        """Add ``tool``. Raises ``ValueError`` for a name or alias already taken (by a
        tool's name or alias) or an invalid schema."""
        for name in (tool.name, *tool.aliases):
            if name in self:
                raise ValueError(f"a tool named {name!r} is already registered")
        try:
            Draft202012Validator.check_schema(tool.parameters)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"tool {tool.name!r} has an invalid schema: {exc.message}") from exc
        # An empty registry: a schema's $ref can never make the agent fetch a URL.
        validator = Draft202012Validator(tool.parameters, registry=Registry())
        self._tools[tool.name] = _Entry(tool, validator)
        self._aliases.update((alias, tool.name) for alias in tool.aliases if alias != tool.name)

    def _entry(self, name: str) -> _Entry | None:
        return self._tools.get(self._aliases.get(name, name))

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self._entry(name) is not None

    def __len__(self) -> int:
        return len(self._tools)

    def get(self, name: str) -> Tool | None:
        """The tool called ``name`` or answering to it as an alias."""
        entry = self._entry(name)
        return entry.tool if entry else None

    def only(self, names: Sequence[str]) -> ToolRegistry:
        """A registry of just the tools ``names`` names (names or aliases), in this
        registry's order. ``UnknownToolError`` names any it does not have."""
        unknown = [name for name in names if name not in self]
        if unknown:
            known = ", ".join(self._tools) or "none"
            missing = ", ".join(repr(name) for name in unknown)
            raise UnknownToolError(f"no tool {missing} (available: {known})")
        chosen = {self._aliases.get(name, name) for name in names}
        picked = ToolRegistry(max_parallel=self.max_parallel)
        for name, entry in self._tools.items():
            if name in chosen:
                picked._tools[name] = entry
                picked._aliases.update((a, name) for a in entry.tool.aliases if a != name)
        return picked

    def extended(
        self, tools: Sequence[Tool], *, fallback: ToolFallback | None = None
    ) -> ToolRegistry:
        """A copy of this registry with ``tools`` after its own, and ``fallback``
        (module docstring). A tool whose name is taken or whose schema is invalid is
        left out, logged: a turn's tools come from elsewhere (an MCP server), and one
        bad tool must not cost the turn the others."""
        copy = ToolRegistry(max_parallel=self.max_parallel, fallback=fallback or self.fallback)
        copy._tools = dict(self._tools)
        copy._aliases = dict(self._aliases)
        for tool in tools:
            try:
                copy.register(tool)
            except ValueError as exc:
                log.warning("the tool %r is not offered: %s", tool.name, exc)
        return copy

    def definitions(self) -> tuple[ToolDefinition, ...]:
        return tuple(entry.tool.definition() for entry in self._tools.values())

    async def execute(self, call: ToolCallPart) -> ToolResultPart:
        """Run one call (named by the tool's name or an alias); every failure is an
        error result, never an exception."""
        entry = self._entry(call.name)
        if entry is None and self.fallback is not None and self.fallback.claims(call.name):
            return await self.fallback.run(call)
        if entry is None:
            known = ", ".join(self._tools) or "none"
            return _error(call, f"unknown tool {call.name!r} (available: {known})")
        if call.raw_arguments is not None:
            return _error(call, f"the arguments are not a JSON object: {call.raw_arguments!r}")
        problems = sorted(entry.validator.iter_errors(call.arguments), key=lambda e: e.path)
        if problems:
            where = "/".join(map(str, problems[0].absolute_path)) or "arguments"
            return _error(call, f"invalid arguments ({where}): {problems[0].message}")
        try:
            async with asyncio.timeout(entry.tool.timeout):
                content = await entry.tool.handler(dict(call.arguments))
        except TimeoutError:
            return _error(call, f"the tool did not finish within {entry.tool.timeout:g} s")
        except ToolError as exc:
            return _error(call, str(exc))
        except Exception as exc:  # noqa: BLE001 - the model reads the failure
            return _error(call, f"{type(exc).__name__}: {exc}")
        return ToolResultPart(call.id, content, name=call.name)

    async def execute_all(self, calls: Sequence[ToolCallPart]) -> list[ToolResultPart]:
        """Run one round's calls in parallel (bounded); results in call order."""
        gate = asyncio.Semaphore(max(1, self.max_parallel))

        async def bounded(call: ToolCallPart) -> ToolResultPart:
            async with gate:
                return await self.execute(call)

        return list(await asyncio.gather(*(bounded(c) for c in calls)))


def _error(call: ToolCallPart, message: str) -> ToolResultPart:
    return ToolResultPart(call.id, f"Error: {message}", is_error=True, name=call.name)


# -- web search -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SearchResult:
    title: str
    url: str
    content: str
    score: float | None = None


class SearchError(RuntimeError):
    """A search provider failed (unreachable, refused, malformed reply)."""


class SearchNotConfiguredError(SearchError):
    """No search provider is configured."""


@runtime_checkable
class SearchProvider(Protocol):
    name: str

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        """Up to ``max_results`` results for ``query``, best first."""
        ...


NOT_CONFIGURED = (
    f"web_search is not configured: set {TAVILY_API_KEY_ENV} to a Tavily API key, "
    "or give the agent another SearchProvider"
)


class TavilySearch:
    """Tavily's search API (``POST /search``, bearer-token auth)."""

    name = "tavily"

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str = "https://api.tavily.com",
        client: httpx.AsyncClient | None = None,
        search_depth: str = "basic",
        timeout: float = 20.0,
    ) -> None:
        if not api_key:
            raise SearchNotConfiguredError(NOT_CONFIGURED)
        self.api_key = api_key
        self.base_url = base_url.rstrip("/")
        self.search_depth = search_depth
        self.timeout = timeout
        self._client = client

    async def search(self, query: str, max_results: int) -> list[SearchResult]:
        body = {"query": query, "max_results": max_results, "search_depth": self.search_depth}
        headers = {"Authorization": f"Bearer {self.api_key}"}
        url = f"{self.base_url}/search"
        try:
            if self._client is not None:
                response = await self._client.post(
                    url, json=body, headers=headers, timeout=self.timeout
                )
            else:
                async with httpx.AsyncClient(timeout=self.timeout) as client:
                    response = await client.post(url, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise SearchError(f"Tavily could not be reached: {exc}") from exc
        if response.status_code != 200:
            raise SearchError(f"Tavily answered {response.status_code}: {response.text[:300]}")
        try:
            payload = response.json()
            results = payload["results"]
            return [
                SearchResult(
                    str(item.get("title", "")),
                    str(item.get("url", "")),
                    str(item.get("content", "")),
                    item.get("score"),
                )
                for item in results[:max_results]
            ]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            raise SearchError(f"Tavily sent a reply without results: {exc}") from exc


WEB_SEARCH_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"query": {"type": "string", "minLength": 1, "description": "The search query"}},
    "required": ["query"],
    "additionalProperties": False,
}


def format_results(query: str, results: Sequence[SearchResult]) -> str:
    """Results as text for the model (the seed's ``Search results for "..."``)."""
    if not results:
        return f'No search results for "{query}".'
    lines = [f'Search results for "{query}":']
    for number, result in enumerate(results, 1):
        lines.append(f"{number}. {result.title} ({result.url})\n   {result.content.strip()}")
    return "\n".join(lines)


def web_search_tool(
    provider: SearchProvider | None = None,
    *,
    api_key: str | None = None,
    max_results: int = 5,
) -> Tool:
    """The built-in ``web_search`` tool over ``provider`` (default: Tavily with
    ``api_key``; without a key each call's result is the error saying how to set one),
    answering to seed 002's ``tavily_search`` too."""

    async def handler(arguments: dict[str, Any]) -> str:
        query = str(arguments["query"])
        chosen = provider if provider is not None else TavilySearch((api_key or "").strip())
        return format_results(query, await chosen.search(query, max_results))

    return Tool(
        name="web_search",
        description="Search the web for current information",
        parameters=WEB_SEARCH_SCHEMA,
        handler=handler,
        marker=SEARCHING_ONLINE,
        aliases=(SEED_SEARCH_NAME,),
    )
