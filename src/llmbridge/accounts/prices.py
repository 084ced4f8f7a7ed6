"""The price table (the configuration's ``prices:``) and the cost of one reply's usage.

Prices are US dollars per million tokens, keyed by public model name or glob::

    prices:
      "gpt-4o*": {input: 2.5, output: 10, cached_input: 1.25, reasoning: 10}
      qwen3: {input: 0.1, output: 0.4}

An exact name wins over globs; globs are tried in the file's order (the first that
matches wins, as ``models:`` routes are). ``cached_input`` defaults to ``input`` and
``reasoning`` to ``output``. A model no entry matches has no cost (``None``, not 0:
"unknown" and "free" are different answers in a usage report).

How the core's ``Usage`` is read (core/response.py):

- ``output_tokens`` already include ``reasoning_tokens`` (OpenAI's
  ``completion_tokens_details``; Gemini's thoughts are added in by its decoder), so
  reasoning is billed at ``reasoning`` and only the rest of the output at ``output``.
- ``input_tokens`` include ``cache_read_input_tokens`` (and cache writes), whatever
  the backend: OpenAI-compatible, Responses, Gemini and Ollama servers count them in
  their prompt tokens, and the Anthropic dialect's decoder adds Anthropic's cache reads
  and writes, which its API counts beside ``input_tokens``. ``cost_of``
  still takes a usage that follows Anthropic's convention (``cached_beside_input``);
  no backend kind is in ``CACHED_BESIDE_INPUT`` since. Cache writes are billed at the
  ``input`` price (the table has no cache-write price; Anthropic charges 1.25x).
"""

from __future__ import annotations

from collections.abc import Mapping
from fnmatch import fnmatchcase

from pydantic import BaseModel, ConfigDict, Field

from llmbridge.core.response import Usage

__all__ = ["CACHED_BESIDE_INPUT", "ModelPrice", "PriceTable", "cost_of"]

PER_TOKEN = 1e-6
"""Prices are per million tokens."""

CACHED_BESIDE_INPUT: frozenset[str] = frozenset()
"""Backend kinds whose ``input_tokens`` leave out cache reads: none since the Anthropic
dialect counts them in (module docstring)."""

_GLOB_CHARS = frozenset("*?[")


class ModelPrice(BaseModel):
    """One model's prices, US dollars per million tokens."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: float = Field(0.0, ge=0)
    """Prompt tokens not read from a cache."""
    output: float = Field(0.0, ge=0)
    """Generated tokens other than reasoning."""
    cached_input: float | None = Field(None, ge=0)
    """Prompt tokens read from the provider's cache; default: ``input``."""
    reasoning: float | None = Field(None, ge=0)
    """Reasoning (thinking) tokens; default: ``output``."""


def cost_of(usage: Usage, price: ModelPrice, *, cached_beside_input: bool = False) -> float:
    """What ``usage`` cost at ``price``, in US dollars (module docstring for how the
    counts are read). Unknown counts cost nothing."""
    input_tokens = usage.input_tokens or 0
    cached = usage.cache_read_input_tokens or 0
    if cached_beside_input:
        uncached = input_tokens + (usage.cache_creation_input_tokens or 0)
    else:
        # A backend that reports more cached than prompt tokens is wrong; never bill < 0.
        uncached = max(input_tokens - cached, 0)
    output = usage.output_tokens or 0
    reasoning = usage.reasoning_tokens or 0
    if output:
        reasoning = min(reasoning, output)  # part of the output, never more than it
    cached_price = price.input if price.cached_input is None else price.cached_input
    reasoning_price = price.output if price.reasoning is None else price.reasoning
    dollars = (
        uncached * price.input
        + cached * cached_price
        + max(output - reasoning, 0) * price.output
        + reasoning * reasoning_price
    )
    return dollars * PER_TOKEN


class PriceTable:
    """The configured prices, looked up by public model name (module docstring)."""

    __slots__ = ("_exact", "_globs")

    def __init__(self, prices: Mapping[str, ModelPrice]) -> None:
        self._exact = {name: p for name, p in prices.items() if not _GLOB_CHARS & set(name)}
        self._globs = tuple((name, p) for name, p in prices.items() if _GLOB_CHARS & set(name))

    def __bool__(self) -> bool:
        return bool(self._exact or self._globs)

    def price(self, model: str) -> ModelPrice | None:
        """``model``'s price: its exact entry, else the first glob that matches."""
        exact = self._exact.get(model)
        if exact is not None:
            return exact
        for pattern, price in self._globs:
            if fnmatchcase(model, pattern):
                return price
        return None

    def cost(self, model: str, usage: Usage, *, backend_kind: str | None = None) -> float | None:
        """What ``usage`` of ``model`` cost, ``None`` when ``model`` has no price.
        ``backend_kind`` says how its counts are read (``CACHED_BESIDE_INPUT``)."""
        price = self.price(model)
        if price is None:
            return None
        return cost_of(usage, price, cached_beside_input=backend_kind in CACHED_BESIDE_INPUT)
