"""``POST /api/show`` through the official ``ollama`` client: a tool-calling model on a
backend without templates gets a template that mentions ``.Tools`` (what LiteLLM reads),
and a real Ollama server's reply comes through as it sent it."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import ollama
import pytest

from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.scripted import ScriptedBackend
from tests.conftest import RunningServer, ollama_client, running_gateway
from tests.upstream import FakeUpstream

OLLAMA_TEMPLATE = "{{- range .Messages }}{{ .Content }}{{ end }}{{ if .Tools }}{{ end }}"


SHOW: dict[str, object] = {
    "license": "MIT",
    "modelfile": "FROM /models/blob\n",
    "parameters": 'stop "<|im_end|>"',
    "template": OLLAMA_TEMPLATE,
    "renderer": "qwen3-coder",
    "parser": "qwen3-coder",
    "details": {
        "parent_model": "",
        "format": "gguf",
        "family": "qwen3",
        "families": ["qwen3"],
        "parameter_size": "30.5B",
        "quantization_level": "Q4_K_M",
    },
    "model_info": {
        "general.architecture": "qwen3moe",
        "general.parameter_count": 30532122624,
        "qwen3moe.context_length": 262144,
        "qwen3moe.embedding_length": 2048,
    },
    "capabilities": ["completion", "tools", "insert"],
    "modified_at": "2026-10-01T12:00:00.000000001+02:00",
    "requires": "0.12.0",
}
"""What the Ollama server behind answers ``/api/show`` with for ``qwen3-coder:30b``."""


@pytest.fixture(scope="module")
def gateway(
    scripted: ScriptedBackend, upstream: tuple[FakeUpstream, RunningServer]
) -> Iterator[RunningServer]:
    fake, up = upstream
    fake.show = SHOW
    plain = ScriptedBackend("plain", capabilities=frozenset({"completion"}))
    backends = {"scripted": scripted, "plain": plain, "ollama": OllamaBackend("ollama", up.url)}
    models = [
        {"name": "coder", "backend": "ollama", "model": "qwen3-coder:30b"},
        {"name": "plain", "backend": "plain"},
    ]
    with running_gateway(backends, models=models) as server:
        yield server


@pytest.fixture
def client(gateway: RunningServer) -> ollama.Client:
    return ollama_client(gateway.url)


def test_a_tool_calling_model_without_a_template_gets_one_that_says_tools(
    client: ollama.Client,
) -> None:
    shown = client.show("scripted")
    assert shown.capabilities is not None and "tools" in shown.capabilities
    template = shown.template or ""
    for variable in (".Tools", ".System", ".Prompt", ".Response"):
        assert variable in template
    # The scripted models think: the template's <think> tags say so too, as Ollama's do.
    assert "thinking" in shown.capabilities and "<think>" in template


def test_a_model_without_tools_says_none(client: ollama.Client) -> None:
    shown = client.show("plain")
    assert shown.capabilities == ["completion"]
    assert not shown.template


def test_litellm_reads_the_name_field_and_the_template(gateway: RunningServer) -> None:
    # LiteLLM's ollama_chat provider posts {"name": ...} and looks for "tools".
    reply = httpx.post(f"{gateway.url}/api/show", json={"name": "scripted"})
    assert reply.status_code == 200
    assert "tools" in reply.json()["template"].lower()


def test_a_real_ollama_reply_comes_through_as_sent(client: ollama.Client) -> None:
    shown = client.show("coder")
    assert shown.template == OLLAMA_TEMPLATE
    assert shown.capabilities == ["completion", "tools", "insert"]
    assert shown.parameters == 'stop "<|im_end|>"'
    assert shown.license == "MIT"
    assert shown.details.family == "qwen3" and shown.details.families == ["qwen3"]
    assert shown.details.quantization_level == "Q4_K_M"
    assert shown.modelinfo is not None
    assert shown.modelinfo["general.parameter_count"] == 30532122624
    assert shown.modelinfo["qwen3moe.context_length"] == 262144
    assert shown.modelinfo["qwen3moe.embedding_length"] == 2048
    assert shown.modified_at is not None


def test_fields_the_client_does_not_model_come_through_too(gateway: RunningServer) -> None:
    body = httpx.post(f"{gateway.url}/api/show", json={"model": "coder"}).json()
    assert body["renderer"] == "qwen3-coder" and body["parser"] == "qwen3-coder"
    assert body["requires"] == "0.12.0"
    assert body["modified_at"] == "2026-10-01T10:00:00.000000Z"
