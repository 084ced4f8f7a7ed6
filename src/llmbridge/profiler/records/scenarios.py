"""The scenarios file: what to run, against what, how often, and what counts as a pass.

Example (``docs/PROFILER.md`` has the full reference)::

    models: [gw/smollm2]              # OpenCode: PROVIDER/MODEL; agent: a gateway model
    modes: [default]                  # OpenCode agents (build, plan...), "default", or
                                      # {name, agent?, system?, environment?, path?} (modes.py)
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
      - id: hello
        prompt: Create hello.py that prints hello.
        workspace:                    # a fresh temporary directory per iteration
          files: {README.md: "# demo", data.csv: {from: fixtures/data.csv}}
          setup: git init -q          # run in it first (time-limited)
        checks:
          - file_exists: hello.py
          - file_contains: {path: hello.py, text: print}
          - file_matches: {path: hello.py, regex: "hel+o"}
          - command: {run: python hello.py, timeout: 30, output_contains: hello}

Workspace and check paths are relative and stay inside the workspace (no ``..``, not
absolute); ``from`` sources are relative to the scenarios file.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath, PureWindowsPath
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from llmbridge.profiler.records.metrics import Price
from llmbridge.profiler.records.modes import DEFAULT_MODE, ModeSpec
from llmbridge.profiler.records.settings import ClaudeCodeSettings, CodexSettings, GeminiCliSettings
from llmbridge.profiler.records.types import PromptResult

__all__ = [
    "Check",
    "CheckResult",
    "CommandCheck",
    "FileRegex",
    "FileSource",
    "FileText",
    "Scenario",
    "ScenarioFile",
    "Workspace",
    "evaluate",
    "load_scenarios",
    "workspace_path",
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def workspace_path(path: str) -> str:
    """``path`` checked to name something inside a workspace: relative, no ``..``."""
    if not path or not path.strip():
        raise ValueError("a workspace path may not be empty")
    if PurePosixPath(path).is_absolute() or PureWindowsPath(path).is_absolute():
        raise ValueError(f"workspace path {path!r} is absolute: give it relative to the workspace")
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if ".." in parts:
        raise ValueError(f"workspace path {path!r} leaves the workspace ('..')")
    if not [p for p in parts if p != "."]:
        raise ValueError(f"workspace path {path!r} names the workspace itself, not a file in it")
    return path


def _regex(pattern: str) -> str:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regex {pattern!r}: {exc}") from None
    return pattern


class FileText(_Strict):
    path: str
    text: str

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        return workspace_path(value)


class FileRegex(_Strict):
    path: str
    regex: str

    @field_validator("path")
    @classmethod
    def _inside(cls, value: str) -> str:
        return workspace_path(value)

    @field_validator("regex")
    @classmethod
    def _compiles(cls, value: str) -> str:
        return _regex(value)


class CommandCheck(_Strict):
    """A command run in the workspace after the session: it passes on exit status 0
    (and, with ``output_contains``, when its output holds that text)."""

    run: str = Field(min_length=1)
    timeout: float = Field(30.0, gt=0, le=3600)
    output_contains: str | None = None


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
    file_exists: str | None = None
    file_contains: FileText | None = None
    file_matches: FileRegex | None = None
    command: CommandCheck | None = None

    @field_validator("file_exists")
    @classmethod
    def _inside(cls, value: str | None) -> str | None:
        return None if value is None else workspace_path(value)

    @field_validator("command", mode="before")
    @classmethod
    def _command_line(cls, value: Any) -> Any:
        return {"run": value} if isinstance(value, str) else value

    @model_validator(mode="after")
    def _one(self) -> Check:
        set_fields = [k for k, v in self.model_dump().items() if v is not None]
        if len(set_fields) != 1:
            raise ValueError(f"a check sets exactly one condition, not {set_fields or 'none'}")
        if self.regex is not None:
            _regex(self.regex)
        return self

    @property
    def on_workspace(self) -> bool:
        """The check looks at the workspace, not at the replies."""
        return any(
            v is not None
            for v in (self.file_exists, self.file_contains, self.file_matches, self.command)
        )

    @property
    def name(self) -> str:
        if self.file_contains is not None:
            return f"file_contains: {self.file_contains.path} has {self.file_contains.text!r}"
        if self.file_matches is not None:
            return f"file_matches: {self.file_matches.path} ~ {self.file_matches.regex!r}"
        if self.command is not None:
            return f"command: {self.command.run}"
        key, value = next((k, v) for k, v in self.model_dump().items() if v is not None)
        return f"{key}: {value}"


class FileSource(_Strict):
    """A workspace file (or directory) copied from the scenarios file's side."""

    source: str = Field(alias="from")

    @field_validator("source")
    @classmethod
    def _exists(cls, value: str, info: ValidationInfo) -> str:
        base = Path((info.context or {}).get("base_dir", "."))
        found = (base / value).resolve()
        if not found.exists():
            raise ValueError(f"'from: {value}' does not exist (looked for {found})")
        return str(found)


class Workspace(_Strict):
    """A fresh temporary directory per iteration, where the agent works."""

    files: dict[str, str | FileSource] = Field(default_factory=dict)
    """Path in the workspace -> its content, or ``{from: PATH}``."""
    setup: str | None = None
    """A shell command run in the workspace before the session."""
    setup_timeout: float = Field(120.0, gt=0, le=3600)

    @field_validator("files")
    @classmethod
    def _inside(cls, value: dict[str, str | FileSource]) -> dict[str, str | FileSource]:
        for path in value:
            workspace_path(path)
        return value


class Scenario(_Strict):
    id: str
    prompt: str | None = None
    prompts: tuple[str, ...] = ()
    system: str | None = None
    checks: tuple[Check, ...] = ()
    timeout: float | None = Field(None, gt=0)
    workspace: Workspace | None = None

    @model_validator(mode="after")
    def _prompts(self) -> Scenario:
        if (self.prompt is None) == (not self.prompts):
            raise ValueError(f"scenario {self.id!r} needs either prompt or prompts")
        return self

    @property
    def turns(self) -> tuple[str, ...]:
        return (self.prompt,) if self.prompt is not None else self.prompts

    @property
    def needs_workspace(self) -> bool:
        """A declared workspace, or checks on one (which then start empty)."""
        return self.workspace is not None or any(c.on_workspace for c in self.checks)


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
    modes: tuple[ModeSpec, ...] = (ModeSpec.named(DEFAULT_MODE),)
    """A bare name is that OpenCode agent (``modes.ModeSpec.named``)."""
    iterations: int = Field(1, ge=1)
    timeout: float = Field(120.0, gt=0)
    opencode: OpenCodeSettings = OpenCodeSettings()
    agent: AgentSettings = AgentSettings()
    claude_code: ClaudeCodeSettings = ClaudeCodeSettings()
    """The Claude Code provider (providers/claude_code.py)."""
    gemini_cli: GeminiCliSettings = GeminiCliSettings()
    """The Gemini CLI provider (providers/gemini_cli.py)."""
    codex: CodexSettings = CodexSettings()
    """The Codex provider (providers/codex.py)."""
    prices: dict[str, Price] = Field(default_factory=dict)
    scenarios: tuple[Scenario, ...]

    @field_validator("modes", mode="before")
    @classmethod
    def _named(cls, value: Any) -> Any:
        if isinstance(value, list | tuple):
            return [ModeSpec.named(m).model_dump() if isinstance(m, str) else m for m in value]
        return value

    @model_validator(mode="after")
    def _unique(self) -> ScenarioFile:
        ids = [s.id for s in self.scenarios]
        if len(ids) != len(set(ids)):
            raise ValueError("scenario ids must be unique")
        names = [m.name for m in self.modes]
        if len(names) != len(set(names)):
            raise ValueError("mode names must be unique")
        return self

    @property
    def mode_names(self) -> tuple[str, ...]:
        return tuple(m.name for m in self.modes)


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
        # Relative ``from`` sources and mode ``path`` entries are the file's neighbours.
        return ScenarioFile.model_validate(raw, context={"base_dir": Path(path).parent})
    except ValidationError as exc:
        details = "; ".join(
            f"{'.'.join(str(p) for p in e['loc']) or '(top)'}: {e['msg']}" for e in exc.errors()
        )
        raise ScenarioFileError(f"invalid scenarios file {path}: {details}") from exc


class CheckResult(BaseModel):
    name: str
    passed: bool
    detail: str = ""
    output: str | None = None
    """A ``command`` check's output (stdout and stderr), its last few kilobytes."""


def evaluate(checks: tuple[Check, ...], results: list[PromptResult]) -> list[CheckResult]:
    """Each check on an iteration's prompt results (text checks look at the last).

    Workspace checks are ``workspace.evaluate_all``'s; here they fail, saying so."""
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
        elif check.on_workspace:
            ok, detail = False, "a workspace check, evaluated on the workspace (run/workspace.py)"
        else:
            reasons = [r.completion_reason for r in results]
            ok, detail = completed == check.completes, f"completion: {reasons}"
        out.append(CheckResult(name=check.name, passed=ok, detail=detail))
    return out
