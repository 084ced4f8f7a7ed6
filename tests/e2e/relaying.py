"""A gateway that relays a real client's requests to another gateway, for the
end-to-end tests that run a real client on the pass-through path (docs/PASSTHROUGH.md).

The client talks to the front gateway, whose one backend speaks the client's own
dialect (``type: anthropic`` for Claude Code, ``openai`` for OpenCode's provider...) and
points at an inner gateway that serves the test's scripted backend. Every route says
``passthrough: true`` (a real client sends tools, and the inner gateway's tool calls
need no healing), so each generation the client asks for is relayed as bytes; the
front gateway is wrapped in a ``Recorder`` so a test can check, from the reply's
``x-llmbridge-path`` header, that the pass-through path served it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from tests.conftest import RunningServer
from tests.e2e.recording import Exchange, Recorder

GENERATION_PATHS = (
    "/v1/chat/completions",
    "/v1/messages",
    "/v1/responses",
    ":generateContent",
    ":streamGenerateContent",
    "/api/chat",
)
"""Where a client asks for a generation (the routes the pass-through path can serve)."""


@contextmanager
def relaying_gateway(
    upstream_url: str, backend_type: str, *, route: dict[str, Any] | None = None
) -> Iterator[tuple[RunningServer, Recorder]]:
    """The front gateway: one ``backend_type`` backend at ``upstream_url`` serving every
    model name on the pass-through path (``route``: more of the route's settings), each
    HTTP exchange kept."""
    config = GatewayConfig.model_validate(
        {
            "backends": {
                "upstream": {
                    "type": backend_type,
                    "url": upstream_url,
                    "api_key": "sk-inner",
                }
            },
            "default_backend": "upstream",
            "models": [{"name": "*", "backend": "upstream", "passthrough": True, **(route or {})}],
        }
    )
    app = create_app(config)
    recorder = Recorder(app)
    with RunningServer(recorder, http=http_protocol(app)) as server:
        yield server, recorder


def generations(recorder: Recorder) -> list[Exchange]:
    """The exchanges in which the client asked for a generation."""
    return [e for e in recorder.exchanges if e.path.endswith(GENERATION_PATHS)]


def paths_served(recorder: Recorder) -> list[str]:
    """Which path served each generation: ``passthrough``, or ``translated``."""
    return [e.response_headers.get("x-llmbridge-path", "translated") for e in generations(recorder)]
