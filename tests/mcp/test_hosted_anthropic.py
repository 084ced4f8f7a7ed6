"""MCP tools for any model through the Anthropic MCP connector: the official
``anthropic`` client's beta Messages API with ``mcp_servers`` (the
``mcp-client-2025-04-04`` form, and ``mcp-client-2025-11-20``'s ``mcp_toolset``) naming
a configured server, a scripted model calling its tool, and the answer's
``mcp_tool_use`` and ``mcp_tool_result`` blocks, streamed and not."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ToolResultPart
from tests.conftest import RunningServer, anthropic_client, create_key
from tests.mcp.conftest import MASTER, mcp_gateway, stdio_toolbox

OLD_BETA = "mcp-client-2025-04-04"
NEW_BETA = "mcp-client-2025-11-20"


@pytest.fixture(scope="module")
def scripted() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",))


@pytest.fixture(scope="module")
def gateway(
    tmp_path_factory: pytest.TempPathFactory, scripted: ScriptedBackend
) -> Iterator[RunningServer]:
    database: Path = tmp_path_factory.mktemp("hosted-anthropic") / "gateway.db"
    servers = {"box": stdio_toolbox()}
    with mcp_gateway(database, servers, backend=scripted, max_tool_rounds=2) as server:
        yield server


@pytest.fixture(scope="module")
def key(gateway: RunningServer) -> str:
    return create_key(gateway.url, MASTER, "hosted-anthropic")


def _server(gateway: RunningServer, **more: Any) -> dict[str, Any]:
    # The gateway's own endpoint of the configured server: no mcp.allowed_urls needed.
    return {"type": "url", "url": f"{gateway.url}/mcp/box", "name": "box", **more}


def _results(scripted: ScriptedBackend) -> list[ToolResultPart]:
    last = scripted.requests[-1]
    return [p for m in last.messages for p in m.parts if isinstance(p, ToolResultPart)]


def _enqueue(scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["Let me add."], tool_calls=[("box__add", {"a": 20, "b": 22})]))
    scripted.enqueue(Script(text=["It is 42."]))


def test_the_connector_not_streamed(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    _enqueue(scripted)
    client = anthropic_client(gateway.url, key)
    message = client.beta.messages.create(
        model="scripted",
        max_tokens=100,
        messages=[{"role": "user", "content": "20+22?"}],
        mcp_servers=[_server(gateway, tool_configuration={"allowed_tools": ["add"]})],
        betas=[OLD_BETA],
    )
    kinds = [block.type for block in message.content]
    assert kinds == ["text", "mcp_tool_use", "mcp_tool_result", "text"]
    use, result = message.content[1], message.content[2]
    assert use.type == "mcp_tool_use" and use.name == "add" and use.server_name == "box"
    assert use.input == {"a": 20, "b": 22}
    assert result.type == "mcp_tool_result" and result.tool_use_id == use.id
    assert not result.is_error
    assert [block.text for block in result.content] == ["42"]
    assert message.stop_reason == "end_turn"
    assert [tool.name for tool in scripted.requests[-2].tools] == ["box__add"]
    assert [r.content for r in _results(scripted)] == ["42"]
    # The answer sent back as the next turn's history: the model sees the call again.
    scripted.enqueue(Script(text=["Yes."]))
    client.beta.messages.create(
        model="scripted",
        max_tokens=100,
        messages=[
            {"role": "user", "content": "20+22?"},
            {"role": "assistant", "content": [b.model_dump() for b in message.content]},
            {"role": "user", "content": "sure?"},
        ],
        mcp_servers=[_server(gateway)],
        betas=[OLD_BETA],
    )
    assert [r.content for r in _results(scripted)] == ["42"]


def test_the_connector_streamed(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    _enqueue(scripted)
    client = anthropic_client(gateway.url, key)
    with client.beta.messages.stream(
        model="scripted",
        max_tokens=100,
        messages=[{"role": "user", "content": "20+22?"}],
        mcp_servers=[_server(gateway)],
        betas=[OLD_BETA],
    ) as stream:
        starts = [e.content_block.type for e in stream if e.type == "content_block_start"]
        message = stream.get_final_message()
    assert starts == ["text", "mcp_tool_use", "mcp_tool_result", "text"]
    assert [block.type for block in message.content] == starts
    use = message.content[1]
    assert use.type == "mcp_tool_use" and use.input == {"a": 20, "b": 22}
    assert message.content[3].text == "It is 42."


def test_the_toolset_form(gateway: RunningServer, key: str, scripted: ScriptedBackend) -> None:
    _enqueue(scripted)
    message = anthropic_client(gateway.url, key).beta.messages.create(
        model="scripted",
        max_tokens=100,
        messages=[{"role": "user", "content": "20+22?"}],
        mcp_servers=[_server(gateway)],
        tools=[
            {
                "type": "mcp_toolset",
                "mcp_server_name": "box",
                "default_config": {"enabled": False},
                "configs": {"add": {"enabled": True}, "echo": {"enabled": True}},
            }
        ],
        betas=[NEW_BETA],
    )
    assert [tool.name for tool in scripted.requests[-2].tools] == ["box__echo", "box__add"]
    assert [block.type for block in message.content][1:3] == ["mcp_tool_use", "mcp_tool_result"]


def test_rounds_spent_is_pause_turn(
    gateway: RunningServer, key: str, scripted: ScriptedBackend
) -> None:
    for _ in range(2):  # mcp.max_tool_rounds: 2
        scripted.enqueue(Script(text=[], tool_calls=[("box__echo", {"text": "again"})]))
    message = anthropic_client(gateway.url, key).beta.messages.create(
        model="scripted",
        max_tokens=100,
        messages=[{"role": "user", "content": "loop"}],
        mcp_servers=[_server(gateway)],
        betas=[OLD_BETA],
    )
    assert message.stop_reason == "pause_turn"
    assert [block.type for block in message.content].count("mcp_tool_result") == 2


def test_another_url_is_refused(gateway: RunningServer, key: str) -> None:
    with pytest.raises(anthropic.BadRequestError) as refused:
        anthropic_client(gateway.url, key).beta.messages.create(
            model="scripted",
            max_tokens=100,
            messages=[{"role": "user", "content": "x"}],
            mcp_servers=[{"type": "url", "url": "http://10.0.0.1/mcp", "name": "box"}],
            betas=[OLD_BETA],
        )
    assert "mcp.allowed_urls" in str(refused.value)
    assert refused.value.status_code == 400
