"""The betas of the current Claude Code, through the official ``anthropic`` client, on
an Anthropic backend and on any other: context editing (``context-management-*``),
effort (``effort-*``) and cache scopes (``prompt-caching-scope-*``). Each request is
Claude Code 2.1.330's captured one (tests/fixtures/requests/), with what its binary
adds when the beta is on: the ``clear_tool_uses_20250919`` edit its builder writes,
``cache_control: {"type": "ephemeral", "scope": "global"}`` on its system prompt blocks.

Gateway A serves the client. Its ``claude-*`` models go to an Anthropic backend, which
is gateway B's Anthropic front behind a recorder (the exact header and body A sends, as
to api.anthropic.com); ``local`` goes to a scripted backend, as a local model would."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from llmbridge.backends.anthropic import AnthropicBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ToolResultPart
from llmbridge.features.context_editing import CLEARED_RESULT
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import RunningServer, anthropic_client, running_gateway
from tests.e2e.recording import Recorder
from tests.gateway.test_claude_code_requests import BETAS, captured

CONTEXT_MANAGEMENT = "context-management-2025-06-27"
EFFORT = "effort-2025-11-24"
CACHE_SCOPE = "prompt-caching-scope-2026-01-05"
CLEAR_TOOL_USES = {  # Claude Code's builder (C1n in the 2.1.330 binary), its field order
    "type": "clear_tool_uses_20250919",
    "trigger": {"type": "tool_uses", "value": 3},
    "keep": {"type": "tool_uses", "value": 1},
    "clear_at_least": {"type": "input_tokens", "value": 10},
    "exclude_tools": ["TodoWrite"],
    "clear_tool_inputs": ["Bash"],
}
OUTPUT = " ".join(["line"] * 60)


@pytest.fixture(scope="module")
def upstream() -> ScriptedBackend:
    return ScriptedBackend("b", models=("claude-upstream",))


@pytest.fixture(scope="module")
def local() -> ScriptedBackend:
    return ScriptedBackend("local", models=("local",))


@pytest.fixture(scope="module")
def recorder(upstream: ScriptedBackend) -> Recorder:
    config = {"backends": {"b": {"type": "scripted"}}, "default_backend": "b"}
    return Recorder(create_app(GatewayConfig.model_validate(config), backends={"b": upstream}))


@pytest.fixture(scope="module")
def gateway(recorder: Recorder, local: ScriptedBackend) -> Iterator[RunningServer]:
    with RunningServer(recorder) as b:
        claude = AnthropicBackend("claude", b.url)
        models = [
            {"name": "claude-*", "backend": "claude", "model": "claude-upstream"},
            {"name": "local", "backend": "local"},
        ]
        with running_gateway({"local": local, "claude": claude}, models=models) as a:
            yield a


@pytest.fixture
def client(gateway: RunningServer) -> anthropic.Anthropic:
    return anthropic_client(gateway.url)


def request(model: str, **changes: Any) -> dict[str, Any]:
    """The captured request for ``model``, not streamed (the SDK streams a request for
    more than its 21,333 tokens, and Claude Code asks for 128000)."""
    body = captured()
    body.update(model=model, stream=False, max_tokens=4096, **changes)
    return body


def tool_loop_request(model: str) -> dict[str, Any]:
    """The captured request four Bash calls into a session, with tool-result clearing on."""
    body = request(model)
    body.pop("thinking")  # thinking is beside the point here; its edit stays
    turns: list[dict[str, Any]] = []
    for index in range(4):
        call = {"command": f"ls {index}", "description": "List files"}
        use = {"type": "tool_use", "id": f"toolu_{index}", "name": "Bash", "input": call}
        turns.append({"role": "assistant", "content": [use]})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{index}", "content": OUTPUT}
        turns.append({"role": "user", "content": [result]})
    question, per_turn = body["messages"]
    body["messages"] = [question, *turns, per_turn]
    body["context_management"]["edits"].append(CLEAR_TOOL_USES)
    return body


def create(client: anthropic.Anthropic, body: dict[str, Any], betas: list[str]) -> Any:
    """``body`` through the SDK's beta client, as Claude Code sends it (``?beta=true``)."""
    return client.beta.messages.with_raw_response.create(betas=betas, **copy.deepcopy(body))


def results(messages: Any) -> list[str]:
    return [p.content for m in messages for p in m.parts if isinstance(p, ToolResultPart)]


# -- context editing ----------------------------------------------------------------------


def test_a_local_backend_gets_the_old_tool_results_cleared(
    client: anthropic.Anthropic, local: ScriptedBackend
) -> None:
    local.enqueue(Script(text=["ok"]))
    raw = create(client, tool_loop_request("local"), [*BETAS, CONTEXT_MANAGEMENT])
    sent = local.requests[-1]
    assert results(sent.messages) == [CLEARED_RESULT] * 3 + [OUTPUT]
    # clear_tool_inputs named Bash: the cleared calls lost their arguments too.
    assert [c.arguments for m in sent.messages for c in m.tool_calls] == [
        {},
        {},
        {},
        {
            "command": "ls 3",
            "description": "List files",
        },
    ]
    # What was cleared, where Claude Code reads it, and in a header for everyone.
    reply = raw.parse()
    assert reply.context_management is not None
    [applied] = reply.context_management.applied_edits
    assert (applied.type, applied.cleared_tool_uses) == ("clear_tool_uses_20250919", 3)
    assert applied.cleared_input_tokens > 0
    assert raw.headers["x-llmbridge-context-edits"] == "clear_tool_uses_20250919=3"


def test_the_streamed_reply_says_what_was_cleared_in_message_delta(
    client: anthropic.Anthropic, local: ScriptedBackend
) -> None:
    local.enqueue(Script(text=["ok"]))
    body = tool_loop_request("local")
    body.pop("stream")
    with client.beta.messages.stream(betas=[*BETAS, CONTEXT_MANAGEMENT], **body) as stream:
        final = stream.get_final_message()
    assert final.context_management is not None
    assert [e.cleared_tool_uses for e in final.context_management.applied_edits] == [3]


def test_under_the_trigger_nothing_is_cleared_and_nothing_is_reported(
    client: anthropic.Anthropic, local: ScriptedBackend
) -> None:
    body = tool_loop_request("local")
    body["messages"] = body["messages"][:1] + body["messages"][-3:]  # one tool use
    local.enqueue(Script(text=["ok"]))
    raw = create(client, body, [*BETAS, CONTEXT_MANAGEMENT])
    assert results(local.requests[-1].messages) == [OUTPUT]
    assert raw.parse().context_management is None
    assert "x-llmbridge-context-edits" not in raw.headers


def test_an_anthropic_backend_gets_the_edits_as_sent_and_applies_them_itself(
    client: anthropic.Anthropic, recorder: Recorder, upstream: ScriptedBackend
) -> None:
    upstream.enqueue(Script(text=["ok"]))
    body = tool_loop_request("claude-opus-5-5")
    create(client, body, [*BETAS, CONTEXT_MANAGEMENT])
    sent = recorder.messages_calls()[-1]
    assert sent.body()["context_management"] == body["context_management"]
    contents = [
        block["content"]
        for turn in sent.body()["messages"]  # type: ignore[attr-defined]
        for block in turn["content"]
        if block["type"] == "tool_result"
    ]
    assert contents == [OUTPUT] * 4  # the gateway cleared nothing: Anthropic does
    assert CONTEXT_MANAGEMENT in sent.headers["anthropic-beta"].split(",")


# -- effort ---------------------------------------------------------------------------------


def test_the_effort_reaches_anthropic_as_sent_and_a_local_model_as_its_reasoning_effort(
    client: anthropic.Anthropic,
    recorder: Recorder,
    upstream: ScriptedBackend,
    local: ScriptedBackend,
) -> None:
    body = request("claude-opus-5-5")
    body["messages"][1]["output_config"] = {"effort": "high"}  # the per-turn setting
    upstream.enqueue(Script(text=["ok"]))
    create(client, body, [*BETAS, EFFORT])
    sent = recorder.messages_calls()[-1]
    assert sent.body()["output_config"] == {"effort": "high"}
    assert EFFORT in sent.headers["anthropic-beta"].split(",")
    local.enqueue(Script(text=["ok"]))
    create(client, {**body, "model": "local"}, [*BETAS, EFFORT])
    thinking = local.requests[-1].thinking
    assert thinking is not None and (thinking.enabled, thinking.effort) == (True, "high")


# -- cache scopes ---------------------------------------------------------------------------


def scoped_system() -> list[dict[str, Any]]:
    """Claude Code's system blocks as it sends them with the cache-scope beta on: each
    breakpoint ``{"type": "ephemeral", "scope": "global"}`` (its ``Fie`` helper), a ttl
    on one."""
    system: list[dict[str, Any]] = copy.deepcopy(captured()["system"])
    system[1]["cache_control"] = {"type": "ephemeral", "ttl": "1h", "scope": "global"}
    system[2]["cache_control"] = {"type": "ephemeral", "scope": "global"}
    return system


def test_an_anthropic_backend_gets_the_system_blocks_and_their_scopes_as_sent(
    client: anthropic.Anthropic, recorder: Recorder, upstream: ScriptedBackend
) -> None:
    body = request("claude-opus-5-5", system=scoped_system())
    upstream.enqueue(Script(text=["ok"]))
    create(client, body, [*BETAS, CACHE_SCOPE])
    sent = recorder.messages_calls()[-1]
    # Block for block, the billing line, each breakpoint and its scope where it was.
    assert sent.body()["system"] == scoped_system()
    assert CACHE_SCOPE in sent.headers["anthropic-beta"].split(",")


def test_other_backends_get_the_same_prompt_with_or_without_scopes(
    client: anthropic.Anthropic, local: ScriptedBackend
) -> None:
    prompts = []
    for system, betas in ((captured()["system"], BETAS), (scoped_system(), [*BETAS, CACHE_SCOPE])):
        body = request("local", system=system)
        local.enqueue(Script(text=["ok"]))
        create(client, body, betas)
        prompts.append([(m.role, m.parts) for m in local.requests[-1].messages])
    assert prompts[0] == prompts[1]
    assert prompts[0][0][0] == "system"
