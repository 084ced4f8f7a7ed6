"""The messages of a turn, ordered so that a local model's prefix cache hits.

llama.cpp (the embedded model, Ollama, a llama.cpp server) reuses the evaluation of a
prompt only up to the first byte that differs from the previous one, and on a local
model evaluating the prompt is most of a turn's cost. So what is stable for a session
comes first and what changes every turn comes last (docs/AGENT.md, "Prompt order"):

1. the system prompt (``build_system_prompt``), stable for a session: the persona's
   prompt, the request's custom system prompt, the seed's focus instructions;
2. the history (``agent.memory``): instruction, summaries, pins, older messages, the
   recent exchange, which grows at its end from one turn to the next;
3. the current turn (``build_turn_context`` then the input), in one user message: the
   document passages retrieved for this input and the context providers' blocks
   (eldercare: today's age, this week's vitals, the next appointments), which are
   chosen by the input and by the clock, then the user's input.

The seed (002's ``buildSystemPrompt``) put the document and domain context inside the
system prompt, between the persona and the custom prompt: every turn then changed the
very first message and re-evaluated the whole prompt. Their content is unchanged here,
only their place. They go in the user's message rather than in a system message of
their own after the history: a system message after the conversation started is not
valid everywhere (Anthropic takes system text only before the first turn, and the
tool-emulation prompt gathers all system text at its top), while the current user
message is the last thing on every backend.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmbridge.core.messages import Message, TextPart

__all__ = [
    "FOCUS_INSTRUCTIONS",
    "assemble_turn",
    "build_system_prompt",
    "build_turn_context",
]

FOCUS_INSTRUCTIONS = (
    "CRITICAL INSTRUCTION: You MUST address ONLY the user's CURRENT QUESTION. Previous "
    "conversation is provided SOLELY as background context. You MUST NOT: 1) Answer "
    "questions from previous exchanges, 2) Refer to previous topics unless explicitly "
    "asked, 3) Provide information not directly relevant to the current question. Treat "
    "the current question as if it were asked in isolation, while using context only to "
    "enhance your understanding of what the user is currently asking."
)


def _join(parts: Sequence[str]) -> str:
    """Non-empty parts, stripped, joined by blank lines (the seed's joining)."""
    return "\n\n".join(p.strip() for p in parts if p and p.strip())


def build_system_prompt(
    persona_prompt: str = "",
    custom_prompt: str = "",
    focus_instructions: str = FOCUS_INSTRUCTIONS,
) -> str:
    """The session's stable system prompt: persona, custom prompt, focus instructions.
    Nothing in it depends on the input or the clock."""
    return _join([persona_prompt, custom_prompt, focus_instructions])


def build_turn_context(document_context: str = "", domain_context: Sequence[str] = ()) -> str:
    """This turn's context, in the seed's order: the document section, then each
    context provider's block."""
    return _join([document_context, *domain_context])


def assemble_turn(
    system_prompt: str,
    history: Sequence[Message],
    turn_context: str,
    user_input: str,
) -> list[Message]:
    """The messages a turn sends: the system prompt, the history, then one user
    message holding this turn's context and the input (the module docstring says
    why in that order)."""
    messages: list[Message] = []
    if system_prompt:
        messages.append(Message("system", (TextPart(system_prompt),)))
    messages.extend(history)
    text = _join([turn_context, user_input]) if turn_context.strip() else user_input
    messages.append(Message("user", (TextPart(text),)))
    return messages
