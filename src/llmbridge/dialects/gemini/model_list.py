"""Gemini's model list (``GET /v1beta/models``, ``GET /v1beta/models/{model}``), both
directions.

``GET /v1beta/models`` answers ``{"models": [Model...], "nextPageToken"?}``, paged by
``pageSize`` (default 50, at most 1000) and ``pageToken`` (ai.google.dev/api/models);
``GET /v1beta/models/{model}`` one ``Model``. Names are ``models/<name>``, which the
google-genai SDK and Gemini CLI send back as is.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.model_info import Capability, ModelInfo
from llmbridge.dialects.fields import ReplyFields, int_or_none

__all__ = [
    "DEFAULT_PAGE_SIZE",
    "MAX_PAGE_SIZE",
    "decode_models",
    "encode_model",
    "encode_model_list",
]

DEFAULT_PAGE_SIZE = 50
"""The Models API's page size when ``pageSize`` is absent or 0."""
MAX_PAGE_SIZE = 1000
"""The largest ``pageSize`` the Models API honours (larger values are clamped)."""

_GENERATION_METHODS = ("generateContent", "streamGenerateContent", "countTokens")
_EMBEDDING_METHODS = ("embedContent", "batchEmbedContents")

_MALFORMED = "the Gemini backend sent a malformed reply: "
_FIELDS = ReplyFields(lambda field, expected: f"{_MALFORMED}{field} is not {expected}")


def encode_model(info: ModelInfo) -> dict[str, Any]:
    """One ``Model``, as ``google.genai.types.Model`` reads it.

    Generation methods are listed unless the model only embeds; the embedding methods
    when it embeds. Token limits are the context length, when the backend reports it.
    """
    methods: list[str] = []
    embeds = "embedding" in info.capabilities
    if "completion" in info.capabilities or not embeds:
        methods += _GENERATION_METHODS
    if embeds:
        methods += _EMBEDDING_METHODS
    model: dict[str, Any] = {
        "name": f"models/{info.name}",
        "baseModelId": info.name,
        "version": "001",
        "displayName": info.name,
        "description": f"{info.name}, served by llmbridge",
    }
    if info.context_length is not None:
        # The reply cannot be longer than the context it is written into.
        model["inputTokenLimit"] = info.context_length
        model["outputTokenLimit"] = info.context_length
    model["supportedGenerationMethods"] = methods
    if "thinking" in info.capabilities:
        model["thinking"] = True
    return model


def encode_model_list(models: Sequence[ModelInfo], query: Mapping[str, str]) -> dict[str, Any]:
    """The page of ``models`` (in the gateway's order) that ``query`` asks for.

    ``pageToken`` is the position to continue from, as an earlier page's
    ``nextPageToken`` gave it; ``nextPageToken`` is absent on the last page.

    Raises:
        InvalidRequestError: ``pageSize`` is not a non-negative integer, or
            ``pageToken`` is not one this gateway gave; ``param`` names the field.
    """
    size = _page_size(query.get("pageSize"))
    start = _page_start(query.get("pageToken"), len(models))
    end = min(len(models), start + size)
    page: dict[str, Any] = {"models": [encode_model(info) for info in models[start:end]]}
    if end < len(models):
        page["nextPageToken"] = str(end)
    return page


def _page_size(raw: str | None) -> int:
    if raw is None or raw == "":
        return DEFAULT_PAGE_SIZE
    try:
        size = int(raw)
    except ValueError:
        size = -1
    if size < 0:
        raise InvalidRequestError(
            f"pageSize: must be a non-negative integer, got {raw!r}", param="pageSize"
        )
    return min(size, MAX_PAGE_SIZE) or DEFAULT_PAGE_SIZE


def _page_start(raw: str | None, total: int) -> int:
    if raw is None or raw == "":
        return 0
    if raw.isascii() and raw.isdigit() and int(raw) <= total:
        return int(raw)
    raise InvalidRequestError(f"pageToken: {raw!r} is not a valid page token", param="pageToken")


def decode_models(body: object) -> list[ModelInfo]:
    """The models of a ``ListModelsResponse`` (client side), ``models/`` stripped.

    Raises:
        BackendProtocolError: the body is not a model list.
    """
    listing = _FIELDS.required_object(body, "the body")
    infos: list[ModelInfo] = []
    for position, raw in enumerate(_FIELDS.optional_list(listing.get("models"), "models")):
        model = _FIELDS.required_object(raw, f"models.{position}")
        name = _FIELDS.required_string(model.get("name"), f"models.{position}.name")
        methods = model.get("supportedGenerationMethods")
        methods = methods if isinstance(methods, list) else []
        capabilities: set[Capability] = set()
        if "generateContent" in methods or not methods:
            capabilities.add("completion")
        if "embedContent" in methods or "batchEmbedContents" in methods:
            capabilities.add("embedding")
        if model.get("thinking") is True:
            capabilities.add("thinking")
        details: dict[str, Any] = {
            key: model[key]
            for key in ("displayName", "description", "version", "outputTokenLimit")
            if key in model
        }
        infos.append(
            ModelInfo(
                name=name.removeprefix("models/"),
                capabilities=frozenset(capabilities),
                context_length=int_or_none(model.get("inputTokenLimit")),
                details=details,
            )
        )
    return infos
