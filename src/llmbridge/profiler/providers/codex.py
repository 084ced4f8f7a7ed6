"""The Codex ``SessionProvider``: the real Codex CLI (``codex exec --json``) profiled.

Each session gets a fresh HOME and ``CODEX_HOME`` (``cli_agent.make_home``) holding a
``config.toml`` that names the model endpoint (an llmbridge gateway's Responses
route, ``wire_api = "responses"``) as Codex's model provider, with no retries (a
failed request is the prompt's error, not a hidden second try), the update check,
plugins and analytics off, and the sandbox's writable roots limited to the working
directory. The first prompt runs ``codex exec --json`` in the session's directory
(the iteration's workspace, or an empty one); each later prompt resumes the thread
with ``codex exec resume THREAD_ID``, so one session is one Codex thread. Stdout's
JSON lines are mapped by ``codex_events.CodexTurn`` (each line stamped on arrival).

What a profile's options mean to Codex:

- the model: ``--model NAME`` (a gateway model name, as the scenarios file gives it);
- the permission: ``allow`` is the ``workspace-write`` sandbox (commands run, write
  only in the working directory, no network); ``deny`` and ``ask-reject`` are the
  ``read-only`` sandbox. ``codex exec`` never asks (``approval_policy = "never"``;
  0.169.0 refuses the old ``untrusted``), so a refused action is a command that fails
  in the sandbox, and the model is told so;
- the mode's and the scenario's instructions: ``developer_instructions``, which
  Codex sends as a developer message after its own base instructions (an
  ``AGENTS.md`` would work too, but would be a file in the workspace the checks
  look at);
- ``codex.instructions`` in the scenarios file replaces Codex's base instructions
  (``model_instructions_file``): its own are several thousand tokens, more than a
  small local model's context holds; ``codex.config`` is merged into
  ``config.toml`` (features to turn off, say), ``codex.args`` added to every run.

A gap to know (0.169.0): a command that fails *because the sandbox refused it*
(a write in ``read-only``) is sent back to the model as a failed tool call, but
``codex exec --json`` prints no ``command_execution`` item for it, so the trace
cannot show that call (seen once more on the embedded model, for a call whose turn
then ran out of time). The session's rollout file (``$CODEX_HOME/sessions/…``)
has it: ``unreported_calls`` counts the calls there beyond those the stream
showed, and ``export_session`` adds an ``error`` event saying how many are
missing, so a trace is never silently short.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from llmbridge.profiler.providers.cli_agent import (
    CliRun,
    CliSession,
    CliSessionProvider,
    merge_settings,
    now_ms,
)
from llmbridge.profiler.providers.codex_events import CodexTurn, Usage
from llmbridge.profiler.records.settings import CodexSettings
from llmbridge.profiler.records.types import PromptResult, SessionHandle, SessionTrace

__all__ = ["CodexSessionProvider", "CodexSettings", "toml_value", "unreported_calls"]


def toml_value(value: Any) -> str:
    """``value`` as a TOML value (inline tables for mappings). JSON's string escapes
    are TOML's basic-string escapes once non-ASCII text is left as is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return json.dumps(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list | tuple):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{json.dumps(str(k))} = {toml_value(v)}" for k, v in value.items())
        return "{ " + items + " }" if items else "{}"
    raise ValueError(f"cannot write {type(value).__name__} to config.toml")


def _toml(config: dict[str, Any]) -> str:
    """Top-level keys first, then one ``[table]`` per mapping (its nested mappings as
    inline tables)."""
    lines = [
        f"{json.dumps(k)} = {toml_value(v)}" for k, v in config.items() if not isinstance(v, dict)
    ]
    for key, table in config.items():
        if isinstance(table, dict):
            lines += ["", f"[{json.dumps(key)}]"]
            lines += [f"{json.dumps(k)} = {toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"


def unreported_calls(codex_home: Path, thread_id: str, reported: int) -> int:
    """How many of the thread's tool calls in its rollout file go beyond the
    ``reported`` ones ``codex exec --json`` printed (0 when the file is missing)."""
    calls = 0
    for path in (codex_home / "sessions").rglob(f"rollout-*-{thread_id}.jsonl"):
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                record = json.loads(line)
            except ValueError:
                continue
            payload = record.get("payload") if isinstance(record, dict) else None
            if (
                record.get("type") == "response_item"
                and isinstance(payload, dict)
                and payload.get("type") in ("function_call", "custom_tool_call")
            ):
                calls += 1
    return max(calls - reported, 0)


class CodexSessionProvider(CliSessionProvider):
    id = "codex"
    default_command = "codex"
    settings_type = CodexSettings
    settings: CodexSettings

    def __init__(
        self,
        settings: CodexSettings | None = None,
        *,
        gateway_url: str | None = None,
        prices: Any = None,
    ) -> None:
        super().__init__(settings, gateway_url=gateway_url, prices=prices)
        self._usage: dict[str, Usage] = {}
        """Per session, the thread's usage after its last prompt."""
        self._tools: dict[str, int] = {}
        """Per session, the tool calls the JSON stream reported."""

    # -- how Codex is called ----------------------------------------------------------

    def _codex_home(self, session: CliSession) -> Path:
        return session.home / "codex"

    def prepare_home(self, session: CliSession) -> None:
        assert self.config is not None
        codex_home = self._codex_home(session)
        codex_home.mkdir()
        config: dict[str, Any] = {
            "model": self.config.model,
            "model_provider": "llmbridge",
            "approval_policy": "never",
            "sandbox_mode": "workspace-write" if self.config.permission == "allow" else "read-only",
            "check_for_update_on_startup": False,
            "model_providers": {
                "llmbridge": {
                    "name": "llmbridge",
                    "base_url": f"{self.endpoint}/v1",
                    "wire_api": "responses",
                    "env_key": "LLMBRIDGE_API_KEY",
                    "request_max_retries": 0,
                    "stream_max_retries": 0,
                }
            },
            "features": {"plugins": False},
            "analytics": {"enabled": False},
            # Only the working directory is writable (/tmp and $TMPDIR are by default).
            "sandbox_workspace_write": {"exclude_slash_tmp": True, "exclude_tmpdir_env_var": True},
        }
        if session.system:
            config["developer_instructions"] = session.system
        if self.settings.instructions is not None:
            instructions = session.home / "instructions.md"
            instructions.write_text(self.settings.instructions, encoding="utf-8")
            config["model_instructions_file"] = str(instructions)
        config = merge_settings(config, self.settings.config)
        (codex_home / "config.toml").write_text(_toml(config), encoding="utf-8")

    def environment(self, session: CliSession) -> dict[str, str]:
        return {
            "CODEX_HOME": str(self._codex_home(session)),
            "LLMBRIDGE_API_KEY": self.settings.api_key,
        }

    def command_line(self, session: CliSession, text: str) -> list[str]:
        assert self.config is not None
        argv = [
            self.command,
            "exec",
            "--json",
            "--skip-git-repo-check",
            "--cd",
            str(session.cwd),
            "--model",
            self.config.model,
            *self.settings.args,
        ]
        if session.resume_id is not None:
            argv += ["resume", session.resume_id]
        # "--" so a prompt starting with "-" is not taken for an option.
        return [*argv, "--", text]

    # -- what it printed --------------------------------------------------------------

    def map_run(self, session: CliSession, run: CliRun, timeout: float) -> PromptResult:
        builder = session.builder
        turn = CodexTurn(
            turn=builder.turn + 1,
            started_ms=run.started_ms,
            before=self._usage.get(session.key, Usage()),
        )
        for line in run.lines:
            if line.data is not None and turn.feed(line.at_ms, line.data):
                break
        ended = turn.finished
        if not ended:
            turn.close(run.ended_ms, "timeout" if run.timed_out else "codex exec exited")
        if turn.thread_id is not None:
            session.resume_id = turn.thread_id
        if turn.usage is not None:
            self._usage[session.key] = turn.usage
        builder.events.extend(turn.events(self.price))
        builder.turn = turn.turn
        self._tools[session.key] = self._tools.get(session.key, 0) + len(turn.tools)
        failure = run.failure()
        if failure is not None and not ended:
            builder.error(run.ended_ms, f"codex exec: {failure}")
        return turn.result(timed_out=run.timed_out, error=failure, price=self.price)

    async def export_session(self, handle: SessionHandle) -> SessionTrace:
        """The trace, with an ``error`` event when the thread's rollout holds tool
        calls the JSON stream never printed (see the module's docstring)."""
        session = self._session(handle)
        if session.resume_id is not None:
            reported = self._tools.get(session.key, 0)
            missing = await asyncio.to_thread(
                unreported_calls, self._codex_home(session), session.resume_id, reported
            )
            if missing:
                session.builder.error(
                    session.runs[-1].ended_ms if session.runs else now_ms(),
                    f"{missing} tool call(s) in Codex's rollout are not among the items "
                    "codex exec --json printed: not in this trace",
                )
        return await super().export_session(handle)

    async def destroy_session(self, handle: SessionHandle) -> None:
        self._usage.pop(handle.session_id, None)
        self._tools.pop(handle.session_id, None)
        await super().destroy_session(handle)
