"""How well does a model pick durable facts out of a person's statements? (issue 29)

This file owns the measurement of fact extraction's question on its own
(``agent.memory.facts``: one statement per call, a yes-or-no answer held to a JSON
schema, asked in ``READINGS``), without the rest of the agent: the statements are put
to the model exactly as the summariser puts them, and the answers are scored.

Two sets of statements:

- ``issue``: issue 29's 20 facts (``bench/agent_memory.py``'s ``FACTS``) and the
  statements among its ordinary messages (small talk, which should be ``no``);
- ``held-out``: 20 other facts and 10 other remarks of the same kinds, written apart
  from the prompt's examples and never used to choose them, so a prompt tuned to the
  issue's statements shows here whether it generalises.

For each set it prints the facts kept (recall) and the remarks kept (false alarms),
per reading and for the extractor as it runs (a statement any reading keeps). The model
is the embedded one (SmolLM2-135M, as a gateway with no configuration runs it) unless
``--config`` names a gateway configuration and ``--model`` a model it serves.

Run: ``.venv/bin/python bench/fact_labels.py [--config gateway.yaml --model NAME]``;
results go to stdout and to ``bench/results/fact_labels-<time>.json``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import platform
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from agent_memory import FACTS, ORDINARY
from llmbridge.agent.memory.facts import READINGS, fact_request, parse_answer
from llmbridge.core.accumulate import accumulate
from llmbridge.gateway.config import GatewayConfig
from llmbridge.serving.build import build_backends
from llmbridge.serving.models import Models

RESULTS = Path(__file__).with_name("results")

HELD_OUT_FACTS = (
    "My brother Kevin lives in Cork.",
    "The key safe code is 9021.",
    "I am allergic to latex.",
    "My cat is named Pickles.",
    "My GP is Dr. Alvarez.",
    "I take metformin with breakfast.",
    "My daughter works as a nurse in Bristol.",
    "I prefer decaf coffee.",
    "My physio comes on Tuesdays.",
    "My wife's name was Eileen.",
    "I use a walking frame indoors.",
    "My eye test is booked for May 2nd.",
    "I grew up on a farm in Kerry.",
    "My nephew Sam fixes my computer.",
    "I don't like loud music.",
    "My favourite flower is the sweet pea.",
    "I sing in the church choir on Sundays.",
    "My bank is Barclays.",
    "I have two great-grandsons.",
    "My insulin pen is in the fridge.",
)
HELD_OUT_REMARKS = (
    "It is cold out today.",
    "That is very kind of you.",
    "I had a nap after lunch.",
    "The tea was lovely.",
    "I'm just sitting by the window.",
    "Good morning to you.",
    "The postman was late again.",
    "I heard a bird singing.",
    "That was a funny one.",
    "Lovely weather we are having.",
)
SETS: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    "issue": (
        tuple(text for text, _ in FACTS),
        tuple(text for text in ORDINARY if not text.endswith("?")),
    ),
    "held-out": (HELD_OUT_FACTS, HELD_OUT_REMARKS),
}
EMBEDDED = {"backends": {"local": {"type": "embedded"}}, "default_backend": "local"}


async def _answers(models: Models, model: str, statements: Sequence[str]) -> list[list[bool]]:
    """Per reading, the answer to each statement (an unusable reply is ``no``, as in
    the extractor)."""
    readings: list[list[bool]] = []
    for examples in READINGS:
        answers = []
        for statement in statements:
            response = await accumulate(models.chat(fact_request(statement, examples, model)))
            try:
                answers.append(parse_answer(response.message.text))
            except ValueError:
                answers.append(False)
        readings.append(answers)
    return readings


def _score(facts: Sequence[str], remarks: Sequence[str], kept: Sequence[bool]) -> dict[str, Any]:
    by_statement = dict(zip([*facts, *remarks], kept, strict=True))
    return {
        "facts_kept": sum(by_statement[f] for f in facts),
        "facts": len(facts),
        "remarks_kept": sum(by_statement[r] for r in remarks),
        "remarks": len(remarks),
        "facts_missed": [f for f in facts if not by_statement[f]],
        "remarks_kept_list": [r for r in remarks if by_statement[r]],
    }


async def run(config: GatewayConfig, model: str) -> dict[str, Any]:
    backends = build_backends(config)
    models = Models(config, backends)
    results: dict[str, Any] = {}
    try:
        for name, (facts, remarks) in SETS.items():
            started = time.perf_counter()
            readings = await _answers(models, model, [*facts, *remarks])
            combined = [any(answers) for answers in zip(*readings, strict=True)]
            results[name] = {
                "readings": {
                    f"first {examples} examples": _score(facts, remarks, answers)
                    for examples, answers in zip(READINGS, readings, strict=True)
                },
                "extractor": _score(facts, remarks, combined),
                "seconds": round(time.perf_counter() - started, 1),
            }
    finally:
        for backend in backends.values():
            await backend.aclose()
    return results


def _line(label: str, score: dict[str, Any]) -> str:
    missed = ", ".join(score["facts_missed"]) or "none"
    return (
        f"  {label}: facts {score['facts_kept']}/{score['facts']}, remarks kept "
        f"{score['remarks_kept']}/{score['remarks']} (missed: {missed})"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", 1)[0])
    parser.add_argument("--config", type=Path, help="A gateway configuration (YAML).")
    parser.add_argument("--model", default="smollm2", help="The model to ask.")
    args = parser.parse_args(argv)
    raw = yaml.safe_load(args.config.read_text()) if args.config else EMBEDDED
    results = asyncio.run(run(GatewayConfig.model_validate(raw), args.model))
    for name, result in results.items():
        print(f"{name} ({result['seconds']} s)")
        for label, score in result["readings"].items():
            print(_line(label, score))
        print(_line("extractor (any reading)", result["extractor"]))
    RESULTS.mkdir(exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    path = RESULTS / f"fact_labels-{stamp}.json"
    document = {"machine": platform.platform(), "python": sys.version.split()[0]}
    path.write_text(json.dumps({**document, "model": args.model, **results}, indent=2))
    print(f"results: {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
