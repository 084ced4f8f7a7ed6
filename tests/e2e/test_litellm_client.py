"""LiteLLM as a client of the gateway: its ``ollama_chat/`` provider (the way CrewAI,
DSPy and aider reach an Ollama server) says a model takes tools only when ``/api/show``'s
template mentions them, then completes a tool round through the gateway on a scripted
backend that gives no template.

LiteLLM (pinned in tests/e2e/requirements-litellm.txt) runs in its own virtualenv,
tests/e2e/.venv-litellm, which ``make test`` prepares (its pins conflict with ours), as
the script ``litellm_ollama_chat.py``."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ToolResultPart
from tests.conftest import RunningServer, running_gateway
from tests.e2e.cli_harness import E2E_DIR, SETUP, TIMEOUT

PYTHON = E2E_DIR / ".venv-litellm" / "bin" / "python"
SCRIPT = E2E_DIR / "litellm_ollama_chat.py"


@pytest.fixture(scope="module")
def litellm_python() -> str:
    """LiteLLM's virtualenv: missing means the suite was not set up (a failure)."""
    if not PYTHON.is_file():
        pytest.fail(f"LiteLLM's virtualenv is not at {PYTHON.parent.parent}.\n{SETUP}")
    return str(PYTHON)


@pytest.fixture(scope="module")
def tools_backend() -> ScriptedBackend:
    """Models that call tools (the scripted default), and no template at all."""
    return ScriptedBackend("scripted")


@pytest.fixture(scope="module")
def gateway(tools_backend: ScriptedBackend) -> Iterator[RunningServer]:
    plain = ScriptedBackend("plain", capabilities=frozenset({"completion"}))
    models = [{"name": "plain-*", "backend": "plain"}]
    with running_gateway({"scripted": tools_backend, "plain": plain}, models=models) as server:
        yield server


def run_litellm(python: str, home: Path, gateway: RunningServer, *args: str) -> dict[str, Any]:
    """The script in LiteLLM's virtualenv, with a clean environment under ``home``."""
    done = subprocess.run(
        [python, str(SCRIPT), gateway.url, *args],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=home,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "127.0.0.1,localhost", "HOME": str(home)},
        check=False,
    )
    assert done.returncode == 0, f"exit code {done.returncode}\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_litellm_offers_the_tools_and_completes_a_tool_round(
    litellm_python: str, tmp_path: Path, gateway: RunningServer, tools_backend: ScriptedBackend
) -> None:
    tools_backend.queue.clear()
    tools_backend.enqueue(
        Script(text=[], tool_calls=[("get_weather", {"city": "Paris"})]),
        Script(text=["It is 18 C and sunny in Paris."]),
    )
    asked = len(tools_backend.requests)
    result = run_litellm(litellm_python, tmp_path, gateway, "qwen-tools", "plain-model")
    assert result["supports_function_calling"] is True
    assert result["plain_supports_function_calling"] is False  # its show has no tools
    assert result["max_input_tokens"] == 8192  # read from model_info's context_length
    assert result["first_finish_reason"] == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in result["tool_calls"]] == [
        ("get_weather", {"city": "Paris"})
    ]
    assert result["answer"] == "It is 18 C and sunny in Paris."
    assert result["second_finish_reason"] == "stop"
    first, second = tools_backend.requests[asked:]
    assert [tool.name for tool in first.tools] == ["get_weather"]
    results = [p for m in second.messages for p in m.parts if isinstance(p, ToolResultPart)]
    assert [r.content for r in results] == ["18 C and sunny"]
    assert results[0].tool_call_id == result["tool_calls"][0]["id"]
