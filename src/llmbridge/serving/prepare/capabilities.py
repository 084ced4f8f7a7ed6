"""What the resolved model can do itself: call tools, fill in the middle.

Both answers read the backend's ``Capabilities`` first, then the route, then what the
backend reports about the model (``ModelInfo.capabilities``) where it reports the
model's own (Ollama, the embedded model). ``prepare`` (``fit.py``) uses them to
decide on tool emulation and to refuse a ``suffix`` it cannot serve.
"""

from __future__ import annotations

from llmbridge.backends.base import Backend
from llmbridge.core.errors import UnsupportedFeatureError
from llmbridge.core.model_info import ModelInfo
from llmbridge.serving.config import ModelRoute

__all__ = ["check_fill_in_middle", "has_native_tools"]


def has_native_tools(backend: Backend, info: ModelInfo | None, route: ModelRoute | None) -> bool:
    """Whether the model calls tools itself: never on a backend without tools
    (OpenCode); else the route's ``tools`` setting; else the backend's report where it
    reports the model's own capabilities (Ollama, the embedded model); else yes:
    OpenAI-compatible servers and Anthropic take tools natively."""
    capabilities = backend.capabilities
    if not capabilities.tools:
        return False
    if route is not None and route.tools is not None:
        return route.tools
    if capabilities.model_capabilities and info is not None:
        return "tools" in info.capabilities
    return True


def check_fill_in_middle(backend: Backend, info: ModelInfo | None) -> None:
    """A ``suffix`` needs a backend that fills a gap natively (``Capabilities.fim``)
    and, where the backend reports the model's own capabilities, a model that says
    ``insert`` (Ollama's name for it; the embedded model's GGUF has FIM tokens).
    Serving it as a plain completion would write text that ignores the suffix.

    Raises:
        UnsupportedFeatureError: either is missing (400 naming ``suffix``).
    """
    capabilities = backend.capabilities
    if not capabilities.fim:
        raise UnsupportedFeatureError(
            f"'suffix' (fill-in-the-middle) is not supported by backend '{backend.name}' "
            f"({backend.kind}); send the request without a suffix",
            param="suffix",
        )
    if capabilities.model_capabilities and info is not None and "insert" not in info.capabilities:
        raise UnsupportedFeatureError(
            f"'suffix' (fill-in-the-middle) is not supported by model '{info.backend_model}' "
            f"on backend '{backend.name}': it has no fill-in-the-middle tokens or template",
            param="suffix",
        )
