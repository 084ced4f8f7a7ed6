"""``anthropic-beta`` values: which reach an Anthropic backend, which are dropped, and
what the others mean for every other backend.

A client names Anthropic API betas in the ``anthropic-beta`` header, comma-separated
(platform.claude.com/docs/en/api/beta-headers; the official SDKs' ``betas=[...]``);
Claude Code 2.1.330 sends several on every request (tests/gateway/
test_claude_code_requests.py) and its binary knows about fifty. The gateway sorts each
value into one of three kinds, by the table ``BETAS`` (docs/ANTHROPIC.md prints it):

``forward``
    A beta the Anthropic API accepts: an Anthropic backend gets it in its own
    ``anthropic-beta`` header. Other backends have nothing it could switch on (files,
    MCP servers, server tools, cache settings of Anthropic's own) or the gateway
    already reads what it governs from the body (``per-turn-control``'s system turns,
    ``advanced-tool-use``'s deferred tools), so they ignore it.
``retired``
    The feature is generally available, or the beta was withdrawn: the API needs no
    header for it, and a withdrawn name can only make it answer "Unsupported beta
    header". Dropped for every backend.
``mapped``
    The beta changes what the model may do (a longer context, a longer reply,
    thinking between tool calls, tool input streamed as it is written). An Anthropic
    backend gets it; for every other backend the gateway's own behaviour is the
    equivalent, stated in the entry's ``elsewhere`` (for example ``context-1m-*``: the
    backend model's real context is the limit, and ``max_tokens`` is clamped to it).

A value the table does not know is forwarded to an Anthropic backend, which decides,
and ignored elsewhere: a gateway must not refuse a beta newer than itself.

``with_betas`` records what an Anthropic backend gets in the request's
``provider_details`` under ``BETA_DETAILS``, which no body encoder reads; the
Anthropic backend sends it as its header (backends/anthropic.py).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from llmbridge.core.request import ChatRequest

__all__ = [
    "BETAS",
    "BETA_DETAILS",
    "Beta",
    "BetaKind",
    "betas_to_forward",
    "classify",
    "parse_betas",
    "with_betas",
]

BETA_DETAILS = "anthropic-beta"
"""``ChatRequest.provider_details`` key of the values an Anthropic backend gets."""


class BetaKind(StrEnum):
    """What the gateway does with one ``anthropic-beta`` value."""

    FORWARD = "forward"
    RETIRED = "retired"
    MAPPED = "mapped"


@dataclass(frozen=True, slots=True)
class Beta:
    """One row of the table: a value, or a family of dated values (``family``)."""

    name: str
    """The exact value, or the family's prefix up to its date (``context-1m-``)."""
    kind: BetaKind
    meaning: str
    """What it asks of Anthropic's API."""
    elsewhere: str = "ignored"
    """What it means for a backend that is not Anthropic's API."""
    family: bool = False
    """``name`` is a prefix: every dated version (``context-1m-2025-08-07``) matches."""

    def matches(self, value: str) -> bool:
        return value.startswith(self.name) if self.family else value == self.name


_F, _R, _M = BetaKind.FORWARD, BetaKind.RETIRED, BetaKind.MAPPED

BETAS: tuple[Beta, ...] = (
    # -- mapped: they change what the model may do -------------------------------------
    Beta(
        "context-1m-",
        _M,
        "a 1M-token context window (Sonnet 4 and later)",
        "the backend model's own context is the limit: max_tokens is clamped to it "
        "(serving/prepare/fit.py); no larger window can be given to a local model",
        family=True,
    ),
    Beta(
        "output-128k-",
        _M,
        "up to 128k output tokens (Claude 3.7 Sonnet)",
        "max_tokens is honoured up to the route's and the model's own limit, to which "
        "it is clamped",
        family=True,
    ),
    Beta(
        "interleaved-thinking-",
        _M,
        "thinking between tool calls, after each tool result",
        "a thinking model thinks on every request of a tool loop, after tool results "
        "too, as the thinking policy decides for each request",
        family=True,
    ),
    Beta(
        "fine-grained-tool-streaming-",
        _M,
        "tool input streamed as written, without buffering or JSON validation",
        "tool input comes as one input_json_delta of healed, valid JSON when the call "
        "is complete: a stream this beta allows (it only permits partial JSON)",
        family=True,
    ),
    Beta(
        "token-efficient-tools-",
        _M,
        "a shorter tool-call format (Claude 3.7 Sonnet; built into Claude 4)",
        "no effect: a local model writes tool calls in its own chat template's format",
        family=True,
    ),
    Beta(
        "context-management-",
        _M,
        "context editing: the API clears old tool results or thinking (context_management)",
        "the gateway makes the clear_tool_uses and clear_thinking edits itself "
        "(features/context_editing.py) and the reply's context_management says what they "
        "cleared; compact_* edits are not applied",
        family=True,
    ),
    Beta(
        "effort-",
        _M,
        "output_config.effort: how much the model spends on a reply",
        "the thinking effort when thinking is on: Ollama's think level, reasoning_effort, "
        "Gemini's thinkingLevel or thinkingBudget",
        family=True,
    ),
    # -- retired: generally available or withdrawn; dropped everywhere -----------------
    Beta("messages-2023-12-15", _R, "the Messages API itself, in its beta"),
    Beta("tools-2024-04-04", _R, "tool use, in its beta (GA May 2024)"),
    Beta("tools-2024-05-16", _R, "tool use, second beta (GA)"),
    Beta("max-tokens-3-5-sonnet-2024-07-15", _R, "8k output for Claude 3.5 Sonnet (GA)"),
    Beta("prompt-caching-2024-07-31", _R, "prompt caching, cache_control (GA Dec 2024)"),
    Beta("pdfs-2024-09-25", _R, "PDF document blocks (GA)"),
    Beta("message-batches-2024-09-24", _R, "the Message Batches API (GA)"),
    Beta("token-counting-2024-11-01", _R, "/v1/messages/count_tokens (GA)"),
    # -- forward: Anthropic's own features; nothing to switch on elsewhere --------------
    Beta("claude-code-20250219", _F, "marks Claude Code's requests"),
    Beta("oauth-2025-04-20", _F, "OAuth bearer tokens instead of an API key"),
    Beta(
        "advanced-tool-use-",
        _F,
        "tool search, deferred tools (defer_loading)",
        "ignored: deferred tools are withheld until a tool_reference loads them",
        family=True,
    ),
    Beta("tool-search-tool-2025-10-19", _F, "the tool search tool, earlier name"),
    Beta("structured-outputs-", _F, "output_config.format json_schema", family=True),
    Beta("per-turn-control-2026-07-01", _F, "settings on system turns (output_config)"),
    Beta("mid-conversation-tool-changes-2026-07-01", _F, "tools that change mid-session"),
    Beta("mid-conversation-system-", _F, "system turns inside messages", family=True),
    Beta("extended-cache-ttl-2025-04-11", _F, "1-hour cache_control ttl"),
    Beta(
        "prompt-caching-scope-",
        _F,
        "cache_control scope (global: a prefix cached across sessions)",
        "ignored: cache_control is Anthropic's; a local model's prefix cache needs none",
        family=True,
    ),
    Beta("files-api-2025-04-14", _F, "the Files API and file blocks"),
    Beta("mcp-client-2025-04-04", _F, "MCP servers called by the API"),
    Beta("mcp-servers-2025-12-04", _F, "MCP servers called by the API, newer"),
    Beta("web-search-2025-03-05", _F, "the web search server tool"),
    Beta("web-fetch-2025-09-10", _F, "the web fetch server tool"),
    Beta("code-execution-", _F, "the code execution server tool", family=True),
    Beta("computer-use-", _F, "the computer use tool", family=True),
    Beta("skills-2025-10-02", _F, "Agent Skills in the container"),
    Beta("model-context-window-exceeded-2025-08-26", _F, "that stop reason"),
    Beta("redact-thinking-2026-02-12", _F, "redacted thinking blocks"),
    Beta("fast-mode-2026-02-01", _F, "Anthropic's faster serving tier"),
)
"""The table, in the order docs/ANTHROPIC.md prints it; the first match wins."""


def parse_betas(headers: Iterable[str]) -> tuple[str, ...]:
    """The values of every ``anthropic-beta`` header, comma-separated, each once, in
    the order sent (the SDKs send one header; a proxy may send several)."""
    seen: dict[str, None] = {}
    for header in headers:
        for value in header.split(","):
            if value := value.strip():
                seen.setdefault(value, None)
    return tuple(seen)


def classify(value: str) -> Beta | None:
    """The table's row for ``value``; ``None`` for a value the table does not know."""
    return next((beta for beta in BETAS if beta.matches(value)), None)


def betas_to_forward(values: Iterable[str]) -> tuple[str, ...]:
    """What an Anthropic backend gets: every value but the retired ones."""
    return tuple(
        value
        for value in values
        if (beta := classify(value)) is None or beta.kind is not BetaKind.RETIRED
    )


def with_betas(request: ChatRequest, values: Iterable[str]) -> ChatRequest:
    """``request`` carrying, for an Anthropic backend, the betas it should get."""
    forward = betas_to_forward(values)
    if not forward:
        return request
    details = {**(request.provider_details or {}), BETA_DETAILS: list(forward)}
    return replace(request, provider_details=details)
