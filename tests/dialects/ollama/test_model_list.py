"""/api/tags, /api/show and /api/ps, both directions."""

from __future__ import annotations

from contextlib import closing
from typing import Any

import httpx
import ollama
import pytest

from llmbridge.core.errors import BackendProtocolError
from llmbridge.core.model_info import ModelInfo
from llmbridge.dialects.ollama import (
    decode_show,
    decode_tags,
    encode_ps,
    encode_show,
    encode_tags,
)

INFO = ModelInfo(
    name="qwen3:0.6b",
    backend="local",
    backend_model="qwen3:0.6b-q4",
    capabilities=frozenset({"thinking", "completion", "tools"}),
    context_length=40960,
    family="qwen3",
    parameter_size="751.63M",
    quantization_level="Q4_K_M",
    format="gguf",
    size=522653767,
    digest="7df6b6e09427a769808717c0a93cadc4ae99ed4eb8bf5ca557c90846becea435",
    modified_at=1740823200.0,
    template="{{ .Prompt }}",
)

REAL_SHOW: dict[str, Any] = {
    "license": "Apache License",
    "modelfile": "FROM /models/blob\n",
    "parameters": 'stop "<|im_end|>"\ntemperature 0.6',
    "template": "{{- range .Messages }}{{ .Content }}{{ end }}",
    "details": {
        "parent_model": "",
        "format": "gguf",
        "family": "qwen3",
        "families": ["qwen3"],
        "parameter_size": "751.63M",
        "quantization_level": "Q4_K_M",
    },
    "model_info": {
        "general.architecture": "qwen3",
        "general.parameter_count": 751632384,
        "qwen3.context_length": 40960,
        "qwen3.embedding_length": 1024,
    },
    "capabilities": ["completion", "tools", "thinking", "audio"],
    "modified_at": "2025-03-01T10:00:00.5+01:00",
}


def test_encode_tags() -> None:
    assert encode_tags([INFO]) == {
        "models": [
            {
                "name": "qwen3:0.6b",
                "model": "qwen3:0.6b",
                "modified_at": "2025-03-01T10:00:00.000000Z",
                "size": 522653767,
                "digest": INFO.digest,
                "details": {
                    "parent_model": "",
                    "format": "gguf",
                    "family": "qwen3",
                    "families": ["qwen3"],
                    "parameter_size": "751.63M",
                    "quantization_level": "Q4_K_M",
                },
                "capabilities": ["completion", "tools", "thinking"],
            }
        ]
    }


def test_encode_tags_fills_unknowns() -> None:
    (entry,) = encode_tags([ModelInfo(name="bare")])["models"]
    assert entry["size"] == 0
    assert len(entry["digest"]) == 64
    assert entry["digest"] == encode_tags([ModelInfo(name="bare")])["models"][0]["digest"]
    assert entry["modified_at"].endswith("Z")
    assert entry["capabilities"] == ["completion"]
    assert entry["details"]["families"] is None


def test_encode_show() -> None:
    body = encode_show(INFO)
    assert body["capabilities"] == ["completion", "tools", "thinking"]
    assert body["model_info"] == {
        "general.architecture": "qwen3",
        "qwen3.context_length": 40960,
    }
    assert body["template"] == "{{ .Prompt }}"
    assert body["details"]["family"] == "qwen3"
    assert body["modified_at"] == "2025-03-01T10:00:00.000000Z"
    assert body["modelfile"] == "FROM qwen3:0.6b\n"
    assert body["license"] == "" and body["parameters"] == ""


def test_encode_show_without_family_uses_general() -> None:
    body = encode_show(ModelInfo(name="x", context_length=2048))
    assert body["model_info"] == {"general.context_length": 2048}


def test_show_round_trip_of_a_real_reply() -> None:
    info = decode_show("qwen3:0.6b", REAL_SHOW)
    assert info.name == "qwen3:0.6b" and info.backend_model == "qwen3:0.6b"
    assert info.backend == ""
    assert info.capabilities == frozenset({"completion", "tools", "thinking"})
    assert info.context_length == 40960
    assert info.family == "qwen3"
    assert info.template == REAL_SHOW["template"]
    assert info.modified_at == pytest.approx(1740819600.5)
    again = encode_show(info)
    for key in ("license", "modelfile", "parameters", "template", "model_info"):
        assert again[key] == REAL_SHOW[key]
    assert again["details"] == REAL_SHOW["details"]


def test_show_context_length_from_any_key() -> None:
    body = {"model_info": {"llama.context_length": 8192}, "details": {}}
    info = decode_show("m", body)
    assert info.context_length == 8192
    assert info.capabilities == frozenset({"completion"})
    # our own context_length replaces a stale key under another architecture
    override = encode_show(
        ModelInfo(name="m", family="x", context_length=4096, details=info.details)
    )
    assert override["model_info"] == {"general.architecture": "x", "x.context_length": 4096}


def test_tags_round_trip() -> None:
    decoded = decode_tags(encode_tags([INFO]))
    assert decoded == [
        ModelInfo(
            name="qwen3:0.6b",
            backend_model="qwen3:0.6b",
            capabilities=INFO.capabilities,
            family="qwen3",
            parameter_size="751.63M",
            quantization_level="Q4_K_M",
            format="gguf",
            size=522653767,
            digest=INFO.digest,
            modified_at=1740823200.0,
            details={"families": ["qwen3"]},
        )
    ]


def test_decode_tags_of_an_older_server() -> None:
    body = {
        "models": [
            {
                "model": "llama3.2:latest",
                "size": 2019393189,
                "details": {"family": "llama", "context_length": 131072},
                "remote_host": "https://ollama.com",
            }
        ]
    }
    (info,) = decode_tags(body)
    assert info.name == "llama3.2:latest"
    assert info.capabilities == frozenset({"completion"})
    assert info.context_length == 131072
    assert info.details == {"remote_host": "https://ollama.com"}
    assert encode_tags([info])["models"][0]["remote_host"] == "https://ollama.com"


@pytest.mark.parametrize(
    "body", [None, {}, {"models": {}}, {"models": [{"size": 1}]}, {"models": [1]}]
)
def test_decode_tags_malformed(body: object) -> None:
    with pytest.raises(BackendProtocolError):
        decode_tags(body)


def test_decode_show_malformed() -> None:
    with pytest.raises(BackendProtocolError):
        decode_show("m", [])


def test_encode_ps() -> None:
    (entry,) = encode_ps([INFO])["models"]
    assert entry["name"] == entry["model"] == "qwen3:0.6b"
    assert entry["context_length"] == 40960
    assert entry["size_vram"] == 0
    assert entry["expires_at"].endswith("Z")
    assert entry["details"]["quantization_level"] == "Q4_K_M"


def test_official_client_reads_the_listings() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/api/tags":
            return httpx.Response(200, json=encode_tags([INFO]))
        if request.url.path == "/api/ps":
            return httpx.Response(200, json=encode_ps([INFO]))
        return httpx.Response(200, json=encode_show(INFO))

    with closing(ollama.Client("http://ollama.test", transport=httpx.MockTransport(handler))) as c:
        (listed,) = c.list().models
        shown = c.show("qwen3:0.6b")
        (loaded,) = c.ps().models
    assert listed.model == "qwen3:0.6b"
    assert listed.details is not None and listed.details.family == "qwen3"
    assert shown.capabilities == ["completion", "tools", "thinking"]
    assert shown.modelinfo == {"general.architecture": "qwen3", "qwen3.context_length": 40960}
    assert loaded.context_length == 40960


def test_decode_ps_reply() -> None:
    (info,) = decode_tags(encode_ps([INFO]))
    assert info.name == "qwen3:0.6b"
    assert info.context_length == 40960
    assert info.details["expires_at"].endswith("Z")
