"""Capture real ``codex exec --json`` output as fixtures for the Codex mapping tests.

    .venv/bin/python -m tests.profiler.capture_codex   # rewrites fixtures/codex_*.jsonl

Each fixture is exactly what the pinned Codex CLI (tests/e2e, @openai/codex) printed
on stdout, run by the profiler's own Codex provider against a gateway whose model is
a scripted backend, down one of the paths the mapping handles. A session of several
prompts is its runs' output one after another (each run starts with
``thread.started``). The arrival times are not kept: the tests stamp each line
themselves, so the durations they check are exact.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from llmbridge.profiler.providers.codex import CodexSessionProvider, CodexSettings
from llmbridge.profiler.providers.provider import PromptTimeoutError
from llmbridge.profiler.records.types import ProviderConfig
from tests.conftest import running_gateway
from tests.e2e.test_codex import CODEX

FIXTURES = Path(__file__).resolve().parent / "fixtures"
MODEL = "scripted"
LEAN = CodexSettings(
    command=str(CODEX),
    instructions="You are a coding agent. Run shell commands with exec_command.",
    args=("--disable", "multi_agent", "--disable", "goals", "--disable", "apps"),
)
"""A short base prompt and fewer tools: what the demo runs against a small model."""


@dataclass
class Case:
    name: str
    prompts: list[str]
    scripts: list[Script]
    permission: str = "allow"
    files: dict[str, str] = field(default_factory=dict)


def _shell(command: str) -> Script:
    return Script(text=[], tool_calls=[("exec_command", {"cmd": command})])


PATCH = "*** Begin Patch\n*** Add File: hello.py\n+print('hello')\n*** End Patch\n"

CASES = [
    Case("text", ["Say hello"], [Script(text=["Hello ", "from llmbridge."])]),
    Case(
        "shell",
        ["Create hello.txt"],
        [_shell("echo hello > hello.txt"), Script(text=["Wrote hello.txt."])],
    ),
    Case(
        "shell_failed",
        ["Run the failing command"],
        [_shell("echo before; exit 3"), Script(text=["The command failed."])],
    ),
    Case(
        "reasoning",
        ["Think, then answer"],
        [Script(thinking=["Let me think. ", "Done."], text=["The answer."])],
    ),
    Case(
        "file_change",
        ["Create hello.py"],
        [_shell(f"apply_patch <<'EOF'\n{PATCH}EOF"), Script(text=["Created hello.py."])],
    ),
    Case(
        "turn_failed",
        ["This fails"],
        [Script(fail_before=BackendError("the scripted backend failed", retryable=False))],
    ),
    Case(
        "resume",
        ["First prompt", "Second prompt"],
        [
            _shell("echo one > one.txt"),
            Script(text=["First answer."]),
            Script(text=["Second answer."]),
        ],
    ),
]


async def capture(case: Case, url: str, backend: ScriptedBackend, out: Path) -> None:
    backend.queue.clear()
    backend.enqueue(*case.scripts)
    provider = CodexSessionProvider(LEAN, gateway_url=url)
    await provider.init(ProviderConfig(model=MODEL, permission=case.permission))  # type: ignore[arg-type]
    handle = await provider.create_session(
        system_instructions=None, scenario_id=case.name, iteration=0
    )
    session = provider.sessions[handle.session_id]
    for name, content in case.files.items():
        (session.cwd / name).write_text(content, encoding="utf-8")
    for prompt in case.prompts:
        try:
            await provider.prompt(handle, prompt, 120)
        except PromptTimeoutError:
            break
    lines = [line.text for run in session.runs for line in run.lines if line.data is not None]
    await provider.destroy_session(handle)
    await provider.shutdown()
    await asyncio.to_thread(out.write_text, "\n".join(lines) + "\n", encoding="utf-8")
    print(f"{out.name}: {len(lines)} lines")


async def main() -> None:
    FIXTURES.mkdir(exist_ok=True)
    backend = ScriptedBackend("model", models=(MODEL,))
    with running_gateway({"model": backend}, models=[{"name": MODEL, "backend": "model"}]) as gw:
        for case in CASES:
            await capture(case, gw.url, backend, FIXTURES / f"codex_{case.name}.jsonl")


if __name__ == "__main__":
    asyncio.run(main())
