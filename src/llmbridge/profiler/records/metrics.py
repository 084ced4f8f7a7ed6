"""Metrics for one prompt, from the session's messages (seed 004 "Metric Extraction").

A prompt is one user message and the assistant messages (LLM steps) that answer it
(their ``parentID``). Tokens are summed over the steps; timing comes from OpenCode's
own clocks: time to first token is the first text or reasoning part's start after the
user message was created, the total runs to the last step's completion, each step is
its own message, and each tool's time is its state's start to end. Cost is what the
backend reported, or, when it reported none, the configured price table's
(US dollars per million tokens).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from llmbridge.profiler.records.trace import error_text, message_tokens
from llmbridge.profiler.records.types import (
    CompletionReason,
    CostMetrics,
    PromptMetrics,
    PromptResult,
    TimingMetrics,
    TokenMetrics,
    ToolCallRecord,
)

__all__ = ["Price", "cost_of", "prices_from", "prompt_messages", "prompt_result"]

Message = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Price:
    """US dollars per million tokens. Reasoning defaults to the output price."""

    input: float = 0.0
    output: float = 0.0
    reasoning: float | None = None
    cache_read: float = 0.0
    cache_write: float = 0.0


def cost_of(tokens: TokenMetrics, price: Price) -> CostMetrics:
    per = 1e-6
    reasoning_price = price.output if price.reasoning is None else price.reasoning
    input_usd = tokens.input * price.input * per
    output_usd = tokens.output * price.output * per
    reasoning_usd = tokens.reasoning * reasoning_price * per
    cache_usd = (
        tokens.cache_read * price.cache_read + tokens.cache_write * price.cache_write
    ) * per
    return CostMetrics(
        total_usd=input_usd + output_usd + reasoning_usd + cache_usd,
        input_usd=input_usd,
        output_usd=output_usd,
        reasoning_usd=reasoning_usd,
        cache_usd=cache_usd,
        source="price_table",
    )


def _info(message: Message) -> dict[str, Any]:
    info = message.get("info")
    return info if isinstance(info, dict) else {}


def prompt_messages(messages: Sequence[Message], user_id: str) -> tuple[Message, list[Message]]:
    """The user message ``user_id`` and the steps that answer it."""
    user = next((m for m in messages if _info(m).get("id") == user_id), None)
    if user is None:
        raise LookupError(f"message {user_id} is not in the session")
    steps = [
        m
        for m in messages
        if _info(m).get("role") == "assistant" and _info(m).get("parentID") == user_id
    ]
    return user, steps


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _timing(user: Message, steps: list[Message], measured_ms: float) -> TimingMetrics:
    created = _number(_dict(_info(user).get("time")).get("created"))
    starts: list[float] = []
    step_ms: list[float] = []
    tools: dict[str, float] = {}
    end: float | None = None
    for step in steps:
        times = _dict(_info(step).get("time"))
        begun, done = _number(times.get("created")), _number(times.get("completed"))
        if begun is not None and done is not None:
            step_ms.append(done - begun)
            end = done if end is None else max(end, done)
        for part in step.get("parts") or []:
            part = _dict(part)
            if part.get("type") in ("text", "reasoning") and part.get("text"):
                start = _number(_dict(part.get("time")).get("start"))
                if start is not None:
                    starts.append(start)
            elif part.get("type") == "tool":
                t = _dict(_dict(part.get("state")).get("time"))
                s, e = _number(t.get("start")), _number(t.get("end"))
                if s is not None and e is not None:
                    name = str(part.get("tool") or "?")
                    tools[name] = tools.get(name, 0.0) + (e - s)
    ttft = min(starts) - created if starts and created is not None else None
    total = end - created if end is not None and created is not None else measured_ms
    return TimingMetrics(ttft_ms=ttft, total_ms=total, steps_ms=tuple(step_ms), tools_ms=tools)


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _tool_calls(steps: list[Message]) -> tuple[ToolCallRecord, ...]:
    records = []
    for step in steps:
        for part in step.get("parts") or []:
            part = _dict(part)
            if part.get("type") != "tool":
                continue
            state = _dict(part.get("state"))
            status = state.get("status")
            t = _dict(state.get("time"))
            s, e = _number(t.get("start")), _number(t.get("end"))
            records.append(
                ToolCallRecord(
                    name=str(part.get("tool") or "?"),
                    call_id=str(part.get("callID") or part.get("id") or ""),
                    status=status if status in ("completed", "error", "running") else "pending",
                    duration_ms=None if s is None or e is None else e - s,
                    error=error_text(state["error"]) if state.get("error") else None,
                )
            )
    return tuple(records)


def prompt_result(
    messages: Sequence[Message],
    user_id: str,
    *,
    measured_ms: float,
    timed_out: bool = False,
    price: Price | None = None,
) -> PromptResult:
    """The ``PromptResult`` for the prompt whose user message is ``user_id``.

    ``measured_ms`` is the client's own clock, used when a step never completed.
    """
    user, steps = prompt_messages(messages, user_id)
    tokens = TokenMetrics()
    reported = 0.0
    for step in steps:
        tokens = tokens + message_tokens(_info(step))
        cost = _info(step).get("cost")
        reported += float(cost) if isinstance(cost, int | float) else 0.0
    if reported > 0:
        cost_metrics = CostMetrics(total_usd=reported, source="backend")
    elif price is not None:
        cost_metrics = cost_of(tokens, price)
    else:
        cost_metrics = CostMetrics()
    text = "".join(
        str(p.get("text") or "")
        for step in steps
        for p in (step.get("parts") or [])
        if isinstance(p, dict) and p.get("type") == "text" and not p.get("synthetic")
    )
    last = _info(steps[-1]) if steps else {}
    error = last.get("error")
    reason: CompletionReason
    if timed_out:
        reason = "timeout"
    elif error and _dict(error).get("name") == "MessageOutputLengthError":
        reason = "length"
    elif error:
        reason = "error"
    elif last.get("finish") == "length":
        reason = "length"
    elif steps and last.get("finish") == "tool-calls":
        reason = "tool_limit"  # the last step asked for tools and no step followed
    else:
        reason = "stop"
    metrics = PromptMetrics(
        tokens=tokens,
        timing=_timing(user, steps, measured_ms),
        tool_calls=_tool_calls(steps),
        cost=cost_metrics,
    )
    return PromptResult(
        text=text,
        metrics=metrics,
        completion_reason=reason,
        error=error_text(error) if error and not timed_out else None,
    )


def prices_from(config: Mapping[str, Mapping[str, float]]) -> dict[str, Price]:
    """A price table from configuration: ``{model: {input, output, ...}}``."""
    return {model: Price(**dict(spec)) for model, spec in config.items()}
