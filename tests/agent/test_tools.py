"""The tool registry (validation, failures as results, bounded parallelism) and web
search over Tavily (a mock transport: tests never leave the machine)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx
import pytest

from llmbridge.agent.runtime import default_tools
from llmbridge.agent.tools import (
    SEARCHING_ONLINE,
    SEED_SEARCH_NAME,
    SearchError,
    SearchNotConfiguredError,
    SearchResult,
    TavilySearch,
    Tool,
    ToolRegistry,
    UnknownToolError,
    web_search_tool,
)
from llmbridge.core.messages import ToolCallPart
from llmbridge.gateway.config import load_config

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


async def _echo(arguments: dict[str, Any]) -> str:
    return f"weather in {arguments['city']}: sunny"


def test_registration_checks_names_and_schemas() -> None:
    registry = ToolRegistry([Tool("weather", "Weather", CITY, _echo)])
    assert "weather" in registry and len(registry) == 1
    assert registry.definitions()[0].input_schema == CITY
    with pytest.raises(ValueError, match="already registered"):
        registry.register(Tool("weather", "again", CITY, _echo))
    with pytest.raises(ValueError, match="invalid schema"):
        registry.register(Tool("bad", "bad", {"type": "no-such-type"}, _echo))


async def test_a_tool_answers_to_its_aliases() -> None:
    # Seed 002 names the search tool tavily_search; ours is web_search, under both.
    class Fake:
        name = "fake"

        async def search(self, query: str, max_results: int) -> list[SearchResult]:
            return [SearchResult(f"About {query}", "https://x.example", "text")]

    registry = ToolRegistry([web_search_tool(Fake()), Tool("weather", "Weather", CITY, _echo)])
    assert SEED_SEARCH_NAME == "tavily_search"
    assert "tavily_search" in registry and registry.get("tavily_search") is registry.get(
        "web_search"
    )
    # Offered under its own name only.
    assert [d.name for d in registry.definitions()] == ["web_search", "weather"]
    by_alias = await registry.execute(ToolCallPart("1", "tavily_search", {"query": "cats"}))
    assert not by_alias.is_error and by_alias.name == "tavily_search"
    assert by_alias.content.startswith('Search results for "cats":')

    chosen = registry.only(["tavily_search"])
    assert [d.name for d in chosen.definitions()] == ["web_search"]
    assert "tavily_search" in chosen and "weather" not in chosen
    assert len(registry.only(["web_search", "tavily_search"])) == 1
    with pytest.raises(
        UnknownToolError, match=r"no tool 'nope' \(available: web_search, weather\)"
    ):
        registry.only(["weather", "nope"])
    with pytest.raises(ValueError, match="'tavily_search' is already registered"):
        registry.register(Tool("tavily_search", "a second search", CITY, _echo))
    with pytest.raises(ValueError, match="'weather' is already registered"):
        registry.register(Tool("forecast", "Forecast", CITY, _echo, aliases=("weather",)))


async def test_failures_become_error_results() -> None:
    async def broken(arguments: dict[str, Any]) -> str:
        raise RuntimeError("backend of the tool is down")

    async def slow(arguments: dict[str, Any]) -> str:
        await asyncio.sleep(5)
        return "late"

    registry = ToolRegistry(
        [
            Tool("weather", "Weather", CITY, _echo),
            Tool("broken", "Broken", {"type": "object"}, broken),
            Tool("slow", "Slow", {"type": "object"}, slow, timeout=0.05),
        ]
    )
    ok = await registry.execute(ToolCallPart("1", "weather", {"city": "Paris"}))
    assert (ok.content, ok.is_error, ok.name) == ("weather in Paris: sunny", False, "weather")
    unknown = await registry.execute(ToolCallPart("2", "nope"))
    assert unknown.is_error and "unknown tool 'nope'" in unknown.content
    invalid = await registry.execute(ToolCallPart("3", "weather", {"city": 3}))
    assert invalid.is_error and "invalid arguments (city)" in invalid.content
    missing = await registry.execute(ToolCallPart("4", "weather", {}))
    assert missing.is_error and "'city' is a required property" in missing.content
    raw = await registry.execute(ToolCallPart("5", "weather", raw_arguments="{city"))
    assert raw.is_error and "not a JSON object" in raw.content
    failed = await registry.execute(ToolCallPart("6", "broken"))
    assert failed.content == "Error: RuntimeError: backend of the tool is down"
    late = await registry.execute(ToolCallPart("7", "slow"))
    assert late.is_error and "did not finish within 0.05 s" in late.content


async def test_a_round_runs_in_parallel_within_the_bound() -> None:
    running = 0
    peak = 0

    async def work(arguments: dict[str, Any]) -> str:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        return str(arguments["n"])

    registry = ToolRegistry([Tool("work", "Work", {"type": "object"}, work)], max_parallel=3)
    calls = [ToolCallPart(str(n), "work", {"n": n}) for n in range(7)]
    results = await registry.execute_all(calls)
    assert [r.content for r in results] == [str(n) for n in range(7)]
    assert [r.tool_call_id for r in results] == [str(n) for n in range(7)]
    assert peak == 3


# -- web search ------------------------------------------------------------------------


def _tavily(handler: Any) -> TavilySearch:
    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    return TavilySearch("tvly-test", base_url="http://tavily.invalid", client=client)


async def test_tavily_request_and_results() -> None:
    seen: list[httpx.Request] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(request)
        return httpx.Response(
            200,
            json={
                "query": "q",
                "results": [
                    {"title": "A", "url": "https://a.example", "content": "alpha", "score": 0.9},
                    {"title": "B", "url": "https://b.example", "content": "beta"},
                ],
            },
        )

    results = await _tavily(handler).search("bitcoin price", 2)
    assert results == [
        SearchResult("A", "https://a.example", "alpha", 0.9),
        SearchResult("B", "https://b.example", "beta", None),
    ]
    (request,) = seen
    assert request.url == "http://tavily.invalid/search"
    assert request.headers["authorization"] == "Bearer tvly-test"
    assert json.loads(request.content) == {
        "query": "bitcoin price",
        "max_results": 2,
        "search_depth": "basic",
    }


async def test_tavily_failures_are_search_errors() -> None:
    refused = _tavily(lambda r: httpx.Response(401, json={"detail": "bad key"}))
    with pytest.raises(SearchError, match="Tavily answered 401"):
        await refused.search("q", 3)
    malformed = _tavily(lambda r: httpx.Response(200, json={"nothing": []}))
    with pytest.raises(SearchError, match="without results"):
        await malformed.search("q", 3)

    def unreachable(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("no route", request=request)

    with pytest.raises(SearchError, match="could not be reached"):
        await _tavily(unreachable).search("q", 3)


async def test_web_search_without_a_key_is_a_clear_error() -> None:
    with pytest.raises(SearchNotConfiguredError, match="set TAVILY_API_KEY"):
        TavilySearch("")
    registry = ToolRegistry([web_search_tool()])
    result = await registry.execute(ToolCallPart("1", "web_search", {"query": "news"}))
    assert result.is_error
    assert "web_search is not configured: set TAVILY_API_KEY" in result.content


def test_the_tavily_key_comes_from_the_environment_through_the_reader() -> None:
    # gateway.config.load_config is the one place the environment is read.
    config = load_config(None, environ={"TAVILY_API_KEY": " tvly-from-env "})
    assert config.agent.tavily_api_key == "tvly-from-env"
    assert "web_search" in default_tools(config.agent)
    assert load_config(None, environ={}).agent.tavily_api_key is None
    assert len(default_tools(load_config(None, environ={}).agent)) == 0


async def test_web_search_with_a_pluggable_provider() -> None:
    class Fake:
        name = "fake"

        async def search(self, query: str, max_results: int) -> list[SearchResult]:
            return [SearchResult(f"About {query}", "https://x.example", "  text  ")][:max_results]

    tool = web_search_tool(Fake())
    assert tool.marker == SEARCHING_ONLINE
    registry = ToolRegistry([tool])
    result = await registry.execute(ToolCallPart("1", "web_search", {"query": "cats"}))
    assert result.content == (
        'Search results for "cats":\n1. About cats (https://x.example)\n   text'
    )
    empty = await ToolRegistry([web_search_tool(Fake(), max_results=0)]).execute(
        ToolCallPart("2", "web_search", {"query": "dogs"})
    )
    assert empty.content == 'No search results for "dogs".'
