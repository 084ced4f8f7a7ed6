"""Anthropic's model list (``GET /v1/models``, ``GET /v1/models/{id}``), server side.

The gateway serves ``/v1/models`` in OpenAI's shape, and in this one when the request
carries an ``anthropic-version`` header, as the official SDKs and Claude Code's
gateway protocol send: each model is ``{"type": "model", "id", "display_name",
"created_at", "lifecycle", ...}`` and the list is one page, ``{"data", "has_more",
"first_id", "last_id"}``, paged by ``limit`` (1 to 1000, default 20), ``after_id`` and
``before_id`` as the Models API pages (platform.claude.com/docs/en/api/models/list).

Claude Code's gateway model discovery (``CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1``)
reads this list with ``limit=1000`` and keeps only ids that contain ``claude`` or
``anthropic`` (any case), so a gateway's own names (``smollm2``, ``qwen3:8b``) would
never reach its model picker. ``discoverable`` therefore lists each model whose name
has neither word a second time, right after itself, as ``anthropic/<name>`` with the
name as ``display_name``; ``listed_name`` turns such an id back into the name when a
request sends it (the routes do it, unless a route of its own matches the id).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.model_info import ModelInfo

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "DISCOVERY_PREFIX",
    "MAX_PAGE_SIZE",
    "discoverable",
    "encode_model",
    "encode_model_page",
    "listed_name",
]

DEFAULT_PAGE_SIZE = 20
"""The Models API's default ``limit``."""
MAX_PAGE_SIZE = 1000
"""The largest ``limit`` the Models API accepts."""


DISCOVERY_PREFIX = "anthropic/"
"""How a model whose name Claude Code's discovery would filter out is listed again."""

# Claude Code 2.1.330 keeps the ids matching /(claude|anthropic)/i (its binary).
_DISCOVERED = re.compile("claude|anthropic", re.IGNORECASE)


def discoverable(models: Sequence[ModelInfo]) -> list[ModelInfo]:
    """``models``, each followed by its ``anthropic/<name>`` twin when its name says
    neither ``claude`` nor ``anthropic`` (the twin's ``display_name`` is the name)."""
    listed: list[ModelInfo] = []
    for info in models:
        listed.append(info)
        if not _DISCOVERED.search(info.name):
            listed.append(replace(info, name=DISCOVERY_PREFIX + info.name))
    return listed


def listed_name(model: str) -> str | None:
    """The gateway's name behind a discovery id (``anthropic/smollm2`` -> ``smollm2``);
    ``None`` for any other name."""
    if not model.startswith(DISCOVERY_PREFIX):
        return None
    name = model.removeprefix(DISCOVERY_PREFIX)
    return name if name and not _DISCOVERED.search(name) else None


def encode_model(info: ModelInfo) -> dict[str, Any]:
    """One model object, as ``anthropic.types.ModelInfo`` reads it.

    ``created_at`` is the model's modification time when the backend reports one, else
    the epoch (the API's own value for an unknown release date); ``max_input_tokens``
    is the context length when known. Every model the gateway serves is ``active``.
    """
    created = info.modified_at if info.modified_at is not None else 0.0
    return {
        "type": "model",
        "id": info.name,
        # A discovery twin shows its plain name in Claude Code's model picker.
        "display_name": listed_name(info.name) or info.name,
        "created_at": datetime.fromtimestamp(created, UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "lifecycle": "active",
        "max_input_tokens": info.context_length,
    }


def encode_model_page(models: Sequence[ModelInfo], query: Mapping[str, str]) -> dict[str, Any]:
    """The page of ``models`` (in the gateway's order) that ``query`` asks for.

    Raises:
        InvalidRequestError: ``limit`` is not an integer from 1 to 1000, both cursors
            are given, or a cursor names no listed model; ``param`` names the field.
    """
    limit = _limit(query.get("limit"))
    after, before = query.get("after_id"), query.get("before_id")
    if after is not None and before is not None:
        raise InvalidRequestError("give after_id or before_id, not both", param="before_id")
    ids = [info.name for info in models]
    if before is not None:
        end = _position(ids, before, "before_id")
        start = max(0, end - limit)
        has_more = start > 0
    else:
        start = 0 if after is None else _position(ids, after, "after_id") + 1
        end = min(len(ids), start + limit)
        has_more = end < len(ids)
    page = [encode_model(info) for info in models[start:end]]
    return {
        "data": page,
        "has_more": has_more,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
    }


def _limit(raw: str | None) -> int:
    if raw is None:
        return DEFAULT_PAGE_SIZE
    try:
        limit = int(raw)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_PAGE_SIZE:
        raise InvalidRequestError(
            f"limit: must be an integer from 1 to {MAX_PAGE_SIZE}, got {raw!r}", param="limit"
        )
    return limit


def _position(ids: list[str], cursor: str, param: str) -> int:
    try:
        return ids.index(cursor)
    except ValueError:
        raise InvalidRequestError(f"{param}: no model {cursor!r} is listed", param=param) from None
