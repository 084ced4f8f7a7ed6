"""The OpenCode server (``opencode serve``) as a backend: see ``backend``."""

from llmbridge.backends.opencode.backend import LatencyBreakdown, OpenCodeBackend
from llmbridge.backends.opencode.deadlines import OpenCodeTimeouts
from llmbridge.backends.opencode.server import OpenCodeProvider, SpawnSettings

__all__ = [
    "LatencyBreakdown",
    "OpenCodeBackend",
    "OpenCodeProvider",
    "OpenCodeTimeouts",
    "SpawnSettings",
]
