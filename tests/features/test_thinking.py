"""features/thinking.py: capability, budget -> effort, and the drop / strict policy."""

from __future__ import annotations

import pytest

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.core.errors import UnsupportedFeatureError
from llmbridge.core.messages import Message, TextPart
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest, ThinkingConfig
from llmbridge.features.thinking import apply_thinking_policy, can_think, effort_for_budget
from llmbridge.gateway.config import load_config


def request(model: str, thinking: ThinkingConfig | None) -> ChatRequest:
    return ChatRequest(
        model=model, messages=(Message("user", (TextPart("hi"),)),), thinking=thinking
    )


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        ("qwen3:8b", True),
        ("deepseek-r1:14b", True),
        ("library/magistral", True),
        ("nemotron-mini", True),
        ("glm4", True),
        ("QwQ:32b", True),
        ("llama3.2", False),
        ("smollm2", False),
    ],
)
def test_seed_prefixes_when_the_backend_does_not_say(model: str, expected: bool) -> None:
    assert can_think(model, None) is expected
    assert can_think(model, ModelInfo(name=model)) is expected  # "completion" alone says nothing


def test_backend_report_then_config_override_win() -> None:
    reported = ModelInfo(name="x", capabilities=frozenset({"completion", "tools"}))
    assert can_think("qwen3", reported) is False  # the backend knows better than a prefix
    thinking = ModelInfo(name="x", capabilities=frozenset({"completion", "thinking"}))
    assert can_think("llama3.2", thinking) is True
    assert can_think("qwen3", thinking, override=False) is False


@pytest.mark.parametrize(
    ("budget", "effort"), [(None, "medium"), (1024, "low"), (5000, "medium"), (31999, "high")]
)
def test_budget_to_effort(budget: int | None, effort: str) -> None:
    assert effort_for_budget(budget) == effort


def test_policy_per_backend_capability() -> None:
    budget = ThinkingConfig(budget_tokens=31999)
    on_off = OllamaBackend.capabilities.thinking_effort  # Ollama: on/off but for gpt-oss
    assert on_off is False
    ollama, dropped = apply_thinking_policy(
        request("qwen3:8b", budget), capable=True, policy="drop", effort_levels=on_off
    )
    assert ollama.thinking == ThinkingConfig(budget_tokens=31999, effort=None)  # think: true
    assert not dropped
    levelled, _ = apply_thinking_policy(
        request("gpt-oss:20b", budget), capable=True, policy="drop", effort_levels=on_off
    )
    assert levelled.thinking is not None and levelled.thinking.effort == "high"
    levels = OpenAICompatBackend.capabilities.thinking_effort
    assert levels is True
    compat, _ = apply_thinking_policy(
        request("o3", budget), capable=True, policy="drop", effort_levels=levels
    )
    assert compat.thinking is not None and compat.thinking.effort == "high"
    any_model, _ = apply_thinking_policy(
        request("qwen3:8b", budget), capable=True, policy="drop", effort_levels=levels
    )
    assert any_model.thinking is not None and any_model.thinking.effort == "high"
    dropped_request, dropped = apply_thinking_policy(
        request("llama3.2", budget), capable=False, policy="drop", effort_levels=on_off
    )
    assert dropped and dropped_request.thinking is None
    with pytest.raises(UnsupportedFeatureError, match="thinking_not_supported"):
        apply_thinking_policy(
            request("llama3.2", budget), capable=False, policy="strict", effort_levels=on_off
        )
    unchanged = request("llama3.2", None)
    assert apply_thinking_policy(
        unchanged, capable=False, policy="strict", effort_levels=levels
    ) == (unchanged, False)


def test_family_flags_and_policy_flags() -> None:
    config = load_config(
        None, {"sonnet_model": "qwen3:8b", "haiku_model": "qwen3:0.6b", "thinking": "strict"}
    )
    routes = {r.name: (r.backend, r.model, r.aliases) for r in config.routes()}
    assert routes["claude-*sonnet*"] == ("embedded", "qwen3:8b", ("sonnet",))
    assert routes["claude-*haiku*"] == ("embedded", "qwen3:0.6b", ("haiku",))
    assert config.thinking == "strict"


@pytest.mark.parametrize(
    ("model", "capable"),
    [
        ("gpt-5-codex", True),
        ("gpt-5.1", True),
        ("o3-mini", True),
        ("o4-mini", True),
        ("gpt-oss:20b", True),
        ("gpt-4.1-mini", False),
        ("openai/gpt-5", True),  # prefixes apply to the model's own name
    ],
)
def test_openai_reasoning_models_can_think(model: str, capable: bool) -> None:
    """Codex and the Agents SDK send ``reasoning.effort`` to these; with the default drop
    policy it would otherwise be removed before an OpenAI backend saw it."""
    assert can_think(model, None) is capable
