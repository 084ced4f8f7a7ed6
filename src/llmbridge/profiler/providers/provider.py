"""The ``SessionProvider`` contract (seed 004): what the eval runner drives.

A provider is initialised for one (mode, model) group, creates a fresh session per
scenario iteration (working in the iteration's workspace, when it has one), sends
prompts with a deadline, exports the session as a trace, and destroys it.
``PromptTimeoutError`` carries what was measured up to the deadline, so a timed-out
iteration is still recorded.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from llmbridge.profiler.records.types import (
    PromptResult,
    ProviderConfig,
    SessionHandle,
    SessionTrace,
)

__all__ = ["PromptTimeoutError", "ProviderError", "SessionProvider"]


class ProviderError(Exception):
    """The provider could not do what was asked (server down, session gone...)."""


class PromptTimeoutError(ProviderError):
    def __init__(self, message: str, result: PromptResult) -> None:
        super().__init__(message)
        self.result = result


class SessionProvider(Protocol):
    id: str

    async def init(self, config: ProviderConfig) -> None:
        """Get ready for one (mode, model) group; may reuse what an earlier init made."""

    async def create_session(
        self,
        *,
        system_instructions: str | None,
        scenario_id: str,
        iteration: int,
        workspace: Path | None = None,
    ) -> SessionHandle:
        """A fresh session. ``system_instructions`` are the scenario's; the provider
        puts the mode's (``ProviderConfig.system_instructions``) before them
        (``modes.combine_instructions``). ``workspace``: the directory the agent's
        tools work in, when the scenario has one."""
        ...

    async def prompt(
        self,
        handle: SessionHandle,
        text: str,
        timeout: float,  # noqa: ASYNC109 - seed 004's signature
    ) -> PromptResult:
        """Send ``text`` and wait for the turn to end; ``PromptTimeoutError`` after
        ``timeout`` seconds (the turn is aborted first)."""
        ...

    async def export_session(self, handle: SessionHandle) -> SessionTrace: ...

    async def destroy_session(self, handle: SessionHandle) -> None: ...

    async def shutdown(self) -> None: ...
