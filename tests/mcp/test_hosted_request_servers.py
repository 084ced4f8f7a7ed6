"""MCP servers only a request names: an ``mcp`` tool's ``server_url`` (Responses) or a
connector's ``url`` (Anthropic) that ``mcp.allowed_urls`` allows is connected for that
request, with the headers and token the request gave (never the gateway's ``${VAR}``),
on a gateway that configures no server at all; its calls take the one path (the key's
``mcp_tools``, the ledger), a server that cannot be reached is a listing with an error,
and a name that cannot name a server is a 400."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.mcp.config import McpConfig
from llmbridge.mcp.endpoints import McpGateway
from llmbridge.mcp.results import result_text
from tests.conftest import RunningServer, anthropic_client, create_key, ledger_rows, openai_client
from tests.mcp.conftest import MASTER, TOOLBOX_TOOLS, mcp_gateway
from tests.waiting import scaled

CLOSED = "http://127.0.0.1:9/mcp"
"""An allowed URL nothing listens on (the discard port, refused on loopback)."""


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("request-servers") / "gateway.db"


@pytest.fixture(scope="module")
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(database: Path, scripted: ScriptedBackend, toolbox_url: str) -> Iterator[RunningServer]:
    with mcp_gateway(database, {}, backend=scripted, allowed_urls=[toolbox_url, CLOSED]) as server:
        yield server


def _web(url: str, **more: Any) -> dict[str, Any]:
    return {
        "type": "mcp",
        "server_label": "web",
        "server_url": url,
        "require_approval": "never",
    } | more


def _header_calls(scripted: ScriptedBackend, *names: str) -> None:
    calls = [("web__header", {"name": name}) for name in names]
    scripted.enqueue(Script(text=[], tool_calls=calls))
    scripted.enqueue(Script(text=["Done."]))


def test_a_responses_request_connects_its_server_with_its_headers(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path, toolbox_url: str
) -> None:
    key = create_key(gateway.url, MASTER, "request-server")
    _header_calls(scripted, "x-probe", "authorization", "x-home")
    tool = _web(
        toolbox_url,
        headers={"X-Probe": "p1", "X-Home": "${HOME}"},
        authorization="tok-1",
    )
    response = openai_client(gateway.url, key).responses.create(
        model="scripted", input="headers?", tools=[tool]
    )
    listed = response.output[0]
    assert listed.type == "mcp_list_tools" and listed.server_label == "web"
    assert sorted(t.name for t in listed.tools) == sorted(TOOLBOX_TOOLS)
    calls = [item for item in response.output if item.type == "mcp_call"]
    # The request's own values, sent as given: ${HOME} is not the gateway's variable.
    assert [c.output for c in calls] == ["p1", "Bearer tok-1", "${HOME}"]
    assert response.output_text == "Done."
    rows = ledger_rows(database, "request-server", 5)
    called = [row for row in rows if row["model"] == "mcp:web/header"]
    assert [row["status"] for row in called] == [200, 200, 200]


def test_the_anthropic_connector_connects_its_server_with_its_token(
    gateway: RunningServer, scripted: ScriptedBackend, toolbox_url: str
) -> None:
    key = create_key(gateway.url, MASTER, "request-server-anthropic")
    _header_calls(scripted, "authorization")
    server = {"type": "url", "url": toolbox_url, "name": "web", "authorization_token": "tok-2"}
    with anthropic_client(gateway.url, key).beta.messages.stream(
        model="scripted",
        max_tokens=100,
        messages=[{"role": "user", "content": "who am I?"}],
        mcp_servers=[server],
        betas=["mcp-client-2025-04-04"],
    ) as stream:
        message = stream.get_final_message()
    result = next(block for block in message.content if block.type == "mcp_tool_result")
    assert [block.text for block in result.content] == ["Bearer tok-2"]


def test_the_keys_mcp_tools_apply_to_a_request_server(
    gateway: RunningServer, scripted: ScriptedBackend, toolbox_url: str
) -> None:
    key = create_key(gateway.url, MASTER, "request-server-echo", mcp_tools=["web__echo"])
    scripted.enqueue(Script(text=["Nothing to call."]))
    response = openai_client(gateway.url, key).responses.create(
        model="scripted", input="x", tools=[_web(toolbox_url)]
    )
    assert [t.name for t in response.output[0].tools] == ["echo"]
    assert [tool.name for tool in scripted.requests[-1].tools] == ["web__echo"]


def test_a_server_that_cannot_be_reached_is_a_listing_with_an_error(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    key = create_key(gateway.url, MASTER, "request-server-closed")
    scripted.enqueue(Script(text=["No tools today."]))
    response = openai_client(gateway.url, key).responses.create(
        model="scripted", input="x", tools=[_web(CLOSED)]
    )
    listed = response.output[0]
    assert listed.type == "mcp_list_tools" and listed.tools == []
    assert "down" in str(listed.error)
    assert response.output_text == "No tools today."
    assert scripted.requests[-1].tools == ()


def test_a_label_that_cannot_name_a_server_is_a_400(
    gateway: RunningServer, toolbox_url: str
) -> None:
    key = create_key(gateway.url, MASTER, "request-server-label")
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(gateway.url, key).responses.create(
            model="scripted", input="x", tools=[_web(toolbox_url, server_label="a__b")]
        )
    assert refused.value.param == "tools.0"
    assert "'__'" in refused.value.message


def test_a_label_without_a_url_names_no_server_here(gateway: RunningServer) -> None:
    key = create_key(gateway.url, MASTER, "request-server-nourl")
    tool = {"type": "mcp", "server_label": "web", "require_approval": "never"}
    with pytest.raises(openai.BadRequestError) as refused:
        openai_client(gateway.url, key).responses.create(model="scripted", input="x", tools=[tool])
    assert "mcp.servers" in refused.value.message and "mcp.allowed_urls" in refused.value.message


async def test_a_request_server_is_connected_for_its_request_only(toolbox_url: str) -> None:
    mcp = McpGateway(McpConfig(allowed_urls=(toolbox_url,), connect_timeout_s=scaled(30)))
    async with mcp.request_server("web", toolbox_url, {"X-Probe": "p"}) as upstream:
        assert upstream.state == "up" and "web" not in mcp.upstreams
        result = await upstream.call_tool("header", {"name": "x-probe"})
        assert result_text(result) == "p"
    assert upstream.state == "stopped"
