"""Persona settings: the model, their merge, and what each backend gets.

``AgentSettings`` holds the generation settings people set on a persona or a request
(temperature, max tokens, top_p, top_k, min_p, repeat penalty, presence and
frequency penalties, seed, stop sequences, context size, ...). ``None`` means unset;
only set values are stored. ``merge_settings`` follows the seed: the persona's
settings first, then the request's set values override them.

``generation_params`` turns the merged settings into the core ``GenerationParams``
for the backend the model resolved to, each under its own name:

- Ollama (native ``/api/chat``) and the embedded model take ``repeat_penalty``
  natively (the Ollama encoder puts it in ``options``; llama.cpp has the same
  parameter).
- OpenAI-compatible servers have no multiplicative penalty: the gateway's OpenAI
  encoder sends ``frequency_penalty`` and drops ``repeat_penalty``. When a persona
  sets ``repeat_penalty`` and not ``frequency_penalty``, it is converted with
  ``repeat_penalty_to_frequency_penalty`` (below). An explicit
  ``frequency_penalty`` always wins.
- Anthropic has neither penalty; the Messages API gets temperature, top_p, top_k and
  stop sequences, and the penalties are left out.

The seed copied ``repeatPenalty`` into ``frequencyPenalty`` unchanged. That is wrong:
``repeat_penalty`` (CTRL / llama.cpp) is multiplicative with neutral 1.0: a seen
token's positive logit is divided by it. ``frequency_penalty`` (OpenAI) is additive
on -2..2 with neutral 0: ``alpha * count`` is subtracted from the logit. Copied
unchanged, Ollama's neutral 1.0 becomes a strong OpenAI penalty of 1.0, and a
"no penalty" of 0 on one side is a nonsensical 0 on the other (the bugs in
LiteLLM#11269 and chat-ui#1552).
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from llmbridge.core.request import GenerationParams

__all__ = [
    "FREQUENCY_PENALTY_LIMIT",
    "REPEAT_PENALTY_SCALE",
    "AgentSettings",
    "generation_params",
    "merge_settings",
    "repeat_penalty_to_frequency_penalty",
]

REPEAT_PENALTY_SCALE = 2.0
"""``k`` in ``frequency_penalty = clamp(k * ln(repeat_penalty), -2, 2)``."""
FREQUENCY_PENALTY_LIMIT = 2.0
"""OpenAI's documented range for ``frequency_penalty`` is -2.0 .. 2.0."""


def repeat_penalty_to_frequency_penalty(repeat_penalty: float) -> float:
    """The additive ``frequency_penalty`` that stands in for a multiplicative
    ``repeat_penalty``: ``clamp(2 * ln(repeat_penalty), -2, 2)``, rounded to 4 places.

    Why a logarithm: ``repeat_penalty`` multiplies, ``frequency_penalty`` adds, and
    the logarithm is the map that turns one into the other. Dividing a logit ``l``
    by ``r`` is ``l * e^-ln(r)``, about ``l - l*ln(r)`` near ``r = 1``: an additive
    penalty proportional to ``ln(r)``. So the neutral values meet (``ln 1 = 0``),
    the map is strictly increasing, and reciprocal penalties map to opposite ones
    (``r = 1/1.2`` encourages repetition exactly as much as ``r = 1.2`` discourages
    it: -0.36 against +0.36).

    Why ``k = 2``: the true factor is the logit itself, which no client knows, so
    the scale is chosen on the two APIs' documented ranges. OpenAI says values
    "around 0.1 to 1" reduce repetition somewhat and up to 2 suppress it strongly;
    Ollama's default 1.1 and the usual persona range 1.0-1.5 should land in the
    first band: 1.1 -> 0.19, 1.3 -> 0.52, 1.5 -> 0.81, 2.0 -> 1.39, and
    ``e`` (2.72) reaches the ceiling 2.0. Anything beyond is clamped to the API's
    range, so a converted value is never rejected by the server.
    """
    if not math.isfinite(repeat_penalty) or repeat_penalty <= 0:
        raise ValueError(f"repeat_penalty must be a positive number, not {repeat_penalty!r}")
    value = REPEAT_PENALTY_SCALE * math.log(repeat_penalty)
    value = max(-FREQUENCY_PENALTY_LIMIT, min(FREQUENCY_PENALTY_LIMIT, value))
    return round(value, 4) + 0.0  # + 0.0 turns -0.0 into 0.0


class AgentSettings(BaseModel):
    """Generation settings of a persona or a request; ``None`` means unset."""

    # No NaN or infinity: PostgreSQL's json cannot store them, and no backend takes them.
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    temperature: float | None = Field(default=None, ge=0.0, le=5.0)
    """Sampling temperature (0 = greedy)."""
    max_tokens: int | None = Field(default=None, ge=1)
    """The most tokens to generate (Ollama ``num_predict``)."""
    top_p: float | None = Field(default=None, ge=0.0, le=1.0)
    """Nucleus sampling: keep the smallest set of tokens whose probability reaches this."""
    top_k: int | None = Field(default=None, ge=0)
    """Sample among the k most likely tokens (0 = off). Not on OpenAI's API."""
    min_p: float | None = Field(default=None, ge=0.0, le=1.0)
    """Drop tokens less likely than this fraction of the top token. Not on OpenAI's API."""
    repeat_penalty: float | None = Field(default=None, gt=0.0, le=10.0)
    """Multiplicative repetition penalty (llama.cpp / Ollama), neutral 1.0."""
    repeat_last_n: int | None = Field(default=None, ge=-1)
    """How far back ``repeat_penalty`` looks (Ollama; -1 = the whole context)."""
    presence_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    """Additive penalty for tokens already present (OpenAI scale), neutral 0."""
    frequency_penalty: float | None = Field(default=None, ge=-2.0, le=2.0)
    """Additive penalty per repetition (OpenAI scale), neutral 0."""
    seed: int | None = None
    """Sampling seed, for repeatable output where the backend supports it."""
    stop: tuple[str, ...] | None = Field(default=None, max_length=16)
    """Stop sequences."""
    num_ctx: int | None = Field(default=None, ge=1)
    """Context window to allocate (Ollama only; sending a new value reloads the model)."""
    mirostat: Literal[0, 1, 2] | None = None
    """Mirostat sampling mode (Ollama / llama.cpp)."""
    mirostat_tau: float | None = Field(default=None, gt=0.0)
    mirostat_eta: float | None = Field(default=None, gt=0.0)
    output_format: Literal["text", "json"] | None = None
    """``json`` asks for a JSON object (the seed's ``outputFormat``)."""

    def set_values(self) -> dict[str, Any]:
        """The settings that are set, as stored in the ``personas`` table."""
        return self.model_dump(exclude_none=True, mode="json")


def merge_settings(persona: AgentSettings | None, request: AgentSettings | None) -> AgentSettings:
    """The seed's ``{...personaSettings, ...requestSettings}``: persona values first,
    every value the request sets overrides them, unset request values do not."""
    merged: dict[str, Any] = {}
    if persona is not None:
        merged.update(persona.model_dump(exclude_none=True))
    if request is not None:
        merged.update(request.model_dump(exclude_none=True))
    return AgentSettings.model_validate(merged)


_OLLAMA_EXTRA = ("repeat_last_n", "mirostat", "mirostat_tau", "mirostat_eta")


def generation_params(settings: AgentSettings, backend_kind: str) -> GenerationParams:
    """``settings`` as the core parameters for a backend of kind ``backend_kind``
    (``Backend.kind``: ``ollama``, ``openai``, ``anthropic``, ``embedded``, ...)."""
    frequency = settings.frequency_penalty
    presence = settings.presence_penalty
    repeat = settings.repeat_penalty
    extra: dict[str, Any] = {}
    if backend_kind == "openai":
        if frequency is None and repeat is not None:
            frequency = repeat_penalty_to_frequency_penalty(repeat)
        repeat = None
    elif backend_kind == "anthropic":
        frequency = presence = repeat = None
    if backend_kind in ("ollama", "embedded", "scripted"):
        extra = {
            name: getattr(settings, name)
            for name in _OLLAMA_EXTRA
            if getattr(settings, name) is not None
        }
    return GenerationParams(
        max_tokens=settings.max_tokens,
        temperature=settings.temperature,
        top_p=settings.top_p,
        top_k=settings.top_k,
        min_p=settings.min_p,
        stop=settings.stop or (),
        seed=settings.seed,
        frequency_penalty=frequency,
        presence_penalty=presence,
        repeat_penalty=repeat,
        num_ctx=settings.num_ctx if backend_kind in ("ollama", "scripted") else None,
        extra=extra,
    )
