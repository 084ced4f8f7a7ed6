"""A tool-using agent loop through each dialect's official client.

What pydantic-ai, the Vercel AI SDK or ``llm --functions`` do, written out: send the
question with a tool; while the reply calls tools, run them and send the results
back; stop at the first text reply. Each round records what the reply was and how
many model calls the gateway made for it, so a test can check that the loop ends and
how soon.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from tests.conftest import anthropic_client, ollama_client, openai_client

Dialect = Literal["ollama", "openai", "anthropic"]
DIALECTS: tuple[Dialect, ...] = ("ollama", "openai", "anthropic")

MAX_TOKENS = 48
"""Each request's token limit: room for a whole tool-call decision
(``{"action": "tool_call", "tool_name": ..., "arguments": {}}`` is about 25 tokens) and
a short text reply. The tests check that the loop ends, not what the text says, and
the embedded model writes every token it may (96 made each request half again as
slow, test_agent_loop_embedded.py taking a minute and a half)."""

Call = tuple[str, dict[str, Any], str]
"""A tool call: name, arguments, id (the dialect's, or "" for Ollama)."""


@dataclass
class Round:
    calls: list[Call]
    text: str
    model_calls: int
    """Model calls the gateway made to answer this request."""


def _openai_tool(tool: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": tool["name"],
            "description": tool["description"],
            "parameters": tool["input_schema"],
        },
    }


class _Client:
    """One dialect: ask with the tool, and the messages that carry results back."""

    def __init__(self, dialect: Dialect, url: str, model: str, tool: dict[str, Any]) -> None:
        self.dialect, self.url, self.model, self.tool = dialect, url, model, tool

    def ask(self, messages: list[dict[str, Any]]) -> tuple[list[Call], str, dict[str, Any]]:
        """The reply's calls, its text, and the reply as an assistant message."""
        if self.dialect == "ollama":
            reply = ollama_client(self.url).chat(
                model=self.model,
                messages=messages,
                tools=[_openai_tool(self.tool)],
                options={"temperature": 0, "num_predict": MAX_TOKENS},
            )
            calls = [
                (c.function.name, dict(c.function.arguments), "")
                for c in reply.message.tool_calls or []
            ]
            assistant = {
                "role": "assistant",
                "content": reply.message.content or "",
                "tool_calls": [c.model_dump() for c in reply.message.tool_calls or []],
            }
            return calls, reply.message.content or "", assistant
        if self.dialect == "openai":
            completion = openai_client(self.url).chat.completions.create(
                model=self.model,
                messages=messages,
                tools=[_openai_tool(self.tool)],
                temperature=0,
                max_tokens=MAX_TOKENS,
            )
            message = completion.choices[0].message
            calls = [
                (c.function.name, json.loads(c.function.arguments), c.id)
                for c in message.tool_calls or []
            ]
            return calls, message.content or "", message.model_dump(exclude_none=True)
        reply = anthropic_client(self.url).messages.create(
            model=self.model,
            max_tokens=MAX_TOKENS,
            messages=messages,
            tools=[self.tool],
            extra_body={"temperature": 0},
        )
        calls = [(b.name, dict(b.input), b.id) for b in reply.content if b.type == "tool_use"]
        text = "".join(b.text for b in reply.content if b.type == "text")
        blocks = [b.model_dump(exclude_none=True) for b in reply.content]
        return calls, text, {"role": "assistant", "content": blocks}

    def results(self, calls: list[Call], outputs: list[str]) -> list[dict[str, Any]]:
        if self.dialect == "ollama":
            return [
                {"role": "tool", "content": out, "tool_name": name}
                for (name, _, _), out in zip(calls, outputs, strict=True)
            ]
        if self.dialect == "openai":
            return [
                {"role": "tool", "tool_call_id": call_id, "content": out}
                for (_, _, call_id), out in zip(calls, outputs, strict=True)
            ]
        blocks = [
            {"type": "tool_result", "tool_use_id": call_id, "content": out}
            for (_, _, call_id), out in zip(calls, outputs, strict=True)
        ]
        return [{"role": "user", "content": blocks}]


def run_agent_loop(
    dialect: Dialect,
    url: str,
    *,
    model: str,
    tool: dict[str, Any],
    question: str,
    run_tool: Callable[[str, dict[str, Any]], str],
    model_calls: Callable[[], int],
    first_call: Call | None = None,
    max_rounds: int = 5,
) -> list[Round]:
    """Ask ``question``, run the tools the replies call, until a text reply (or
    ``max_rounds``). ``first_call`` starts the loop where a model already made that
    call (the "by hand" case); ``model_calls`` counts the backend's calls."""
    client = _Client(dialect, url, model, tool)
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    if first_call is not None:
        name, arguments, _ = first_call
        messages.append(_assistant_call(dialect, first_call))
        messages += client.results([first_call], [run_tool(name, arguments)])
    rounds: list[Round] = []
    for _ in range(max_rounds):
        before = model_calls()
        calls, text, assistant = client.ask(messages)
        rounds.append(Round(calls, text, model_calls() - before))
        if not calls:
            break
        messages.append(assistant)
        messages += client.results(calls, [run_tool(name, args) for name, args, _ in calls])
    return rounds


def _assistant_call(dialect: Dialect, call: Call) -> dict[str, Any]:
    """An assistant message with ``call``, as the dialect writes it."""
    name, arguments, call_id = call
    if dialect == "ollama":
        return {
            "role": "assistant",
            "content": "",
            "tool_calls": [{"function": {"name": name, "arguments": arguments}}],
        }
    if dialect == "openai":
        return {
            "role": "assistant",
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(arguments)},
                }
            ],
        }
    return {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": call_id, "name": name, "input": arguments}],
    }
