"""Capture real Claude Code and Gemini CLI runs as fixtures for the mapping tests.

    .venv/bin/python -m tests.profiler.capture_cli_agents   # rewrites tests/profiler/fixtures/

Each fixture is one run's stdout, line for line, as the pinned CLI
(tests/e2e/node_modules/.bin) printed it when the profiler's own provider ran it
against a gateway on a scripted backend: a shell tool call then text, the same
session resumed for a second prompt, a shell command that fails, and a backend
error. The temporary HOME and working directory are replaced by ``$HOME`` and
``$WORKDIR``; nothing else is touched.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.profiler.providers.claude_code import ClaudeCodeSessionProvider
from llmbridge.profiler.providers.cli_agent import CliAgentSettings, CliSessionProvider
from llmbridge.profiler.providers.gemini_cli import GeminiCliSessionProvider
from llmbridge.profiler.providers.provider import PromptTimeoutError
from llmbridge.profiler.records.types import ProviderConfig
from tests.conftest import running_gateway

FIXTURES = Path(__file__).resolve().parent / "fixtures"
BIN = Path(__file__).resolve().parent.parent / "e2e" / "node_modules" / ".bin"
SHELL_TOOLS = ("Bash", "run_shell_command")
SYSTEM = "You are profiled by llmbridge."
# Gemini CLI refuses $(...) and backticks; a pipe proves a shell ran.
WRITE = "echo hi | tr a-z A-Z > out.txt"
FAIL = "ls does-not-exist"  # exits 2


class ToolLoop(ScriptedBackend):
    """A request offering the shell tool gets a call (thinking and a line of text
    first): ``call`` names the tool and its arguments (the shell when ``None``), then
    the final text once it carries the tool's result; a prompt asking to ``fail``
    gets a backend error; other requests (and the resumed prompt) get plain text."""

    call: tuple[str, dict[str, str]] | None = None

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        shell = next((t.name for t in request.tools if t.name in SHELL_TOOLS), None)
        # Claude Code 2.1.330 ends with a system turn: the conversation's last is before it.
        turns = [m for m in request.messages if m.role != "system"]
        last = turns[-1] if turns else None
        asked = last.text if last is not None and last.role == "user" else ""
        if shell and "Please fail" in asked:
            error = InvalidRequestError("the scripted backend refuses this request")
            self.enqueue(Script(fail_before=error))
        elif shell and last is not None and last.role == "tool":
            self.enqueue(Script(thinking=["Done."], text=["The command", " ran."]))
        elif shell and "again" not in asked:
            name, arguments = self.call or (shell, {"command": WRITE, "description": "Run it"})
            self.enqueue(
                Script(
                    thinking=["I will run it."], text=["Running."], tool_calls=[(name, arguments)]
                )
            )
        else:
            self.enqueue(Script(text=["Once", " again."]))
        async for event in super().chat(request):
            yield event


async def _capture(
    provider: CliSessionProvider, model: ToolLoop, name: str, prompts: list[str]
) -> None:
    """One session: each prompt's run is saved as NAME_N.jsonl."""
    await provider.init(ProviderConfig(model="scripted", permission="allow"))
    handle = await provider.create_session(
        system_instructions=SYSTEM, scenario_id=name, iteration=0
    )
    session = provider.sessions[handle.session_id]
    for number, text in enumerate(prompts, start=1):
        try:
            result = await provider.prompt(handle, text, 120)
        except PromptTimeoutError as exc:
            result = exc.result
        run = session.runs[-1]
        lines = [
            line.text.replace(str(session.cwd), "$WORKDIR").replace(str(session.home), "$HOME")
            for line in run.lines
        ]
        path = FIXTURES / f"{name}_{number}.jsonl"
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"{path.name}: {len(lines)} lines, {result.completion_reason}, {result.error}")
    system = model.requests[0].messages[0].text if model.requests else ""
    print(f"  the system prompt carries ours: {SYSTEM in system}")
    await provider.destroy_session(handle)
    await provider.shutdown()


async def main() -> None:
    FIXTURES.mkdir(exist_ok=True)
    model = ToolLoop("scripted", models=("scripted",))
    routes = [{"name": "*", "backend": "scripted", "model": "scripted"}]
    with running_gateway({"scripted": model}, models=routes) as gateway:
        for provider, name, args in (
            (ClaudeCodeSessionProvider, "claude_code", ("--tools", "Bash")),
            (GeminiCliSessionProvider, "gemini_cli", ()),
        ):
            command = str(BIN / ("claude" if name == "claude_code" else "gemini"))
            settings = CliAgentSettings(command=command, args=args)
            failing = (
                ("Bash", {"command": FAIL, "description": "List it"})
                if name == "claude_code"
                # A failing command is a successful run_shell_command to Gemini CLI
                # (its output says how it failed); a missing file is a tool error.
                else ("read_file", {"file_path": "does-not-exist.txt"})
            )
            for case, prompts, call in (
                ("tool", ["Write hi to out.txt", "Say it again"], None),
                ("tool_error", ["Look at a missing file"], failing),
                ("backend_error", ["Please fail"], None),
            ):
                model.requests.clear()
                model.call = call
                instance = provider(settings, gateway_url=gateway.url)
                await _capture(instance, model, f"{name}_{case}", prompts)


if __name__ == "__main__":
    asyncio.run(main())
