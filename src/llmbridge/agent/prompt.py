"""The system prompt, assembled in the seed's order (``buildSystemPrompt``):

1. the persona's prompt,
2. document context (passages retrieved for the input),
3. domain context from the context providers (eldercare, ...),
4. the request's custom system prompt,
5. the focus instructions.

Empty parts are left out and the rest joined by blank lines, as in the seed.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["FOCUS_INSTRUCTIONS", "build_system_prompt"]

FOCUS_INSTRUCTIONS = (
    "CRITICAL INSTRUCTION: You MUST address ONLY the user's CURRENT QUESTION. Previous "
    "conversation is provided SOLELY as background context. You MUST NOT: 1) Answer "
    "questions from previous exchanges, 2) Refer to previous topics unless explicitly "
    "asked, 3) Provide information not directly relevant to the current question. Treat "
    "the current question as if it were asked in isolation, while using context only to "
    "enhance your understanding of what the user is currently asking."
)


def build_system_prompt(
    persona_prompt: str = "",
    document_context: str = "",
    domain_context: Sequence[str] = (),
    custom_prompt: str = "",
    focus_instructions: str = FOCUS_INSTRUCTIONS,
) -> str:
    parts = [persona_prompt, document_context, *domain_context, custom_prompt, focus_instructions]
    return "\n\n".join(p.strip() for p in parts if p and p.strip())
