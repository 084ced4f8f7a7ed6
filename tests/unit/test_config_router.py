"""Configuration loading and model routing."""

from __future__ import annotations

from pathlib import Path

import pytest

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.core.errors import ModelNotFoundError
from llmbridge.gateway.config import ConfigError, GatewayConfig, load_config
from llmbridge.serving.router import ModelRouter


def test_no_configuration_serves_everything_from_the_embedded_model() -> None:
    config = load_config(None)
    assert list(config.backends) == ["embedded"]
    assert config.resolved_default_backend() == "embedded"
    assert config.server.port == 11435 and config.server.host == "127.0.0.1"
    assert config.server.max_body_bytes == 32 * 1024 * 1024


def test_url_shortcuts_make_a_default_backend() -> None:
    config = load_config(None, {"ollama_url": "http://127.0.0.1:11434"})
    assert config.resolved_default_backend() == "ollama"
    config = load_config(None, {"openai_url": "http://h:8000/v1", "openai_key": "k"})
    backend = config.backends["openai"]
    assert backend.type == "openai" and backend.api_key == "k"


def test_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "llmbridge.yaml"
    path.write_text(
        "server: {port: 9000, api_keys: [a]}\n"
        "backends:\n"
        "  box: {type: ollama, url: 'http://127.0.0.1:11434'}\n"
        "models:\n"
        "  - {name: fast, backend: box, model: 'qwen3:0.6b', aliases: [quick]}\n"
        "  - {name: 'claude-*', backend: box, model: 'qwen3:8b'}\n"
    )
    config = load_config(path, {"api_keys": ["b"]})
    assert config.server.port == 9000
    assert config.server.api_keys == ("a", "b")
    assert config.resolved_default_backend() == "box"


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("backends: {x: {type: nope}}", "backends.x"),
        ("models: [{name: a, backend: missing}]", "missing"),
        ("server: {port: -1}", "server.port"),
        ("server: {prot: 1}", "server.prot"),
        ("- a list", "mapping"),
        ("server: [unclosed", "YAML"),
    ],
)
def test_invalid_files_say_where(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment.replace(".", r"\.")):
        load_config(path)


def test_missing_file() -> None:
    with pytest.raises(ConfigError, match="cannot read"):
        load_config("/nonexistent/llmbridge.yaml")


def _router(**settings: object) -> ModelRouter:
    config = GatewayConfig.model_validate(
        {"backends": {"a": {"type": "scripted"}, "b": {"type": "scripted"}}} | settings
    )
    return ModelRouter(config, {"a": ScriptedBackend("a"), "b": ScriptedBackend("b")})


def test_exact_alias_glob_then_default() -> None:
    router = _router(
        models=[
            {"name": "fast", "backend": "b", "model": "m1", "aliases": ["quick"]},
            {"name": "claude-*", "backend": "b", "model": "m2"},
            {"name": "gpt-*", "backend": "b"},
        ],
        default_backend="a",
    )
    assert (router.resolve("fast").backend.name, router.resolve("fast").backend_model) == (
        "b",
        "m1",
    )
    assert router.resolve("quick").backend_model == "m1"
    assert router.resolve("claude-sonnet-4-5").backend_model == "m2"
    assert router.resolve("gpt-4o").backend_model == "gpt-4o"
    other = router.resolve("llama3")
    assert (other.backend.name, other.backend_model) == ("a", "llama3")


def test_restricted_names() -> None:
    router = _router(models=[{"name": "fast", "backend": "b"}], restrict_models=True)
    assert router.resolve("fast").backend.name == "b"
    with pytest.raises(ModelNotFoundError):
        router.resolve("other")


async def test_listing_joins_routes_and_default_backend() -> None:
    router = _router(
        models=[{"name": "fast", "backend": "b", "model": "scripted"}], default_backend="a"
    )
    names = {m.name: m.backend for m in await router.list_models()}
    assert names == {"fast": "b", "scripted": "a"}
