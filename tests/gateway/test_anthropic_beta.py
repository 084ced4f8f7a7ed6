"""``anthropic-beta`` values and Claude Code's billing-header line, per backend.

Gateway A serves the official ``anthropic`` client. Its ``claude-*`` models go to an
Anthropic backend, which is gateway B's Anthropic front behind a recorder, so the test
sees the exact header and body A sends as it would send them to api.anthropic.com; its
``local`` model goes to a scripted backend, as a local model would be served."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from llmbridge.backends.anthropic import AnthropicBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import Message
from llmbridge.features.anthropic_beta import (
    BETAS,
    BetaKind,
    betas_to_forward,
    classify,
    parse_betas,
)
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import RunningServer, anthropic_client, running_gateway
from tests.e2e.recording import Recorder

FORWARDED = ["advanced-tool-use-2025-11-20", "per-turn-control-2026-07-01"]
RETIRED = ["prompt-caching-2024-07-31", "token-counting-2024-11-01", "messages-2023-12-15"]
MAPPED = [
    "context-1m-2025-08-07",
    "output-128k-2025-02-19",
    "interleaved-thinking-2025-05-14",
    "fine-grained-tool-streaming-2025-05-14",
    "token-efficient-tools-2025-02-19",
]
UNKNOWN = ["brand-new-feature-2031-01-01"]
BILLING = "x-anthropic-billing-header: cc_version=2.1.330.440; cc_entrypoint=sdk-cli; cch={};"
SYSTEM = "You are a Claude agent, built on Anthropic's Claude Agent SDK."


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


def _ask(url: str, model: str, betas: list[str], system: Any = "Be brief.") -> None:
    anthropic_client(url).beta.messages.create(
        model=model,
        max_tokens=32,
        system=system,
        messages=[{"role": "user", "content": "hi"}],
        betas=betas,
    )


# -- the table ---------------------------------------------------------------------------


def test_each_value_is_classed_as_the_table_says() -> None:
    assert [classify(v).kind for v in FORWARDED] == [BetaKind.FORWARD] * 2  # type: ignore[union-attr]
    assert {classify(v).kind for v in RETIRED} == {BetaKind.RETIRED}  # type: ignore[union-attr]
    assert {classify(v).kind for v in MAPPED} == {BetaKind.MAPPED}  # type: ignore[union-attr]
    assert classify(UNKNOWN[0]) is None
    # A family matches every dated version: a later context-1m is still mapped.
    assert classify("context-1m-2027-01-01").kind is BetaKind.MAPPED  # type: ignore[union-attr]
    every = [*FORWARDED, *RETIRED, *MAPPED, *UNKNOWN]
    assert betas_to_forward(every) == (*FORWARDED, *MAPPED, *UNKNOWN)
    # Every mapped row says what it means for the other backends.
    assert all(beta.elsewhere != "ignored" for beta in BETAS if beta.kind is BetaKind.MAPPED)


def test_header_values_are_split_trimmed_and_kept_once_in_order() -> None:
    assert parse_betas(["a-1, b-2,,a-1", " c-3 "]) == ("a-1", "b-2", "c-3")


# -- an Anthropic backend ------------------------------------------------------------------


def test_an_anthropic_backend_gets_all_but_the_retired_betas(
    gateway: RunningServer, recorder: Recorder, upstream: ScriptedBackend
) -> None:
    upstream.enqueue(Script(text=["ok"]))
    _ask(gateway.url, "claude-sonnet-4-6", [*FORWARDED, *RETIRED, *MAPPED, *UNKNOWN])
    sent = recorder.messages_calls()[-1]
    assert sent.headers["anthropic-beta"].split(",") == [*FORWARDED, *MAPPED, *UNKNOWN]
    assert "anthropic-beta" not in sent.body()  # a header, never a body field


def test_an_anthropic_backend_gets_no_beta_header_when_all_are_retired(
    gateway: RunningServer, recorder: Recorder, upstream: ScriptedBackend
) -> None:
    upstream.enqueue(Script(text=["ok"]))
    _ask(gateway.url, "claude-sonnet-4-6", RETIRED)
    assert "anthropic-beta" not in recorder.messages_calls()[-1].headers


def test_an_anthropic_backend_gets_the_billing_header_line_as_sent(
    gateway: RunningServer, recorder: Recorder, upstream: ScriptedBackend
) -> None:
    upstream.enqueue(Script(text=["ok"]))
    system = [{"type": "text", "text": BILLING.format("1a2b3")}, {"type": "text", "text": SYSTEM}]
    _ask(gateway.url, "claude-sonnet-4-6", [], system)
    sent = recorder.messages_calls()[-1].body()["system"]
    # The blocks as sent, the line in the first (Anthropic reads and bills by it).
    assert sent == system
    assert system[0]["text"] == BILLING.format("1a2b3")


# -- any other backend ---------------------------------------------------------------------


def test_other_backends_serve_every_kind_of_beta_and_see_none(
    gateway: RunningServer, local: ScriptedBackend
) -> None:
    local.enqueue(Script(text=["ok"]))
    _ask(gateway.url, "local", [*FORWARDED, *RETIRED, *MAPPED, *UNKNOWN])
    # The beta values ride along only for an Anthropic backend: nothing else reads them,
    # and the local backend's request is the one it gets without any.
    with_betas = local.requests[-1]
    local.enqueue(Script(text=["ok"]))
    _ask(gateway.url, "local", [])
    assert local.requests[-1].messages == with_betas.messages
    assert local.requests[-1].params == with_betas.params


def _system(messages: tuple[Message, ...]) -> str:
    return "\n".join(m.text for m in messages if m.role == "system")


def test_other_backends_get_the_prompt_without_the_billing_line(
    gateway: RunningServer, local: ScriptedBackend
) -> None:
    prompts = []
    for cch in ("1a2b3", "9f8e7"):
        local.enqueue(Script(text=["ok"]))
        system = [{"type": "text", "text": BILLING.format(cch)}, {"type": "text", "text": SYSTEM}]
        _ask(gateway.url, "local", [], system)
        prompts.append(local.requests[-1].messages)
    # Two requests that differ only in the per-request hash: the same prompt, byte for
    # byte, so a local model's prefix cache hits.
    assert prompts[0] == prompts[1]
    assert _system(prompts[0]) == SYSTEM


def test_a_system_prompt_that_is_only_the_billing_line_leaves_no_system_message(
    gateway: RunningServer, local: ScriptedBackend
) -> None:
    local.enqueue(Script(text=["ok"]))
    _ask(gateway.url, "local", [], [{"type": "text", "text": BILLING.format("x")}])
    assert [m.role for m in local.requests[-1].messages] == ["user"]


def test_a_request_without_betas_is_served_as_before(
    gateway: RunningServer, local: ScriptedBackend
) -> None:
    local.enqueue(Script(text=["fine"]))
    reply = anthropic_client(gateway.url).messages.create(
        model="local", max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    assert isinstance(reply, anthropic.types.Message)
    assert reply.content[0].type == "text"
