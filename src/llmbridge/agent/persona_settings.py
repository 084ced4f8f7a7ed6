"""Persona settings: the model, their merge, and the neutral parameters they make.

``AgentSettings`` holds the generation settings people set on a persona or a request
(temperature, max tokens, top_p, top_k, min_p, repeat penalty, presence and
frequency penalties, seed, stop sequences, context size, ...) and the MCP tools a
persona offers (``mcp_tools``: globs of the names ``/mcp`` gives them,
``<server>__<tool>``; agent/mcp_tools.py offers the tools they match). ``None`` means
unset; only set values are stored. ``merge_settings`` follows the seed: the persona's
settings first, then the request's set values override them.

``generation_params`` turns the merged settings into the core ``GenerationParams``,
each under its neutral name. Fitting them to a backend (converting ``repeat_penalty``
to ``frequency_penalty`` for an OpenAI-compatible server, dropping what a backend does
not take) is the serving layer's, the same for agent turns and gateway requests
(serving/prepare/sampling.py).
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field

from llmbridge.core.request import GenerationParams

__all__ = ["MAX_MCP_GLOBS", "AgentSettings", "generation_params", "merge_settings"]

MAX_MCP_GLOBS = 64
_MCP_GLOB = re.compile(r"[A-Za-z0-9_.\-*?\[\]!]{1,200}")
"""A glob of MCP tool names: the characters of a tool's name (the specification's
``A-Za-z0-9_-.``, server names being letters, digits, ``-`` and ``_``) and
``fnmatch``'s ``* ? [ ] !``; at most 200 characters (a 64-character server, ``__``
and a 128-character tool)."""


def _mcp_glob(glob: str) -> str:
    if not _MCP_GLOB.fullmatch(glob):
        raise ValueError(
            f"{glob!r} is not a glob of MCP tool names (<server>__<tool>, such as "
            "'files__*' or 'search__web': letters, digits, '_', '-', '.' and the "
            "wildcards * ? [ ], at most 200 characters)"
        )
    return glob


McpGlob = Annotated[str, AfterValidator(_mcp_glob)]


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
    mcp_tools: tuple[McpGlob, ...] | None = Field(default=None, max_length=MAX_MCP_GLOBS)
    """Globs of the MCP tools the agent offers (``files__*``, ``search__web``), as
    ``/mcp`` names them; the tools of the servers that are up that match them and the
    key's own ``mcp_tools``. A server a glob names need not exist (it may be down);
    ``[]``: none (a request turning its persona's off)."""

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


_EXTRA_OPTIONS = ("repeat_last_n", "mirostat", "mirostat_tau", "mirostat_eta")
"""Settings with no neutral field: passed in ``extra`` under their Ollama / llama.cpp
names; encoders of backends without them leave them out."""


def generation_params(settings: AgentSettings) -> GenerationParams:
    """``settings`` as the core parameters (fitted to the backend by
    serving/prepare/sampling.py)."""
    extra: dict[str, Any] = {
        name: getattr(settings, name)
        for name in _EXTRA_OPTIONS
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
        frequency_penalty=settings.frequency_penalty,
        presence_penalty=settings.presence_penalty,
        repeat_penalty=settings.repeat_penalty,
        num_ctx=settings.num_ctx,
        extra=extra,
    )
