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

__all__ = [
    "IMAGE_TOKENS",
    "TextTally",
    "count_message_tokens",
    "count_request_tokens",
    "count_text_tokens",
]

IMAGE_TOKENS = 256
"""A flat estimate per image; the true figure depends on the model's vision encoder."""


def count_text_tokens(text: str) -> int:
    """Tokens in ``text`` by the word / four-character rule."""
    total = 0
    for word in text.split():
        total += (len(word) + 3) // 4
    return total


class TextTally:
    """``count_text_tokens`` of text that arrives in pieces (a stream's deltas), kept as
    counts, not the text: the tokens of the words already ended, the length of the word
    the counted text ended inside (the next piece may go on with it), and the pieces
    not counted yet, at most ``PENDING_CHARS`` of them. After any pieces, ``tokens``
    equals ``count_text_tokens`` of them joined.

    Pieces are counted a batch at a time because a stream's deltas are a few characters
    each: one split over a few thousand characters costs what one over a single delta
    costs, so counting each delta as it passed was most of the meter's work on a
    translated stream."""

    __slots__ = ("_ended", "_open", "_pending", "_pending_chars", "pieces")

    PENDING_CHARS = 4096
    """The most characters held before they are counted (a stream's memory stays flat)."""

    def __init__(self) -> None:
        self._ended = 0
        self._open = 0
        """The length of the word still open at the end of the counted text."""
        self._pending: list[str] = []
        self._pending_chars = 0
        self.pieces = 0
        """Pieces added (empty ones too): whether anything was generated."""

    def add(self, text: str) -> None:
        self.pieces += 1
        if text:
            self._pending.append(text)
            self._pending_chars += len(text)
            if self._pending_chars >= self.PENDING_CHARS:
                self._count_pending()

    def _count_pending(self) -> None:
        text = "".join(self._pending)
        self._pending.clear()
        self._pending_chars = 0
        words = text.split()
        if not words:  # whitespace only: it ends the open word
            self._end_open()
            return
        lengths = [len(word) for word in words]
        if self._open and not text[0].isspace():
            lengths[0] += self._open  # the open word goes on in this text
        else:
            self._end_open()
        self._open = 0
        if not text[-1].isspace():
            self._open = lengths.pop()  # the next piece may go on with it
        self._ended += sum((length + 3) // 4 for length in lengths)

    def _end_open(self) -> None:
        if self._open:
            self._ended += (self._open + 3) // 4
            self._open = 0

    @property
    def tokens(self) -> int:
        if self._pending:
            self._count_pending()
        return self._ended + (self._open + 3) // 4


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
