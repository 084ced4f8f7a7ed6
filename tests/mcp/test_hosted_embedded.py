"""MCP tools for the real embedded model: the gateway's zero configuration (the
embedded model, which has no tool calling of its own) with one MCP server, and a
Responses ``mcp`` tool whose ``tool_choice`` forces a call.

What a 135M model writes changes with the CPU and the llama.cpp build, so nothing
here depends on its wording. What holds on any CPU: the tool emulation holds the
model's decision to a JSON schema (the embedded model's grammar), and a forcing
``tool_choice`` leaves that schema only the call (features/tool_emulation.py), so the
first round calls the server's one tool, which takes no arguments; the gateway runs it
on the server and feeds its answer back; in the next round a tool without arguments
whose result is in is no longer offered, so the model can only answer, with text."""

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
    assert len(calls) == 1, response.output
    call = calls[0]
    assert call.name == "pid" and call.server_label == "box"
    assert call.error is None and call.output is not None and call.output.isdigit()
    assert response.output[-1].type == "message"
    assert response.usage is not None and response.usage.output_tokens > 0
