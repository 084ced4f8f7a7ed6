"""MCP tools for the real embedded model: the gateway's zero configuration (the
embedded model, which has no tool calling of its own) with one MCP server, and a
Responses ``mcp`` tool whose ``tool_choice`` forces a call.

What a 135M model writes changes with the CPU and the llama.cpp build, so nothing
here depends on it: the tool emulation makes the forced call, the gateway runs it on
the MCP server (a tool that takes no arguments, so any call the model writes is the
same call), and the answer ends with the model's text after the call's item."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import load_config
from llmbridge.serving.build import build_backends
from tests.conftest import RunningServer, openai_client
from tests.mcp.conftest import stdio_toolbox
from tests.waiting import scaled

pytestmark = pytest.mark.embedded


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    path: Path = tmp_path_factory.mktemp("hosted-embedded") / "llmbridge.yaml"
    mcp = {
        "servers": {"box": stdio_toolbox()},
        "start_wait_s": scaled(60),
        "connect_timeout_s": scaled(60),
        "max_tool_rounds": 2,
    }
    path.write_text(yaml.safe_dump({"mcp": mcp}), encoding="utf-8")
    config = load_config(path)
    backends = build_backends(config, config.server.serving_host())
    with RunningServer(create_app(config, backends=backends)) as server:
        yield server


def test_a_forced_call_runs_on_the_server_and_the_model_answers(
    served: RunningServer,
) -> None:
    tool = {
        "type": "mcp",
        "server_label": "box",
        "allowed_tools": ["pid"],
        "require_approval": "never",
    }
    response = openai_client(served.url).responses.create(
        model="llama3.2",
        input="What is the process id of the tool server?",
        tools=[tool],  # type: ignore[list-item]
        tool_choice="required",
        max_output_tokens=48,
    )
    kinds = [item.type for item in response.output]
    assert kinds[:2] == ["mcp_list_tools", "mcp_call"]
    call = response.output[1]
    assert call.type == "mcp_call" and call.name == "pid" and call.server_label == "box"
    assert call.error is None and call.output is not None and call.output.isdigit()
    assert kinds[-1] == "message"
    assert response.usage is not None and response.usage.output_tokens > 0
