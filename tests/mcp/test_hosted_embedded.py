"""MCP tools for the real embedded model: the gateway's zero configuration (the
embedded model, which has no tool calling of its own) with one MCP server, and a
Responses ``mcp`` tool whose ``tool_choice`` forces a call.

What a 135M model writes changes with the CPU and the llama.cpp build, so nothing
here depends on it. The tool emulation expresses a forcing ``tool_choice`` as an
instruction (features/tool_choice.py), which this model may not follow, so whether it
calls is its own: what holds on any CPU is that the server's tool is offered through
the emulation, that any call it makes is run on the server (a tool that takes no
arguments, so every call is the same call) with the server's answer, and that the
answer ends with the model's text."""

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
    # Two rounds of the model on a busy machine, one of them under the emulation's grammar.
    client = openai_client(served.url).with_options(timeout=scaled(900))
    raw = client.responses.with_raw_response.create(
        model="llama3.2",
        input="Call the pid tool: what is the process id of the tool server?",
        tools=[tool],
        tool_choice="required",
        max_output_tokens=48,
    )
    assert raw.headers["x-llmbridge-tools"] == "emulated"
    response = raw.parse()
    listed = response.output[0]
    assert listed.type == "mcp_list_tools" and [t.name for t in listed.tools] == ["pid"]
    calls = [item for item in response.output if item.type == "mcp_call"]
    for call in calls:
        assert call.name == "pid" and call.server_label == "box"
        assert call.error is None and call.output is not None and call.output.isdigit()
    assert response.output[-1].type == "message"
    assert response.usage is not None and response.usage.output_tokens > 0
