"""``accounts.limits.admit`` on the in-process shared state: the decisions a gateway
cannot easily be made to show over HTTP (exact windows, what is given back when a later
check refuses, the budget's two halves), and the headers' formats."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.ledger import spend_key
from llmbridge.accounts.limits import KeyLimitError, Quota, admit, limit_headers
from llmbridge.core.errors import PermissionDeniedError
from llmbridge.state.local import LocalState
from llmbridge.web.render import Dialect


def _record(**limits: object) -> KeyRecord:
    values: dict[str, object] = {
        "rpm": None,
        "tpm": None,
        "max_parallel": None,
        "budget_usd": None,
        "models": None,
        "spent_usd": 0.0,
    }
    values.update(limits)
    return KeyRecord(
        id="key_test",
        name="test",
        prefix="llmb-test",
        identity="0" * 32,
        created_at=datetime.now(UTC),
        revoked_at=None,
        **values,  # type: ignore[arg-type]
    )


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


async def test_a_refused_request_gives_its_parallel_slot_back() -> None:
    state = LocalState()
    record = _record(rpm=1, max_parallel=1)
    first = await admit(state, record, "m")
    await first.finish()
    with pytest.raises(KeyLimitError):
        await admit(state, record, "m")  # over rpm, after taking the slot
    assert (await state.in_flight(["par:key_test"]))["par:key_test"] == 0


async def test_the_window_slides_by_the_second() -> None:
    clock = Clock()
    state = LocalState(clock=clock)
    record = _record(rpm=2)
    for _ in range(2):
        await (await admit(state, record, "m")).finish()
    with pytest.raises(KeyLimitError) as refused:
        await admit(state, record, "m")
    assert 59 <= refused.value.retry_after <= 60
    assert refused.value.requests == Quota(limit=2, remaining=0, reset_s=refused.value.retry_after)
    clock.now += 61
    admitted = await admit(state, record, "m")
    assert admitted.requests == Quota(limit=2, remaining=1, reset_s=0.0)


async def test_tokens_taken_for_the_prompt_then_added_for_the_reply() -> None:
    state = LocalState()
    record = _record(tpm=100)
    admission = await admit(state, record, "m", prompt_tokens=30)
    assert await state.used("tpm:key_test", 60) == 30
    await admission.finish(used_tokens=70)  # 30 prompt + 40 reply
    assert await state.used("tpm:key_test", 60) == 70
    await admission.finish(used_tokens=500)  # twice: nothing more
    assert await state.used("tpm:key_test", 60) == 70
    with pytest.raises(KeyLimitError, match="100 tokens per minute"):
        await admit(state, record, "m", prompt_tokens=31)
    # A prompt larger than the whole limit waits for an empty window, not for ever.
    empty = LocalState()
    assert (await admit(empty, record, "m", prompt_tokens=5000)).reserved_tokens == 100


async def test_the_budget_counts_what_the_ledger_wrote_and_what_it_has_not() -> None:
    state = LocalState()
    record = _record(budget_usd=1.0, spent_usd=0.6)
    await admit(state, record, "m")
    await state.add_float(spend_key(record.id), 0.3)
    await admit(state, record, "m")
    await state.add_float(spend_key(record.id), 0.1)
    with pytest.raises(
        PermissionDeniedError, match=r"budget exhausted: spent \$1.0000 of \$1.0000"
    ):
        await admit(state, record, "m")


async def test_models_are_checked_first() -> None:
    state = LocalState()
    record = _record(models=("qwen*",), rpm=1)
    with pytest.raises(PermissionDeniedError, match="'gpt-4o'") as refused:
        await admit(state, record, "gpt-4o")
    assert refused.value.param == "model"
    assert await state.used("rpm:key_test", 60) == 0  # a refused model used no request
    assert await admit(state, None, "anything") is not None  # no database key: no limits


def test_header_formats() -> None:
    requests, tokens = Quota(60, 0, 12.2), Quota(1000, 250, 0.0)
    openai = limit_headers(Dialect.OPENAI, requests, tokens, retry_after=12.2)
    assert openai == {
        "x-ratelimit-limit-requests": "60",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "13s",
        "x-ratelimit-limit-tokens": "1000",
        "x-ratelimit-remaining-tokens": "250",
        "x-ratelimit-reset-tokens": "0s",
        "retry-after": "13",
    }
    assert limit_headers(Dialect.OLLAMA, Quota(5, 0, 75), None)["x-ratelimit-reset-requests"] == (
        "1m15s"
    )
    anthropic = limit_headers(Dialect.ANTHROPIC, requests, None)
    reset = datetime.fromisoformat(anthropic["anthropic-ratelimit-requests-reset"])
    assert anthropic["anthropic-ratelimit-requests-limit"] == "60"
    assert reset.tzinfo is not None and 0 < (reset - datetime.now(UTC)).total_seconds() <= 14
    assert "retry-after" not in anthropic
