"""The official @google/genai JS client (npm ``@google/genai``, pinned in
tests/e2e/package.json; the newest under ``make compat``) against the gateway's
Interactions API: create, stream, continue with ``previous_interaction_id``, get,
delete, and a function call with its ``function_result`` turn, run from a small Node
script (``genai_js_interactions.mjs``) as an app would run them, on a scripted backend
and on the embedded model; the interactions land in the request log like any request."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.embedded.backend import EmbeddedBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.accounts.request_log_reads import logged_rows
from tests.conftest import RunningServer, running_gateway
from tests.e2e.cli_harness import E2E_DIR, SETUP, TIMEOUT
from tests.e2e.clients import NODE_MODULES, expected_version, node_script

SCRIPT = E2E_DIR / "genai_js_interactions.mjs"
PACKAGE = NODE_MODULES / "@google" / "genai" / "package.json"
KEY = "AIza-genai-js"


@pytest.fixture(scope="module")
def node() -> str:
    """Node and the pinned @google/genai: missing means the suite was not set up (a
    failure, never a skip)."""
    found = shutil.which("node")
    if found is None:
        pytest.fail(f"node is not on PATH.\n{SETUP}", pytrace=False)
    if not PACKAGE.is_file():
        pytest.fail(f"@google/genai is not installed at {PACKAGE.parent}.\n{SETUP}", pytrace=False)
    installed = json.loads(PACKAGE.read_text(encoding="utf-8"))["version"]
    if installed != expected_version("@google/genai"):
        pytest.fail(
            f"@google/genai {installed} is installed, tests/e2e/package.json pins "
            f"{expected_version('@google/genai')}.\n{SETUP}",
            pytrace=False,
        )
    return found


def run_script(node: str, gateway: RunningServer, model: str) -> dict[str, Any]:
    script = node_script(SCRIPT)  # beside the clients under test
    done = subprocess.run(
        [node, str(script), gateway.url, KEY, model],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=script.parent,
        check=False,
    )
    assert done.returncode == 0, f"exit code {done.returncode}\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def text_of(interaction: dict[str, Any]) -> str:
    return "".join(
        content.get("text", "")
        for step in interaction.get("steps") or ()
        if step["type"] == "model_output"
        for content in step.get("content") or ()
    )


def check_protocol(result: dict[str, Any]) -> None:
    """What holds for any model: the routes the JS SDK uses, each reply's shape, the
    stream's grammar, the continuation's link, the 200 of a delete, Google's errors."""
    # The JS SDK's default API version is v1, for the Interactions API too.
    assert {p.split(" ")[1].split("/")[1] for p in result["paths"]} == {"v1"}
    assert "POST /v1/interactions" in result["paths"]
    first, continued, got = result["first"], result["continued"], result["got"]
    assert first["id"].startswith("int_") and first["status"] in ("completed", "incomplete")
    usage = first["usage"]
    assert usage["total_input_tokens"] > 0 and usage["total_output_tokens"] > 0
    assert continued["previous_interaction_id"] == first["id"]
    assert continued["usage"]["total_input_tokens"] > usage["total_input_tokens"]
    assert got["id"] == first["id"] and text_of(got) == text_of(first)
    kinds = [event["event_type"] for event in result["events"]]
    assert kinds[0] == "interaction.created" and kinds[-1] == "interaction.completed"
    assert {"step.start", "step.delta", "step.stop"} <= set(kinds)
    completed = result["events"][-1]["interaction"]
    assert completed["usage"]["total_output_tokens"] > 0
    assert result["missing"]["status"] == 404
    assert result["refused"]["status"] == 400
    assert "google_search" in result["refused"]["message"]


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("genai-js") / "gateway.db"


@pytest.fixture(scope="module")
def scripted_backend() -> ScriptedBackend:
    return ScriptedBackend("scripted", models=("scripted",))


@pytest.fixture(scope="module")
def scripted_gateway(scripted_backend: ScriptedBackend, database: Path) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": scripted_backend},
        server={"api_keys": [KEY]},
        database={"url": str(database)},
    ) as server:
        yield server


def test_interactions_on_a_scripted_backend(
    node: str,
    scripted_gateway: RunningServer,
    scripted_backend: ScriptedBackend,
    database: Path,
) -> None:
    scripted_backend.enqueue(
        Script(text=["Hello", "!"]),
        Script(text=["1, ", "2, ", "3."]),
        Script(text=["Hello again."]),
        Script(text=[], tool_calls=[("get_weather", {"city": "Oslo"})]),
        Script(text=["Sunny in Oslo."]),
    )
    result = run_script(node, scripted_gateway, "scripted")
    check_protocol(result)
    assert text_of(result["first"]) == "Hello!"
    deltas = [
        e["delta"]["text"]
        for e in result["events"]
        if e["event_type"] == "step.delta" and e["delta"]["type"] == "text"
    ]
    assert deltas == ["1, ", "2, ", "3."]
    assert text_of(result["continued"]) == "Hello again."
    assert result["deleted"] in ({}, "undefined")
    called = result["called"]
    assert called["status"] == "requires_action"
    call = next(s for s in called["steps"] if s["type"] == "function_call")
    assert (call["name"], call["arguments"]) == ("get_weather", {"city": "Oslo"})
    assert text_of(result["answered"]) == "Sunny in Oslo."
    messages = scripted_backend.requests[-1].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    # Every call the script made, in the request log as the interactions dialect.
    rows = logged_rows(str(database), len(result["paths"]))
    assert {row.dialect for row in rows} == {"interactions"}
    assert {row.key_name for row in rows} == {rows[0].key_name}
    assert sorted(row.status for row in rows).count(200) == len(result["paths"]) - 2


@pytest.mark.embedded
def test_interactions_on_the_embedded_model(node: str) -> None:
    with running_gateway({"embedded": EmbeddedBackend()}, server={"api_keys": [KEY]}) as gateway:
        result = run_script(node, gateway, "smollm2")
    check_protocol(result)
    assert text_of(result["first"]).strip()
    assert text_of(result["continued"]).strip()
    # A forced choice with one tool: the emulated call's grammar makes it a call.
    called = result["called"]
    assert called["status"] == "requires_action"
    call = next(s for s in called["steps"] if s["type"] == "function_call")
    assert call["name"] == "get_weather" and isinstance(call["arguments"], dict)
    answered = result["answered"]
    assert answered["status"] in ("completed", "incomplete", "requires_action")
    assert answered["steps"] and answered["usage"]["total_output_tokens"] > 0
