"""Sampling parameters fitted to the backend, the same for every caller.

A request's ``GenerationParams`` say what the client asked for in the neutral
form; a backend takes only some of them natively (``Capabilities.sampling``).
``fit_params`` keeps those, converts what has a faithful stand-in, and drops the
rest, saying what it did, so a gateway client and an agent turn get the same
parameters for the same backend:

- ``repeat_penalty`` for a backend without it but with ``frequency_penalty``
  (OpenAI-compatible servers) becomes ``repeat_penalty_to_frequency_penalty`` of it,
  unless the request sets ``frequency_penalty`` itself, which always wins.
- Any other parameter the backend does not take is dropped (Anthropic has no
  penalties; ``num_ctx`` is Ollama's alone). ``extra`` (backend-specific options such
  as Ollama's ``mirostat``) is left to the backend's encoder, which sends what its API
  knows.

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
from dataclasses import fields, replace
from functools import cache

from llmbridge.backends.base import Capabilities
from llmbridge.core.request import GenerationParams

__all__ = [
    "FREQUENCY_PENALTY_LIMIT",
    "REPEAT_PENALTY_SCALE",
    "fit_params",
    "repeat_penalty_to_frequency_penalty",
]

REPEAT_PENALTY_SCALE = 2.0
"""``k`` in ``frequency_penalty = clamp(k * ln(repeat_penalty), -2, 2)``."""
FREQUENCY_PENALTY_LIMIT = 2.0
"""OpenAI's documented range for ``frequency_penalty`` is -2.0 .. 2.0."""

_FITTED = tuple(f.name for f in fields(GenerationParams) if f.name != "extra")
"""The neutral parameters a backend takes or not (``extra`` is the encoder's)."""


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


@cache
def _not_taken(sampling: frozenset[str]) -> tuple[str, ...]:
    """The neutral parameters a backend taking ``sampling`` does not take (a handful of
    backend classes: computed once each)."""
    return tuple(name for name in _FITTED if name not in sampling)


def fit_params(
    params: GenerationParams, capabilities: Capabilities
) -> tuple[GenerationParams, tuple[str, ...]]:
    """``params`` as a backend with ``capabilities`` takes them, and the names of the
    parameters converted or dropped (empty when nothing changed: the common case
    looks at the few parameters the backend does not take, and builds nothing)."""
    taken = capabilities.sampling
    unset = [name for name in _not_taken(taken) if getattr(params, name) not in (None, ())]
    if not unset:
        return params, ()
    changes: dict[str, object] = {}
    for name in unset:
        changes[name] = () if name == "stop" else None
    repeat = params.repeat_penalty
    if (
        "repeat_penalty" in changes
        and repeat is not None
        and "frequency_penalty" in taken
        and params.frequency_penalty is None
    ):
        changes["frequency_penalty"] = repeat_penalty_to_frequency_penalty(repeat)
    return replace(params, **changes), tuple(unset)  # type: ignore[arg-type]
