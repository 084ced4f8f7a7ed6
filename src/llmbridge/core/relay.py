"""The pass-through path's request: ``RelayBody``, the client's own body, kept beside
the decoded request for a backend of the client's dialect.

When a client speaks its backend's own dialect and serving changed nothing of what
the backend would get (serving/prepare/fit.py decides), the backend sends the body the
client sent, with only what the route changes set (the backend's model name, and what
the gateway needs to meter the reply, such as OpenAI's ``stream_options``), and its
reply's bytes go back as they came (``core.events.Relayed``): no re-encoding of the
request, no decoding into events and encoding again of the reply. Everything else of a
request (admission, limits, the ledger, retries and fallbacks, the breaker, metrics,
spans) is the same on both paths: they share the ``Exchange`` and ``Models.open``.
docs/PASSTHROUGH.md says when it applies and what it keeps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmbridge.core.frozen import faster_frozen_init

__all__ = ["RelayBody"]


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class RelayBody:
    """A client's request body as it came, for a backend that speaks ``dialect``."""

    dialect: str
    """The client's dialect: ``openai`` (chat completions), ``responses``, ``anthropic``,
    ``gemini`` or ``ollama``."""
    body: dict[str, Any]
    """The body, parsed (never changed: a backend copies what it sets)."""
    raw: bytes
    """The body's bytes, sent as they are when nothing must be set."""
    model: str | None = None
    """The model the client named where its body does not name one (Gemini's is in the
    URL): the name a reply is to carry where the route maps it to another."""
