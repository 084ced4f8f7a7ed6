"""``serving/prepare/carried_state.py``: another backend's opaque items out of the
history, counted; everything else as it was, and the request itself when there was
nothing to drop."""

from __future__ import annotations

from llmbridge.core.messages import Message, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.responses.carried import carry, carry_item
from llmbridge.serving.prepare.carried_state import drop_unreadable

COMPACTION = {"type": "compaction", "encrypted_content": "gAAAA-c"}
REASONING = {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-r"}


def request(*messages: Message) -> ChatRequest:
    return ChatRequest(model="m", messages=messages)


def test_another_backends_items_are_dropped_and_counted() -> None:
    chat = request(
        Message("user", (TextPart("q"),)),
        Message("assistant", (ThinkingPart("", signature=carry_item("up", COMPACTION)),)),
        Message(
            "assistant",
            (
                ThinkingPart("hmm", signature=carry("up", "gAAAA-old")),
                ThinkingPart("more", signature=carry_item("up", REASONING)),
                ThinkingPart("mine", signature="EqQBCkYIARgC", provider="anthropic"),
                ToolCallPart("c1", "f", {}),
            ),
        ),
    )
    kept, dropped = drop_unreadable(chat, "local")
    assert dropped == ("reasoning=2", "compaction=1")
    # The compaction's message, left empty, is gone; the Anthropic thinking is not ours.
    assert [m.parts for m in kept.messages] == [
        (TextPart("q"),),
        (
            ThinkingPart("mine", signature="EqQBCkYIARgC", provider="anthropic"),
            ToolCallPart("c1", "f", {}),
        ),
    ]


def test_the_backend_that_made_them_keeps_them() -> None:
    chat = request(
        Message("assistant", (ThinkingPart("", signature=carry_item("up", COMPACTION)),)),
        Message("user", (TextPart("go on"),)),
    )
    kept, dropped = drop_unreadable(chat, "up")
    assert kept is chat and dropped == ()
