"""The agent's tools through its HTTP API (``/agent/...``), against a real gateway on a
loopback port over scripted backends: tools on a backend without native tool calling
(emulated), streamed and not, and the search tool under the seed's name
(``tavily_search``) as a persona's prompt and a client name it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest

from llmbridge.agent.tools import (
    SEARCHING_ONLINE,
    SearchResult,
    Tool,
    ToolRegistry,
    web_search_tool,
)
from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.agent.serving import agent_gateway, error_of, messages_of, session_of, sse_events

CITY = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


@pytest.fixture
def db(tmp_path: Path) -> str:
    return str(tmp_path / "agent.db")


# -- tools on a model without them -------------------------------------------------------


@pytest.mark.parametrize("stream", [False, True])
async def test_tools_work_on_a_backend_without_native_tools(db: str, stream: bool) -> None:
    native = ScriptedBackend("native")
    plain = ScriptedBackend("plain", capabilities=frozenset({"completion"}))

    async def weather(arguments: dict[str, Any]) -> str:
        return f"{arguments['city']}: 21 C"

    tools = ToolRegistry([Tool("get_weather", "Weather by city", CITY, weather)])
    plain.enqueue(
        Script(
            text=[
                '{"action": "tool_call", "tool_name": "get_weather", '
                '"arguments": {"city": "Paris"}}'
            ]
        ),
        Script(text=['{"action": "answer", "content": "21 C in Paris."}']),
    )
    routes = ({"name": "toolless", "backend": "plain"},)
    with agent_gateway(db, {"native": native, "plain": plain}, tools=tools, routes=routes) as srv:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            session_id = await session_of(client)
            response = await client.post(
                f"/agent/sessions/{session_id}/messages",
                json={"input": "Weather in Paris?", "model": "toolless", "stream": stream},
            )
            assert response.status_code == 200, response.text
            stored = await messages_of(client, session_id)
    if stream:
        events = sse_events(response.text)
        names = [name for name, _ in events]
        assert names[0] == "start" and names[-1] == "done"
        assert ("tool_call", "get_weather") in [(n, d.get("name")) for n, d in events]
        result = next(d for n, d in events if n == "tool_result")
        assert result["content"] == "Paris: 21 C" and result["is_error"] is False
        assert events[-1][1]["reply"] == "21 C in Paris."
    else:
        body = response.json()
        assert body["reply"] == "21 C in Paris." and body["rounds"] == 2
        assert [c["name"] for c in body["tool_calls"]] == ["get_weather"]
        assert [r["content"] for r in body["tool_results"]] == ["Paris: 21 C"]
    assert len(plain.requests) == 2 and native.requests == []
    assert all(r.tools == () for r in plain.requests)  # the tools went into the prompt
    assert stored[-1]["content"] == "21 C in Paris."
    assert stored[-1]["tool_data"]["results"][0]["content"] == "Paris: 21 C"


async def test_the_seeds_search_name_reaches_web_search(db: str) -> None:
    """Seed 002 calls the search tool ``tavily_search``: a persona written for it (its
    prompt names that tool) and a client choosing the tool by that name both get
    ``web_search``."""

    class Prices:
        name = "prices"

        async def search(self, query: str, max_results: int) -> list[SearchResult]:
            return [SearchResult("Price", "https://p.example", "43,250 USD")]

    async def weather(arguments: dict[str, Any]) -> str:
        return f"{arguments['city']}: 21 C"

    tools = ToolRegistry(
        [web_search_tool(Prices()), Tool("get_weather", "Weather by city", CITY, weather)]
    )
    backend = ScriptedBackend("scripted")
    # What a model reading that persona calls: the seed's name.
    backend.enqueue(
        Script(text=[], tool_calls=[("tavily_search", {"query": "bitcoin price"})]),
        Script(text=["It is $43,250."]),
    )
    with agent_gateway(db, {"scripted": backend}, tools=tools) as srv:
        async with httpx.AsyncClient(base_url=srv.url, timeout=30) as client:
            persona = await client.post(
                "/agent/personas",
                json={"name": "Kalito", "prompt": "Call tavily_search for anything current."},
            )
            session_id = await session_of(client, persona_id=persona.json()["id"])
            messages = f"/agent/sessions/{session_id}/messages"
            response = await client.post(
                messages, json={"input": "Bitcoin price?", "tools": ["tavily_search"]}
            )
            refused = await client.post(
                messages, json={"input": "Again?", "tools": ["tavily_search", "no_such_tool"]}
            )
            stored = await messages_of(client, session_id)
    body = response.json()
    assert body["reply"] == f"{SEARCHING_ONLINE}\n\nIt is $43,250."
    assert [c["name"] for c in body["tool_calls"]] == ["tavily_search"]
    (result,) = body["tool_results"]
    assert result["is_error"] is False
    assert (
        result["content"]
        == 'Search results for "bitcoin price":\n1. Price (https://p.example)\n   43,250 USD'
    )
    # The client named one tool: only it was offered, under its own name.
    assert [t.name for t in backend.requests[0].tools] == ["web_search"]
    error = error_of(refused, 400)
    assert error["param"] == "tools" and "'no_such_tool'" in error["message"]
    assert "'tavily_search'" not in error["message"]  # the alias was known
    assert len(stored) == 2  # the refused turn stored nothing
