"""Capture the session files the pinned Claude Code, Codex and Gemini CLIs write, as
fixtures for ``profile import``.

    .venv/bin/python -m tests.profiler.capture_transcripts   # rewrites fixtures/transcripts/

Each CLI runs one session through the profiler's own provider against a gateway on a
scripted backend: a shell tool call that writes a file, its result, a line of text,
then the session resumed for a second prompt. Before the session's HOME is removed,
the file the CLI kept is copied: Claude Code's transcript
(``$HOME/.claude/projects/<project>/<session>.jsonl``), Codex's rollout
(``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-...jsonl``) and Gemini CLI's session
(``$HOME/.gemini/tmp/<project>/chats/session-...jsonl``). The temporary HOME and working
directory are replaced by ``$HOME`` and ``$WORKDIR``; nothing else is touched.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.profiler.providers.claude_code import ClaudeCodeSessionProvider
from llmbridge.profiler.providers.cli_agent import CliSessionProvider
from llmbridge.profiler.providers.codex import CodexSessionProvider
from llmbridge.profiler.providers.gemini_cli import GeminiCliSessionProvider
from llmbridge.profiler.records.settings import ClaudeCodeSettings, CodexSettings, GeminiCliSettings
from llmbridge.profiler.records.types import ProviderConfig
from tests.conftest import running_gateway

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "transcripts"
BIN = Path(__file__).resolve().parent.parent / "e2e" / "node_modules" / ".bin"
SHELLS = {"Bash": "command", "exec_command": "cmd", "run_shell_command": "command"}
"""Each CLI's shell tool and the name of its command argument."""
PROMPTS = ["Write hi to out.txt", "Say it again"]


class ShellThenText(ScriptedBackend):
    """The first request offering a shell gets a call writing out.txt; one carrying the
    call's result gets the final text; the resumed prompt gets plain text."""

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        shell = next((t.name for t in request.tools if t.name in SHELLS), None)
        turns = [m for m in request.messages if m.role != "system"]
        last = turns[-1] if turns else None
        asked = last.text if last is not None and last.role == "user" else ""
        if shell and last is not None and last.role == "tool":
            self.enqueue(Script(thinking=["It ran."], text=["Wrote ", "out.txt."]))
        elif shell and "again" not in asked:
            call = (shell, {SHELLS[shell]: "echo hi > out.txt"})
            self.enqueue(
                Script(thinking=["I will write it."], text=["Writing."], tool_calls=[call])
            )
        else:
            self.enqueue(Script(text=["Hi ", "again."]))
        async for event in super().chat(request):
            yield event


async def _capture(provider: CliSessionProvider, pattern: str, name: str) -> None:
    await provider.init(ProviderConfig(model="scripted", permission="allow"))
    handle = await provider.create_session(system_instructions=None, scenario_id=name, iteration=0)
    session = provider.sessions[handle.session_id]
    for text in PROMPTS:
        result = await provider.prompt(handle, text, 180)
        print(f"{name}: {text!r}: {result.completion_reason} {result.error or ''}")
    (found,) = sorted(session.home.rglob(pattern))
    text = found.read_text(encoding="utf-8")
    text = text.replace(str(session.cwd), "$WORKDIR").replace(str(session.home), "$HOME")
    out = FIXTURES / f"{name}.jsonl"
    out.write_text(text, encoding="utf-8")
    print(f"  {found.relative_to(session.home)} -> {out.name}: {len(text.splitlines())} lines")
    await provider.destroy_session(handle)
    await provider.shutdown()


async def main() -> None:
    FIXTURES.mkdir(parents=True, exist_ok=True)
    model = ShellThenText("scripted", models=("scripted",))
    routes = [{"name": "*", "backend": "scripted", "model": "scripted"}]
    with running_gateway({"scripted": model}, models=routes) as gateway:
        claude = ClaudeCodeSessionProvider(
            ClaudeCodeSettings(command=str(BIN / "claude"), args=("--tools", "Bash")),
            gateway_url=gateway.url,
        )
        await _capture(claude, ".claude/projects/*/*.jsonl", "claude_code_session")
        codex = CodexSessionProvider(
            CodexSettings(
                command=str(BIN / "codex"),
                args=("--disable", "multi_agent", "--disable", "goals", "--disable", "apps"),
            ),
            gateway_url=gateway.url,
        )
        await _capture(codex, "sessions/**/rollout-*.jsonl", "codex_rollout")
        gemini = GeminiCliSessionProvider(
            GeminiCliSettings(command=str(BIN / "gemini")), gateway_url=gateway.url
        )
        await _capture(gemini, ".gemini/tmp/*/chats/session-*.jsonl", "gemini_cli_session")


if __name__ == "__main__":
    asyncio.run(main())
