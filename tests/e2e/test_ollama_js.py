"""The official ollama-js client (npm ``ollama``, pinned in tests/e2e/package.json)
against the gateway: ``embeddings()`` (``POST /api/embeddings``, which ollama-js 0.6
still exposes and RAG tools still call) and ``embed()`` (``POST /api/embed``), on a
scripted backend and on the embedded model, run from a small Node script
(``ollama_js_embeddings.mjs``) as an app would run them."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from llmbridge.backends.embedded.backend import EmbeddedBackend
from llmbridge.backends.scripted import ScriptedBackend
from tests.conftest import RunningServer, running_gateway
from tests.e2e.cli_harness import E2E_DIR, SETUP, TIMEOUT
from tests.e2e.clients import NODE_MODULES, expected_version, node_script

SCRIPT = E2E_DIR / "ollama_js_embeddings.mjs"
PACKAGE = NODE_MODULES / "ollama" / "package.json"


@pytest.fixture(scope="module")
def node() -> str:
    """Node and the pinned ollama-js: missing means the suite was not set up (a
    failure, never a skip)."""
    found = shutil.which("node")
    if found is None:
        pytest.fail(f"node is not on PATH.\n{SETUP}", pytrace=False)
    if not PACKAGE.is_file():
        pytest.fail(f"ollama-js is not installed at {PACKAGE.parent}.\n{SETUP}", pytrace=False)
    installed = json.loads(PACKAGE.read_text(encoding="utf-8"))["version"]
    if installed != expected_version("ollama"):
        pytest.fail(
            f"ollama-js {installed} is installed, tests/e2e/package.json pins "
            f"{expected_version('ollama')}.\n{SETUP}",
            pytrace=False,
        )
    return found


def run_script(node: str, gateway: RunningServer, model: str) -> dict[str, Any]:
    script = node_script(SCRIPT)  # beside the clients under test
    done = subprocess.run(
        [node, str(script), gateway.url, model],
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        cwd=script.parent,
        check=False,
    )
    assert done.returncode == 0, f"exit code {done.returncode}\n{done.stdout}\n{done.stderr}"
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def check_replies(result: dict[str, Any]) -> None:
    """What holds for any model: one vector from embeddings(), the same vector as
    embed()'s first, one per input, an empty vector for an empty prompt, and the
    gateway's refusal of a request without a model as ollama-js raises it."""
    single = result["single"]["embedding"]
    batch = result["batch"]["embeddings"]
    assert single and all(isinstance(x, float) for x in single)
    assert len(batch) == 2 and len(batch[0]) == len(single)
    assert single == pytest.approx(batch[0], abs=1e-6)
    assert batch[0] != batch[1]
    assert result["one"]["embeddings"] == [pytest.approx(single, abs=1e-6)]
    assert result["empty"] == {"embedding": []}
    refused = result["refused"]
    assert refused["name"] == "ResponseError" and refused["status"] == 400
    assert refused["error"].startswith("model")


@pytest.fixture(scope="module")
def scripted_gateway() -> Iterator[RunningServer]:
    with running_gateway({"scripted": ScriptedBackend()}) as server:
        yield server


def test_embeddings_and_embed_on_a_scripted_backend(
    node: str, scripted_gateway: RunningServer
) -> None:
    result = run_script(node, scripted_gateway, "scripted")
    check_replies(result)
    assert result["batch"]["model"] == "scripted"


@pytest.mark.embedded
def test_embeddings_and_embed_on_the_embedded_model(node: str) -> None:
    with running_gateway({"embedded": EmbeddedBackend()}) as gateway:
        result = run_script(node, gateway, "smollm2")
    check_replies(result)
    assert result["batch"]["prompt_eval_count"] > 0
