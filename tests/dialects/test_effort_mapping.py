"""Every ``reasoning.effort`` a Responses client may send, as each backend is asked for it.

The values are the openai SDK's own (``openai.types.shared.ReasoningEffort``: ``none``,
``minimal``, ``low``, ``medium``, ``high``, ``xhigh``, ``max``), decoded as the Responses
front decodes Codex's ``reasoning`` and encoded by each backend's dialect. Each result
must be something that backend's API takes (checked with its own SDK's types where it
has them), more effort must never ask for less, and ``none`` turns thinking off
everywhere. A Responses backend gets the client's own spelling back.
"""

from __future__ import annotations

import typing
from typing import Any

import pytest
from anthropic.types import ThinkingConfigParam
from google.genai import types as genai
from openai.types.shared import ReasoningEffort
from pydantic import TypeAdapter

from llmbridge.core.request import ChatRequest
from llmbridge.dialects import anthropic, gemini, ollama, openai, responses

EFFORTS: list[str] = [
    value
    for arg in typing.get_args(ReasoningEffort)
    if arg is not type(None)
    for value in typing.get_args(arg)
]
"""In the SDK's order, least effort first."""
CHAT_EFFORTS = set(EFFORTS)


def decoded(effort: str) -> ChatRequest:
    """Codex's request shape with ``effort``, as the Responses front decodes it."""
    return responses.decode_chat_request(
        {
            "model": "gpt-5.5",
            "input": [{"role": "user", "content": "hi"}],
            "reasoning": {"effort": effort, "summary": "auto"},
            "include": ["reasoning.encrypted_content"],
            "stream": True,
        }
    )


def test_the_sdk_spells_every_release_s_values() -> None:
    assert EFFORTS == ["none", "minimal", "low", "medium", "high", "xhigh", "max"]


@pytest.mark.parametrize("effort", EFFORTS)
def test_a_responses_backend_gets_the_clients_own_spelling(effort: str) -> None:
    body = responses.encode_chat_request(decoded(effort), origin="up")
    assert body["reasoning"]["effort"] == effort
    if effort != "none":
        assert body["reasoning"]["summary"] == "auto"
    assert body["include"] == ["reasoning.encrypted_content"]


@pytest.mark.parametrize("effort", EFFORTS)
def test_an_openai_chat_backend_gets_a_level_it_takes(effort: str) -> None:
    sent = openai.encode_chat_request(decoded(effort))["reasoning_effort"]
    assert sent in CHAT_EFFORTS
    assert sent == "none" if effort == "none" else sent in ("low", "medium", "high")


def _anthropic_budget(effort: str) -> int:
    body = anthropic.encode_chat_request(decoded(effort))
    thinking = body.get("thinking")
    if thinking is None:
        return 0
    TypeAdapter(ThinkingConfigParam).validate_python(thinking)
    if thinking["type"] == "disabled":
        return 0
    assert thinking["type"] == "enabled"
    assert 1024 <= thinking["budget_tokens"] < body["max_tokens"]
    budget: int = thinking["budget_tokens"]
    return budget


def _gemini_budget(effort: str) -> int:
    config: dict[str, Any] = gemini.encode_chat_request(decoded(effort))["generationConfig"]
    thinking = genai.ThinkingConfig.model_validate(config["thinkingConfig"])
    if thinking.thinking_budget is not None:
        return thinking.thinking_budget
    level = str(thinking.thinking_level).rsplit(".", 1)[-1].upper()
    return ["MINIMAL", "LOW", "MEDIUM", "HIGH"].index(level) + 1


def _ollama_level(effort: str) -> int:
    think = ollama.encode_chat_request(decoded(effort))["think"]
    assert think in (False, True, "low", "medium", "high")
    return {False: 0, True: 2, "low": 1, "medium": 2, "high": 3}[think]


@pytest.mark.parametrize("measure", [_anthropic_budget, _gemini_budget, _ollama_level])
def test_more_effort_never_asks_any_backend_for_less(measure: Any) -> None:
    amounts = [measure(effort) for effort in EFFORTS]
    assert amounts[0] == 0  # none: thinking off
    assert all(amount > 0 for amount in amounts[1:])
    assert amounts == sorted(amounts), dict(zip(EFFORTS, amounts, strict=True))
