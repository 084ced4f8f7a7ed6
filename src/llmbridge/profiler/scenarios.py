"""The scenarios file: what to run, against what, how often, and what counts as a pass.

Example (``docs/PROFILER.md`` has the full reference)::

    models: [gw/smollm2]              # OpenCode: PROVIDER/MODEL; agent: a gateway model
    modes: [default]                  # OpenCode agents (build, plan...) or "default"
    iterations: 3
    timeout: 60                       # seconds per prompt
    opencode:                         # the model endpoint the spawned OpenCode uses
      endpoint: {url: "http://127.0.0.1:11435/v1", limits: {context: 8192, output: 512}}
      permission: allow               # allow | deny | ask-reject
    agent:                            # the agent service (llmbridge.agent)
      persona: {name: tester, prompt: "You are terse."}
    prices:                           # USD per million tokens, when the backend reports none
      gw/smollm2: {input: 0.1, output: 0.4}
    scenarios:
      - id: capital
        system: Answer in one sentence.
        prompt: What is the capital of France?     # or prompts: [...] for several turns
        checks:
          - contains: Paris
          - regex: "(?i)paris"
          - tool_called: read
          - max_duration_ms: 30000
          - max_tokens: 20000
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from llmbridge.profiler.metrics import Price
from llmbridge.profiler.types import PromptResult

__all__ = ["Check", "CheckResult", "Scenario", "ScenarioFile", "evaluate", "load_scenarios"]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Check(_Strict):
    """One condition on an iteration; exactly one field is set."""

    contains: str | None = None
    not_contains: str | None = None
    regex: str | None = None
    tool_called: str | None = None
    max_duration_ms: float | None = Field(None, gt=0)
    max_tokens: int | None = Field(None, gt=0)
    completes: bool | None = None
    """``true``: the turn ended normally (not a timeout or an error)."""

    @model_validator(mode="after")
    def _one(self) -> Check:
        set_fields = [k for k, v in self.model_dump().items() if v is not None]
        if len(set_fields) != 1:
            raise ValueError(f"a check sets exactly one condition, not {set_fields or 'none'}")
        if self.regex is not None:
            try:
                re.compile(self.regex)
            except re.error as exc:
                raise ValueError(f"invalid regex {self.regex!r}: {exc}") from None
        return self

    @property
    def name(self) -> str:
        key, value = next((k, v) for k, v in self.model_dump().items() if v is not None)
        return f"{key}: {value}"


class Scenario(_Strict):
    id: str
    prompt: str | None = None
    prompts: tuple[str, ...] = ()
    system: str | None = None
    checks: tuple[Check, ...] = ()
    timeout: float | None = Field(None, gt=0)

    @model_validator(mode="after")
    def _prompts(self) -> Scenario:
        if (self.prompt is None) == (not self.prompts):
            raise ValueError(f"scenario {self.id!r} needs either prompt or prompts")
        return self

    @property
    def turns(self) -> tuple[str, ...]:
        return (self.prompt,) if self.prompt is not None else self.prompts


class OpenCodeSettings(_Strict):
    command: str | None = None
    endpoint: dict[str, Any] | None = None
    """``{url, api_key?, limits?: {context, output}}``: the spawned server's provider
    for the models' PROVIDER part."""
    permission: Literal["allow", "deny", "ask-reject"] = "deny"
    environment: dict[str, str] = Field(default_factory=dict)
    opencode_config: dict[str, Any] = Field(default_factory=dict)


class AgentSettings(_Strict):
    persona: dict[str, Any] = Field(default_factory=dict)
    """``{name, prompt, settings}`` for the persona every session uses."""
    database: str | None = None
    """A database URL; a temporary SQLite file by default."""


class ScenarioFile(_Strict):
    models: tuple[str, ...]
    modes: tuple[str, ...] = ("default",)
    iterations: int = Field(1, ge=1)
    timeout: float = Field(120.0, gt=0)
    opencode: OpenCodeSettings = OpenCodeSettings()
    agent: AgentSettings = AgentSettings()
    prices: dict[str, Price] = Field(default_factory=dict)
    scenarios: tuple[Scenario, ...]

    @model_validator(mode="after")
    def _unique(self) -> ScenarioFile:
        ids = [s.id for s in self.scenarios]
        if len(ids) != len(set(ids)):
            raise ValueError("scenario ids must be unique")
        return self


class ScenarioFileError(Exception):
    pass


def load_scenarios(path: str | Path) -> ScenarioFile:
    try:
        raw = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as exc:
        raise ScenarioFileError(f"cannot read {path}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ScenarioFileError(f"{path} is not valid YAML: {exc}") from exc
    try:
        return ScenarioFile.model_validate(raw)
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise ScenarioFileError(f"invalid scenarios file {path}: {details}") from exc


class CheckResult(BaseModel):
    name: str
    passed: bool
    detail: str = ""


def evaluate(checks: tuple[Check, ...], results: list[PromptResult]) -> list[CheckResult]:
    """Each check on an iteration's prompt results (text checks look at the last)."""
    text = results[-1].text if results else ""
    tools = {c.name for r in results for c in r.metrics.tool_calls}
    duration = sum(r.metrics.timing.total_ms for r in results)
    tokens = sum(r.metrics.tokens.total for r in results)
    completed = bool(results) and all(r.completion_reason in ("stop", "length") for r in results)
    out = []
    for check in checks:
        if check.contains is not None:
            ok, detail = check.contains in text, f"text: {text[:80]!r}"
        elif check.not_contains is not None:
            ok, detail = check.not_contains not in text, f"text: {text[:80]!r}"
        elif check.regex is not None:
            ok, detail = re.search(check.regex, text) is not None, f"text: {text[:80]!r}"
        elif check.tool_called is not None:
            ok, detail = check.tool_called in tools, f"tools: {sorted(tools)}"
        elif check.max_duration_ms is not None:
            ok, detail = duration <= check.max_duration_ms, f"{duration:.0f} ms"
        elif check.max_tokens is not None:
            ok, detail = tokens <= check.max_tokens, f"{tokens} tokens"
        else:
            reasons = [r.completion_reason for r in results]
            ok, detail = completed == check.completes, f"completion: {reasons}"
        out.append(CheckResult(name=check.name, passed=ok, detail=detail))
    return out
