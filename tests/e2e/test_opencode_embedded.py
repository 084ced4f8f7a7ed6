"""Home Assistant through OpenCode, with real generations: the official ``ollama``
client talks to the gateway, whose ``opencode`` backend drives the real OpenCode
server, whose model provider is the gateway's own embedded model (loopback only).

The conversation is Home Assistant's: a system prompt with the home's state, a
request, tools; then the tool's result and the answer. SmolLM2-135M decides, so the
test accepts either a tool call or a chat answer at the first step, as long as every
response is well-formed; what it pins down is the protocol, and that OpenCode never
acts on the machine. The OpenCode backend runs with its default deadlines, as the
documented zero-setup configuration does (docs/OPENCODE.md): OpenCode's first prompt
is evaluated on this CPU, which takes about a minute on a 2-core machine.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.embedded.backend import EmbeddedBackend
from llmbridge.backends.opencode import OpenCodeBackend
from tests.conftest import RunningServer, ollama_client
from tests.e2e.opencode import gateway_over_opencode
from tests.e2e.test_opencode import TOOLS

pytestmark = pytest.mark.embedded

SYSTEM = (
    "You are a voice assistant for Home Assistant. Answer questions about the world "
    "truthfully. Answer in plain text. Keep it simple and to the point.\n"
    "Static Context: An overview of the areas and the devices in this smart home:\n"
    "- names: Kitchen light\n  domain: light\n  state: 'off'\n  areas: Kitchen"
)


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[RunningServer, OpenCodeBackend]]:
    with gateway_over_opencode(
        {"embedded": EmbeddedBackend("embedded")},
        {"smollm2": {"context": 8192, "output": 256}},
        default_model="gw/smollm2",
        routes=[{"name": "smollm2", "backend": "embedded"}],
        # No prompt_timeout or idle_timeout: docs/OPENCODE.md's zero-setup configuration
        # answers with the defaults, which are longer for a model on the gateway itself.
        # Repeatable decisions from the small model: OpenCode samples per its agent.
        opencode_config={"agent": {"llmbridge": {"temperature": 0}}},
    ) as pair:
        yield pair


def _calls(message: Any) -> list[tuple[str, dict[str, Any]]]:
    return [(c.function.name, dict(c.function.arguments)) for c in message.tool_calls or []]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_home_assistant_conversation_with_tools(
    stack: tuple[RunningServer, OpenCodeBackend], stream: bool
) -> None:
    gateway, opencode = stack
    client = ollama_client(gateway.url, timeout=600)
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": "Turn on the kitchen light"},
    ]

    def ask() -> tuple[str, list[tuple[str, dict[str, Any]]], str | None]:
        if not stream:
            reply = client.chat(model="homeassistant", messages=messages, tools=TOOLS)
            assert reply.done and reply.model == "homeassistant"
            return reply.message.content or "", _calls(reply.message), reply.done_reason
        parts = list(
            client.chat(model="homeassistant", messages=messages, tools=TOOLS, stream=True)
        )
        assert parts[-1].done and all(not p.done for p in parts[:-1])
        assert all(p.model == "homeassistant" for p in parts)
        text = "".join(p.message.content or "" for p in parts)
        calls = [c for p in parts for c in _calls(p.message)]
        return text, calls, parts[-1].done_reason

    text, calls, reason = ask()
    assert reason == "stop"
    assert bool(text.strip()) != bool(calls)  # a tool call or an answer, never both or none
    offered = {t["function"]["name"] for t in TOOLS} | {"unknown"}
    assert all(name in offered for name, _ in calls)
    if calls:
        messages.append(
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [{"function": {"name": n, "arguments": a}} for n, a in calls],
            }
        )
        messages.append(
            {
                "role": "tool",
                "content": '{"success": true, "state": "on"}',
                "tool_name": calls[0][0],
            }
        )
        text, calls, reason = ask()
        assert reason == "stop"
        assert text.strip() or calls
    assert opencode.server.restarts == 0


def test_a_request_to_run_a_shell_command_or_write_a_file_does_nothing(
    stack: tuple[RunningServer, OpenCodeBackend], tmp_path: Path
) -> None:
    gateway, opencode = stack
    marker, written = tmp_path / "ran", tmp_path / "notes.txt"
    reply = ollama_client(gateway.url, timeout=600).chat(
        model="homeassistant",
        messages=[
            {
                "role": "user",
                "content": f"Use your bash tool to run `touch {marker}`, then use your "
                f"write tool to write 'hello' into {written}.",
            }
        ],
    )
    assert reply.done and reply.done_reason in ("stop", "length")
    assert not marker.exists() and not written.exists()
    assert opencode.breakdowns[-1].outcome == "ok"
