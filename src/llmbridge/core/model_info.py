"""What a backend says about a model it serves: name, size, context and capabilities."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["Capability", "ModelInfo", "ModelOperation"]

Capability = Literal["completion", "tools", "thinking", "vision", "embedding", "insert"]

ModelOperation = Literal["pull", "push", "delete", "copy", "create"]
"""What a client may ask a model server to do to its models (Ollama's ``/api/pull``,
``/api/push``, ``/api/delete``, ``/api/copy``, ``/api/create``)."""


@dataclass(frozen=True, slots=True)
class ModelInfo:
    """One model as served by the gateway.

    ``name`` is the public name clients use; ``backend_model`` is the name the
    backend knows it by; ``backend`` is the configured backend's name.
    """

    name: str
    backend: str = ""
    backend_model: str = ""
    capabilities: frozenset[Capability] = frozenset({"completion"})
    context_length: int | None = None
    family: str | None = None
    parameter_size: str | None = None
    quantization_level: str | None = None
    format: str | None = None
    size: int | None = None
    """Bytes on disk, when known."""
    digest: str | None = None
    modified_at: float | None = None
    """Unix time."""
    template: str | None = None
    details: dict[str, Any] = field(default_factory=dict)
    """Anything else the backend reported (Ollama ``model_info``, ``parameters``...)."""
