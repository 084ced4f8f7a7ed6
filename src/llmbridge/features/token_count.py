"""Estimate token counts without a tokenizer, for any backend.

The algorithm is seed 001's (claude-code-ollama-proxy): split the text on
whitespace; a word of up to four characters is one token, a longer word is one token
per started four-character chunk. It is deliberately tokenizer-free so the same
number comes out whatever the backend, and it counts every kind of content a
request carries (system, text, thinking, tool calls, tool results, tool definitions)
because an estimate that skips tool blocks breaks clients' context management.
"""

from __future__ import annotations

import orjson

from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest

__all__ = ["IMAGE_TOKENS", "count_message_tokens", "count_request_tokens", "count_text_tokens"]

IMAGE_TOKENS = 256
"""A flat estimate per image; the true figure depends on the model's vision encoder."""


def count_text_tokens(text: str) -> int:
    """Tokens in ``text`` by the word / four-character rule."""
    total = 0
    for word in text.split():
        total += (len(word) + 3) // 4
    return total


def count_message_tokens(message: Message) -> int:
    total = 0
    for part in message.parts:
        if isinstance(part, TextPart | ThinkingPart):
            total += count_text_tokens(part.text)
        elif isinstance(part, ToolCallPart):
            total += count_text_tokens(part.name)
            total += count_text_tokens(part.raw_arguments or orjson.dumps(part.arguments).decode())
        elif isinstance(part, ToolResultPart):
            total += count_text_tokens(part.content)
        elif isinstance(part, ImagePart):
            total += IMAGE_TOKENS
    return total


def _tool_tokens(tool: ToolDefinition) -> int:
    schema = orjson.dumps(tool.input_schema).decode()
    return (
        count_text_tokens(tool.name)
        + count_text_tokens(tool.description)
        + (count_text_tokens(schema))
    )


def count_request_tokens(request: ChatRequest) -> int:
    """Estimated input tokens of a whole request: messages plus tool definitions."""
    total = sum(count_message_tokens(m) for m in request.messages)
    total += sum(_tool_tokens(t) for t in request.tools)
    return total
