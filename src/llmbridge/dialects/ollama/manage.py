"""Ollama's model-management requests (``/api/pull``, ``/api/push``, ``/api/delete``,
``/api/copy``, ``/api/create``): validated, and re-addressed to a backend's names.

The gateway keeps no models of its own; it forwards these requests to the Ollama
server that serves the model they name (gateway/routes/ollama_models.py). So a body
is validated as Ollama validates it (a field of the wrong type is a 400 naming it; a
body that names no model is a 400 ``model is required``, Ollama's words), then sent
on as the client sent it but for the model names, which become the backend's own (a
route's ``model:``): every field the gateway does not read (``insecure``, ``files``,
``template``, ``parameters``...) goes through untouched.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.model_info import ModelOperation
from llmbridge.dialects.ollama.errors import VALIDATION_WORDING
from llmbridge.dialects.ollama.types import (
    CopyRequestBody,
    CreateRequestBody,
    DeleteRequestBody,
    PullRequestBody,
    PushRequestBody,
)
from llmbridge.dialects.validation import validate_body

__all__ = ["ModelRequest", "decode_model_request"]

_BODIES: dict[ModelOperation, type[BaseModel]] = {
    "pull": PullRequestBody,
    "push": PushRequestBody,
    "delete": DeleteRequestBody,
    "copy": CopyRequestBody,
    "create": CreateRequestBody,
}
_STREAMED: frozenset[ModelOperation] = frozenset({"pull", "push", "create"})
"""Operations Ollama answers with progress lines (unless ``stream: false``)."""


@dataclass(frozen=True, slots=True)
class ModelRequest:
    """One model-management request, decoded."""

    operation: ModelOperation
    model: str
    """The model it is about: a copy's ``source``, a create's new model."""
    other: str | None
    """The second model it names: a copy's ``destination``, the model a create is made
    ``from`` (``None``: none)."""
    streamed: bool
    """Ollama answers with NDJSON progress lines (a pull, push or create without
    ``stream: false``); else one JSON object, or an empty body (delete, copy)."""
    body: dict[str, Any]
    """The body as the client sent it."""

    def for_backend(self, model: str, other: str | None) -> dict[str, Any]:
        """The body to send a backend that knows ``model`` (and ``other``) by these
        names; the deprecated ``name`` becomes ``model``, as Ollama reads it."""
        body = dict(self.body)
        if self.operation == "copy":
            body["source"], body["destination"] = model, other
            return body
        body.pop("name", None)
        body["model"] = model
        if self.operation == "create" and other is not None:
            body["from"] = other
        return body


def decode_model_request(operation: ModelOperation, body: object) -> ModelRequest:
    """Validate a model-management body (module docstring).

    Raises:
        InvalidRequestError: not a JSON object, a field of the wrong type, or no model
            named; ``param`` names the field.
    """
    parsed = validate_body(_BODIES[operation], body, VALIDATION_WORDING)
    assert isinstance(body, dict)  # validate_body refuses anything else
    if isinstance(parsed, CopyRequestBody):
        return ModelRequest(operation, parsed.source, parsed.destination, False, body)
    assert isinstance(parsed, PullRequestBody | DeleteRequestBody | CreateRequestBody)
    name = parsed.model_name
    if not name:
        raise InvalidRequestError("model is required", param="model")
    other = (parsed.from_ or None) if isinstance(parsed, CreateRequestBody) else None
    stream = None if isinstance(parsed, DeleteRequestBody) else parsed.stream
    streamed = operation in _STREAMED and stream is not False
    return ModelRequest(operation, name, other, streamed, body)
