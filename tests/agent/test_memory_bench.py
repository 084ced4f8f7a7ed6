"""The memory benchmark's structural part: the conversation of
``bench/agent_memory.py`` (20 stated facts, 180 ordinary exchanges, one question)
through the agent service with a scripted summariser and extractor that keep every
fact. Every fact is in the last prompt, by either road (facts, or summaries folded
into the long-range summary alone), and no context ever exceeds the budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.agent_memory import run


@pytest.mark.parametrize("facts", [True, False], ids=["facts", "summaries-only"])
async def test_every_fact_survives_the_long_session(tmp_path: Path, facts: bool) -> None:
    outcome = await run(memory="scripted", facts=facts, directory=tmp_path)
    assert outcome.facts_kept == 20, outcome.facts_missing
    assert outcome.over_budget == 0 and outcome.max_history_tokens <= outcome.budget
    assert outcome.memory_calls["summary"] >= 15 and outcome.memory_calls["compaction"] >= 1
    assert outcome.long_summary_tokens > 0
    assert ("facts" in outcome.memory_calls) == facts
