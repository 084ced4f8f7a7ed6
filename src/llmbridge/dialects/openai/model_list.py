"""OpenAI's model list (``GET /v1/models``), both directions.

``encode_*`` answers the gateway's ``/v1/models``; ``decode_models`` reads an
OpenAI-compatible server's list so a backend can report what it serves.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.model_info import ModelInfo
from llmbridge.dialects.fields import nonempty_str, number_or_none, str_or_none

__all__ = ["decode_models", "encode_model", "encode_models"]


def encode_model(info: ModelInfo) -> dict[str, Any]:
    """One ``model`` object; ``owned_by`` names the backend serving it."""
    return {
        "id": info.name,
        "object": "model",
        "created": int(info.modified_at or 0),
        "owned_by": info.backend or "llmbridge",
    }


def encode_models(models: Iterable[ModelInfo]) -> dict[str, Any]:
    """The ``list`` object of every model."""
    return {"object": "list", "data": [encode_model(info) for info in models]}


def decode_models(body: object) -> list[ModelInfo]:
    """The models an OpenAI-compatible server lists (``name`` and ``backend_model`` are its id).

    Raises:
        BackendProtocolError: the body is not a model list.
    """
    items = body.get("data") if isinstance(body, dict) else None
    if not isinstance(items, list):
        raise BackendProtocolError("the backend's model list has no 'data' array")
    models: list[ModelInfo] = []
    for position, item in enumerate(items):
        model_id = nonempty_str(item.get("id")) if isinstance(item, dict) else None
        if model_id is None:
            raise BackendProtocolError(f"the backend's model list entry {position} has no id")
        owned_by = str_or_none(item.get("owned_by"))
        models.append(
            ModelInfo(
                name=model_id,
                backend_model=model_id,
                modified_at=number_or_none(item.get("created")),
                details={"owned_by": owned_by} if owned_by is not None else {},
            )
        )
    return models
