"""Claude Code's billing-header line taken out of system prompts (features/billing_header.py);
through the gateway in tests/gateway/test_anthropic_beta.py and
tests/gateway/test_claude_code_requests.py."""

from __future__ import annotations

import pytest

from llmbridge.core.messages import Message, TextPart
from llmbridge.core.request import ChatRequest
from llmbridge.features.billing_header import drop_billing_header

LINE = "x-anthropic-billing-header: cc_version=2.1.330.440; cc_entrypoint=sdk-cli; cch=0a1b2;"


def _request(*messages: Message) -> ChatRequest:
    return ChatRequest(model="m", messages=messages)


def _system(text: str) -> Message:
    return Message(role="system", parts=(TextPart(text),))


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        (f"{LINE}\n\nYou are a Claude agent.", "You are a Claude agent."),  # blocks joined
        (f"{LINE}\nYou are a Claude agent.", "You are a Claude agent."),
        (f"You are a Claude agent.\n\n{LINE}\n\nCWD: /w", "You are a Claude agent.\n\nCWD: /w"),
    ],
)
def test_the_line_and_its_separator_go_the_rest_stays_byte_for_byte(text: str, kept: str) -> None:
    user = Message(role="user", parts=(TextPart("hi"),))
    dropped = drop_billing_header(_request(_system(text), user))
    assert dropped.messages == (_system(kept), user)


def test_a_system_message_of_only_the_line_is_gone() -> None:
    user = Message(role="user", parts=(TextPart("hi"),))
    assert drop_billing_header(_request(_system(LINE), user)).messages == (user,)


def test_a_request_without_the_line_is_returned_as_is() -> None:
    request = _request(_system("Be brief."), Message(role="user", parts=(TextPart(LINE),)))
    assert drop_billing_header(request) is request  # a user's text is never touched
