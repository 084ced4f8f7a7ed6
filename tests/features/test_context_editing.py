"""Context editing applied by the gateway (features/context_editing.py), on requests
decoded from the edits Claude Code 2.1.330 sends (its binary's ``clear_tool_uses``
builder: ``trigger`` and ``keep`` in tool uses, ``clear_at_least`` in input tokens,
``exclude_tools``, ``clear_tool_inputs`` as a list; ``clear_thinking`` with ``keep``);
through the gateway in tests/gateway/test_context_editing.py."""

from __future__ import annotations

from typing import Any

from llmbridge.core.context_edits import (
    CONTEXT_EDITS,
    AppliedEdit,
    ClearThinking,
    ClearToolUses,
)
from llmbridge.core.messages import TextPart, ThinkingPart, ToolCallPart, ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.dialects.anthropic import decode_chat_request
from llmbridge.dialects.anthropic.context_management import decode_edits
from llmbridge.dialects.gemini.thoughts import GEMINI
from llmbridge.features.context_editing import CLEARED_RESULT, apply_context_edits
from llmbridge.features.token_count import count_text_tokens

LONG = " ".join(["result"] * 40)
"""A tool result of 80 tokens by the gateway's estimate (6 characters: two each)."""


def clear_tool_uses(**overrides: Any) -> dict[str, Any]:
    """Claude Code's ``clear_tool_uses_20250919`` edit, as its builder writes it."""
    edit: dict[str, Any] = {
        "type": "clear_tool_uses_20250919",
        "trigger": {"type": "tool_uses", "value": 3},
        "keep": {"type": "tool_uses", "value": 1},
        "clear_at_least": {"type": "input_tokens", "value": 10},
        "exclude_tools": ["TodoWrite"],
    }
    edit.update(overrides)
    return edit


def tool_loop(names: list[str], *, thinking: bool = False) -> list[dict[str, Any]]:
    """A conversation of one tool call per assistant turn, each answered with ``LONG``."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for index, name in enumerate(names):
        content: list[dict[str, Any]] = []
        if thinking:
            content.append({"type": "thinking", "thinking": f"plan {index}", "signature": "c2ln"})
        content.append(
            {"type": "tool_use", "id": f"toolu_{index}", "name": name, "input": {"n": index}}
        )
        messages.append({"role": "assistant", "content": content})
        result = {"type": "tool_result", "tool_use_id": f"toolu_{index}", "content": LONG}
        messages.append({"role": "user", "content": [result]})
    return messages


def decoded(messages: list[dict[str, Any]], *edits: dict[str, Any]) -> ChatRequest:
    return decode_chat_request(
        {
            "model": "local",
            "max_tokens": 64,
            "messages": messages,
            "context_management": {"edits": list(edits)},
        }
    )


def results(request: ChatRequest) -> dict[str, str]:
    return {
        part.tool_call_id: part.content
        for message in request.messages
        for part in message.parts
        if isinstance(part, ToolResultPart)
    }


def calls(request: ChatRequest) -> dict[str, dict[str, Any]]:
    return {call.id: call.arguments for message in request.messages for call in message.tool_calls}


# -- decoding ---------------------------------------------------------------------------


def test_claude_codes_edits_decode_into_the_cores() -> None:
    edits = decode_edits(
        {
            "edits": [
                {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 2}},
                clear_tool_uses(clear_tool_inputs=["Bash"]),
            ]
        }
    )
    assert edits == (
        ClearThinking("clear_thinking_20251015", keep_turns=2),
        ClearToolUses(
            "clear_tool_uses_20250919",
            trigger_input_tokens=None,
            trigger_tool_uses=3,
            keep_tool_uses=1,
            clear_at_least=10,
            exclude_tools=frozenset({"TodoWrite"}),
            clear_inputs=frozenset({"Bash"}),
        ),
    )


def test_the_apis_defaults_fill_what_an_edit_leaves_out() -> None:
    edits = decode_edits(
        {"edits": [{"type": "clear_tool_uses_20250919"}, {"type": "clear_thinking_20251015"}]}
    )
    assert edits == (
        ClearToolUses("clear_tool_uses_20250919", trigger_input_tokens=100_000, keep_tool_uses=3),
        ClearThinking("clear_thinking_20251015", keep_turns=1),
    )


def test_what_the_gateway_cannot_apply_is_left_out_not_refused() -> None:
    # keep "all" (Claude Code's default) clears nothing; compaction needs a summary the
    # gateway does not write; a malformed edit is the Anthropic API's to refuse.
    edits = decode_edits(
        {
            "edits": [
                {"type": "clear_thinking_20251015", "keep": "all"},
                {"type": "compact_20260112", "trigger": {"type": "input_tokens", "value": 9}},
                clear_tool_uses(keep={"type": "tool_uses", "value": "three"}),
                "not an edit",
            ]
        }
    )
    assert edits == ()
    assert decode_edits(None) == decode_edits({"edits": "x"}) == ()
    request = decoded(tool_loop(["Read"]), {"type": "clear_thinking_20251015", "keep": "all"})
    assert CONTEXT_EDITS not in (request.provider_details or {})


# -- clearing tool results --------------------------------------------------------------


def test_past_the_trigger_all_but_the_kept_results_are_cleared_oldest_first() -> None:
    request = decoded(tool_loop(["Read", "Bash", "Read", "Grep"]), clear_tool_uses())
    edited, applied = apply_context_edits(request)
    assert results(edited) == {
        "toolu_0": CLEARED_RESULT,
        "toolu_1": CLEARED_RESULT,
        "toolu_2": CLEARED_RESULT,
        "toolu_3": LONG,
    }
    # The calls stay: every result still answers its call.
    assert calls(edited) == calls(request)
    # Each result's tokens less the placeholder's, by the gateway's estimate.
    freed = 3 * (count_text_tokens(LONG) - count_text_tokens(CLEARED_RESULT))
    assert count_text_tokens(LONG) == 80
    assert applied == (AppliedEdit("clear_tool_uses_20250919", freed, cleared_tool_uses=3),)


def test_at_or_under_the_trigger_nothing_is_cleared() -> None:
    request = decoded(tool_loop(["Read", "Bash", "Read"]), clear_tool_uses())
    assert apply_context_edits(request) == (request, ())


def test_an_input_token_trigger_counts_the_whole_prompt() -> None:
    trigger = {"type": "input_tokens", "value": 200}
    under = decoded(tool_loop(["Read", "Read"]), clear_tool_uses(trigger=trigger))
    assert apply_context_edits(under)[1] == ()
    over = decoded(tool_loop(["Read", "Read", "Read"]), clear_tool_uses(trigger=trigger))
    assert [e.cleared_tool_uses for e in apply_context_edits(over)[1]] == [2]


def test_excluded_tools_keep_their_results() -> None:
    request = decoded(tool_loop(["TodoWrite", "Read", "Bash", "Grep"]), clear_tool_uses())
    edited, applied = apply_context_edits(request)
    assert results(edited)["toolu_0"] == LONG
    assert [results(edited)[f"toolu_{n}"] for n in (1, 2)] == [CLEARED_RESULT] * 2
    assert applied[0].cleared_tool_uses == 2


def test_too_little_to_free_clears_nothing() -> None:
    request = decoded(
        tool_loop(["Read", "Bash", "Read", "Grep"]),
        clear_tool_uses(clear_at_least={"type": "input_tokens", "value": 100_000}),
    )
    assert apply_context_edits(request) == (request, ())


def test_the_inputs_of_the_named_tools_are_cleared_too() -> None:
    request = decoded(
        tool_loop(["Read", "Bash", "Read", "Grep"]), clear_tool_uses(clear_tool_inputs=["Bash"])
    )
    edited, _ = apply_context_edits(request)
    assert calls(edited) == {
        "toolu_0": {"n": 0},
        "toolu_1": {},
        "toolu_2": {"n": 2},
        "toolu_3": {"n": 3},
    }
    every = decoded(
        tool_loop(["Read", "Bash", "Read", "Grep"]), clear_tool_uses(clear_tool_inputs=True)
    )
    assert list(calls(apply_context_edits(every)[0]).values()) == [{}, {}, {}, {"n": 3}]


def test_the_same_history_is_edited_alike_on_every_request() -> None:
    # Stateless, as Anthropic's: the next turn's prompt starts with this one's edits.
    turn = tool_loop(["Read", "Bash", "Read", "Grep"])
    first, _ = apply_context_edits(decoded(turn, clear_tool_uses()))
    following = decoded([*turn, {"role": "assistant", "content": "done"}], clear_tool_uses())
    second, _ = apply_context_edits(following)
    assert second.messages[: len(first.messages)] == first.messages


# -- clearing thinking ------------------------------------------------------------------


def test_thinking_of_all_but_the_kept_turns_is_removed() -> None:
    keep = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
    request = decoded(tool_loop(["Read", "Bash", "Grep"], thinking=True), keep)
    edited, applied = apply_context_edits(request)
    thoughts = [
        [(p.text, p.signature) for p in m.parts if isinstance(p, ThinkingPart)]
        for m in edited.messages
        if m.role == "assistant"
    ]
    # Anthropic's signature means nothing to another backend, but a signed part keeps
    # it (it may be the backend's own token); the text, what costs context, goes.
    assert thoughts == [[("", "c2ln")], [("", "c2ln")], [("plan 2", "c2ln")]]
    assert applied == (
        AppliedEdit("clear_thinking_20251015", 4, cleared_thinking_turns=2),  # "plan n": 2 each
    )


def test_a_gemini_signature_survives_a_thinking_clearing() -> None:
    signature = GEMINI.carry("gem", "dGhvdWdodA==")
    messages = [
        {"role": "user", "content": "a"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "old", "signature": signature},
                {"type": "text", "text": "one"},
            ],
        },
        {"role": "user", "content": "b"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "unsigned"}]},
        {"role": "user", "content": "c"},
        {
            "role": "assistant",
            "content": [{"type": "thinking", "thinking": "new", "signature": "s"}],
        },
        {"role": "user", "content": "d"},
    ]
    keep = {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 1}}
    edited, _ = apply_context_edits(decoded(messages, keep))
    assistant = [m for m in edited.messages if m.role == "assistant"]
    assert assistant[0].parts == (
        ThinkingPart("", signature=signature, provider="anthropic"),
        TextPart("one"),
    )
    assert assistant[1].parts == ()  # unsigned reasoning: nothing left to carry
    assert [p.text for p in assistant[2].parts if isinstance(p, ThinkingPart)] == ["new"]


def test_edits_apply_in_the_order_listed() -> None:
    request = decoded(
        tool_loop(["Read", "Bash", "Read", "Grep"], thinking=True),
        {"type": "clear_thinking_20251015", "keep": {"type": "thinking_turns", "value": 3}},
        clear_tool_uses(),
    )
    _, applied = apply_context_edits(request)
    assert [(e.type, e.cleared_thinking_turns, e.cleared_tool_uses) for e in applied] == [
        ("clear_thinking_20251015", 1, None),
        ("clear_tool_uses_20250919", None, 3),
    ]


def test_a_request_without_edits_is_returned_as_is() -> None:
    request = decode_chat_request(
        {"model": "m", "max_tokens": 8, "messages": tool_loop(["Read"] * 5)}
    )
    assert apply_context_edits(request) == (request, ())
    assert [type(p) for m in request.messages for p in m.parts][:2] == [TextPart, ToolCallPart]
