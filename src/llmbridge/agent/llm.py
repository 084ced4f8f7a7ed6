"""Calling models the way the gateway's routes do, without HTTP.

``ModelGateway.chat`` takes a ``ChatRequest`` naming a public model and streams the
reply through the same steps as ``gateway.pipeline.serve_chat``: the router resolves
the model, ``pipeline.prepare`` fits the request to the backend (its model name,
thinking policy, ``max_tokens`` clamp, tool choice), a model without native tools
gets them through ``features.tool_emulation``, and every reply's tool arguments are
healed (``features.tool_healing``). So the agent offers tools on every backend,
native or emulated, and its summaries come through the real pipeline.

It also says what the agent needs to know about a model: its backend (turns and
background summaries on one backend are ordered by ``agent.turns``), and its context
window (the route's ``context_length``, else what the backend reports).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator

from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.features.tool_emulation import emulate_tool_calls
from llmbridge.features.tool_healing import heal_tool_calls
from llmbridge.gateway.pipeline import TOOLS_HEADER, prepare
from llmbridge.serving.router import ModelRouter

__all__ = ["ModelGateway"]


class ModelGateway:
    """The gateway's model pipeline as an in-process ``ChatFn``."""

    def __init__(self, router: ModelRouter, *, thinking_policy: str = "drop") -> None:
        self.router = router
        self.thinking_policy = thinking_policy

    def backend_kind(self, model: str) -> str:
        """The kind of backend ``model`` resolves to (``ollama``, ``openai``, ...)."""
        return self.router.resolve(model).backend.kind

    def backend_name(self, model: str) -> str:
        """The configured backend ``model`` resolves to."""
        return self.router.resolve(model).backend.name

    async def context_window(self, model: str) -> int | None:
        """``model``'s context window in tokens: the route's ``context_length``, else
        the backend's report (cached by the router), else ``None`` (unknown)."""
        resolved = self.router.resolve(model)
        if resolved.route is not None and resolved.route.context_length:
            return resolved.route.context_length
        info = await self.router.model_info(resolved)
        return info.context_length if info is not None and info.context_length else None

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        """Stream the reply to ``request`` (``request.model`` is the public name).
        Closing this stream closes the backend's."""
        resolved = self.router.resolve(request.model)
        prepared, changed = await prepare(request, resolved, self.router, self.thinking_policy)
        if changed.get(TOOLS_HEADER) == "emulated":
            source = emulate_tool_calls(resolved.backend.chat, prepared)
        else:
            source = resolved.backend.chat(prepared)
        events = heal_tool_calls(source, prepared.tools)
        try:
            async for event in events:
                yield event
        finally:
            aclose = getattr(events, "aclose", None)
            if aclose is not None:
                await aclose()
