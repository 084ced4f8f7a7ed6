"""Thinking: which models can reason, how a request's thinking reaches the backend,
and what happens when the model cannot think (seed 001, Feature 1).

Capability comes from the backend's own report where it has one (Ollama's
``/api/show`` lists ``thinking`` among a model's capabilities); otherwise from the
seed's list of model-name prefixes; and a per-model ``thinking`` setting in the
configuration overrides both.

A request with thinking for a model that cannot think is, under the ``strict``
policy, a 400 with the code ``thinking_not_supported`` (the seed's behaviour): the
Anthropic front gives it as ``error.type`` (seed 001's clients branch on it), the
OpenAI fronts as ``error.code``, and the message starts with it for the rest. Under
the default ``drop`` policy it is served without thinking and the response says so
in the ``x-llmbridge-thinking: dropped`` header. ``drop`` is the
default because Claude Code sends ``thinking`` on every request: rejecting it would
make the gateway unusable with every model that does not think.
"""

from __future__ import annotations

import logging
from dataclasses import replace
from typing import Literal

from llmbridge.core.errors import UnsupportedFeatureError
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.request import ChatRequest, ThinkingConfig
from llmbridge.core.request import effort_for_budget as budget_effort

__all__ = [
    "THINKING_CAPABLE_PREFIXES",
    "THINKING_HEADER",
    "ThinkingPolicy",
    "apply_thinking_policy",
    "can_think",
    "effort_for_budget",
]

log = logging.getLogger("llmbridge.thinking")

ThinkingPolicy = Literal["drop", "strict"]

THINKING_CAPABLE_PREFIXES = (
    "qwen3",
    "deepseek-r1",
    "magistral",
    "nemotron",
    "glm4",
    "qwq",
    "gpt-oss",
    "gpt-5",
    "o1",
    "o3",
    "o4",
    "codex-",
)
"""Model families that can think, by name prefix: seed 001's Ollama families, then
OpenAI's reasoning models (``gpt-oss``, ``gpt-5*`` with its Codex models, the ``o``
series), so a Responses client's ``reasoning.effort`` reaches them when no
backend reports capabilities and no route says otherwise."""

THINKING_HEADER = "x-llmbridge-thinking"

# A backend without effort levels (Ollama) accepts think levels ("low" / "medium" /
# "high") only for these families; every other thinking model takes a plain boolean.
_LEVELLED_PREFIXES = ("gpt-oss",)


def _base_name(model: str) -> str:
    """``library/qwen3:8b`` -> ``qwen3:8b``: prefixes apply to the model's own name."""
    return model.rsplit("/", 1)[-1].lower()


def can_think(model: str, info: ModelInfo | None, override: bool | None = None) -> bool:
    """Whether ``model`` (a backend model name) can think.

    ``override`` (the configuration's per-model ``thinking`` setting) wins; then the
    backend's own capability report, when it has capabilities beyond ``completion``;
    then the seed's prefix list.
    """
    if override is not None:
        return override
    if info is not None and info.capabilities - {"completion"}:
        return "thinking" in info.capabilities
    return _base_name(model).startswith(THINKING_CAPABLE_PREFIXES)


def effort_for_budget(budget_tokens: int | None) -> Literal["low", "medium", "high"]:
    """The effort level for a token budget (``core.request.effort_for_budget``); no
    budget means ``medium``, Ollama's own meaning of ``think: true``."""
    return "medium" if budget_tokens is None else budget_effort(budget_tokens)


def apply_thinking_policy(
    request: ChatRequest,
    *,
    capable: bool,
    policy: ThinkingPolicy,
    effort_levels: bool,
) -> tuple[ChatRequest, bool]:
    """The request as the backend should get it, and whether thinking was dropped.

    ``effort_levels`` is the backend's ``capabilities.thinking_effort``: ``True``, it
    takes an effort level for every model (derived from the budget when none was
    asked); ``False`` (Ollama), thinking is a plain on/off except for the families
    known to take levels.

    Raises:
        UnsupportedFeatureError: ``strict`` policy and a model that cannot think.
    """
    thinking = request.thinking
    if thinking is None or not thinking.enabled:
        return request, False
    if not capable:
        if policy == "strict":
            raise UnsupportedFeatureError(
                f"thinking_not_supported: model '{request.model}' cannot think; send the "
                "request without 'thinking' or choose a thinking-capable model",
                param="thinking",
                code="thinking_not_supported",
            )
        log.info("model %s cannot think: serving the request without thinking", request.model)
        return replace(request, thinking=None), True
    return replace(request, thinking=_for_backend(thinking, request.model, effort_levels)), False


def _for_backend(thinking: ThinkingConfig, model: str, effort_levels: bool) -> ThinkingConfig:
    effort = thinking.effort or effort_for_budget(thinking.budget_tokens)
    if not effort_levels and not _base_name(model).startswith(_LEVELLED_PREFIXES):
        return replace(thinking, effort=None)  # a plain `think: true`
    return replace(thinking, effort=effort)
