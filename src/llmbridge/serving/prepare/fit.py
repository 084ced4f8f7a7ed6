"""The steps that fit a request to the backend its model resolved to, in order.

``prepare`` is what every caller's request goes through before its backend sees
it: the backend's model name; another backend's opaque reasoning and compaction items
out of the history (``carried_state.py``); a compaction asked of a backend that cannot
compact made a request for a summary (features/compaction.py); Claude Code's
billing-header line out of the system prompt for a backend that is not Anthropic's API
(features/billing_header.py), and the client's context edits applied there
(features/context_editing.py);
a fill-in-the-middle ``suffix`` refused (400 naming ``suffix``) where the backend or
model cannot fill a gap (``capabilities.py``); thinking per the policy
(features/thinking.py); ``max_tokens`` clamped to the model's limit; sampling
parameters fitted to what the backend takes (``sampling.py``); tool choice in a form
the backend honours (features/tool_choice.py); for a backend that allocates its
context window per request (Ollama), a window that holds the request
(``context_size.py``); for a model without native tools, the decision to emulate them
(``capabilities.py``, then features/tool_emulation.py in ``Models``). What changed
comes back as ``Changes`` (``changes.py``); a request nothing changed keeps the
client's own body for the pass-through path (``_relays``, core/relay.py).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from llmbridge.core.frozen import faster_frozen_init
from llmbridge.core.request import ChatRequest, ThinkingConfig
from llmbridge.features.billing_header import drop_billing_header
from llmbridge.features.compaction import summary_request
from llmbridge.features.context_editing import apply_context_edits
from llmbridge.features.thinking import apply_thinking_policy, can_think
from llmbridge.features.tool_choice import apply_tool_choice
from llmbridge.serving.prepare.capabilities import check_fill_in_middle, has_native_tools
from llmbridge.serving.prepare.carried_state import drop_unreadable
from llmbridge.serving.prepare.changes import UNCHANGED, Changes
from llmbridge.serving.prepare.context_size import context_size, request_size
from llmbridge.serving.prepare.sampling import fit_params
from llmbridge.serving.router import ModelRouter, Resolved

__all__ = ["Prepared", "prepare"]


@faster_frozen_init
@dataclass(frozen=True, slots=True)
class Prepared:
    """A request ready for ``target``'s backend."""

    request: ChatRequest
    target: Resolved
    changes: Changes


async def prepare(
    chat: ChatRequest, target: Resolved, router: ModelRouter, thinking_policy: str
) -> Prepared:
    """``chat`` (naming a public model) as ``target``'s backend should get it."""
    asked = chat
    backend, route = target.backend, target.route
    capabilities = backend.capabilities
    if chat.model != target.backend_model:  # a copy only when the name changes
        chat = replace(chat, model=target.backend_model)
    chat, dropped_items = drop_unreadable(chat, backend.name)
    compaction = None
    if chat.compaction:
        compaction = "native" if capabilities.compaction else "summary"
        if not capabilities.compaction:
            chat = summary_request(chat)
    if not capabilities.anthropic_api:
        # Claude Code's billing line (a per-request hash in some versions) in front of
        # the system prompt would spoil a local model's prefix cache on every turn.
        chat = drop_billing_header(chat)
        # Anthropic clears what the client asked it to (context editing) itself.
        chat, context_edits = apply_context_edits(chat)
    else:
        context_edits = ()
    wants_thinking = chat.thinking is not None and chat.thinking.enabled
    fills_gap = chat.completion is not None and chat.completion.suffix is not None
    # Ollama's window comes from the route, else from what the model reports.
    sizes_context = capabilities.context_option and not (route and route.context_length)
    info = None
    if (
        wants_thinking
        or chat.params.max_tokens is not None
        or chat.tools
        or fills_gap
        or sizes_context
    ):
        info = await router.model_info(target)
    if fills_gap:
        check_fill_in_middle(backend, info)
    dropped = False
    if wants_thinking:
        capable = can_think(chat.model, info, route.thinking if route else None)
        chat, dropped = apply_thinking_policy(
            chat,
            capable=capable,
            policy="strict" if thinking_policy == "strict" else "drop",
            effort_levels=capabilities.thinking_effort,
        )
    params, fitted = fit_params(chat.params, capabilities)
    limits = [x for x in (route and route.max_tokens, info and info.context_length) if x]
    clamped = None
    if limits and params.max_tokens is not None and params.max_tokens > min(limits):
        # Claude Code asks for 32000 and more; a backend may reject or mis-size that.
        clamped = min(limits)
        params = replace(params, max_tokens=clamped)
    if params is not chat.params:
        chat = replace(chat, params=params)
    native_tools = has_native_tools(backend, info, route) if chat.tools else True
    chat = apply_tool_choice(chat, native=capabilities.tool_choice, emulated=not native_tools)
    if capabilities.context_option:
        # Ollama silently drops the start of a prompt longer than its window
        # (context_size.py); said in x-llmbridge-params as num_ctx=N.
        window = route.context_length if route is not None else None
        if window is None and info is not None:
            window = info.context_length
        needed = await request_size(chat)
        num_ctx = context_size(window=window, client=chat.params.num_ctx, needed=needed)
        if num_ctx is not None:
            chat = replace(chat, params=replace(chat.params, num_ctx=num_ctx))
            fitted = (*fitted, f"num_ctx={num_ctx}")
    emulated = bool(chat.tools) and not native_tools
    if (
        dropped
        or emulated
        or clamped is not None
        or fitted
        or context_edits
        or dropped_items
        or compaction
    ):
        changes = Changes(
            thinking_dropped=dropped,
            tools_emulated=emulated,
            max_tokens=clamped,
            params=fitted,
            context_edits=context_edits,
            dropped_items=dropped_items,
            compaction=compaction,
        )
    else:
        changes = UNCHANGED  # the common case builds nothing
    if chat.relay is not None and not _relays(asked, chat, target, changes):
        chat = replace(chat, relay=None)
    return Prepared(chat, target, changes)


def _relays(asked: ChatRequest, fitted: ChatRequest, target: Resolved, changes: Changes) -> bool:
    """Whether ``fitted`` takes the pass-through path (core/relay.py): its backend
    speaks the client's dialect, the route allows it, and serving changed nothing
    but the model's name (every step above leaves a field it does not change the
    same object), so the client's body says what the backend must get; or, for a
    backend that sizes its context per request, that and ``num_ctx``. A request
    with tools relays only where nothing needs to heal the arguments (the route's
    ``passthrough: true``, or a backend whose arguments are trusted)."""
    relay = asked.relay
    capabilities = target.backend.capabilities
    setting = target.route.passthrough if target.route is not None else None
    if relay is None or capabilities.relays != relay.dialect or setting is False:
        return False
    params_kept = fitted.params is asked.params
    if changes is not UNCHANGED:
        # Ollama's context window is set in the client's body (dialects/ollama/relay.py).
        if not (capabilities.context_option and _sets_only_num_ctx(asked, fitted, changes)):
            return False
        params_kept = True
    if fitted.completion is not None:
        return False
    if fitted.tools and not (setting or capabilities.trusted_tool_arguments):
        return False
    return (
        fitted.messages is asked.messages
        and params_kept
        and fitted.tools is asked.tools
        and fitted.tool_choice is asked.tool_choice
        and _same_thinking(asked.thinking, fitted.thinking)
        and fitted.response_format is asked.response_format
    )


def _sets_only_num_ctx(asked: ChatRequest, fitted: ChatRequest, changes: Changes) -> bool:
    """Whether serving changed nothing but ``num_ctx`` (context_size.py), which a relay
    sets in the client's body as it does the model's name."""
    num_ctx = fitted.params.num_ctx
    return changes == Changes(params=(f"num_ctx={num_ctx}",)) and (
        replace(fitted.params, num_ctx=asked.params.num_ctx) == asked.params
    )


def _same_thinking(asked: ThinkingConfig | None, fitted: ThinkingConfig | None) -> bool:
    """Whether thinking is as the client's body says it: the same config, or one that
    differs only by the effort derived for backends that take levels (from the client's
    budget, or the effort it gave, again), which the body states in its own terms."""
    if fitted is asked:
        return True
    if asked is None or fitted is None or fitted != replace(asked, effort=fitted.effort):
        return False
    # Derived from the client's budget, or serving's default where the client named no
    # effort: the body says what the client asked in the backend's own terms.
    return fitted.effort == asked.effort or asked.budget_tokens is not None or asked.effort is None
