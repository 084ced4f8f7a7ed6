"""The ``opencode`` backend: the spawned server's configuration, and the settings and
flags that create the backend."""

from __future__ import annotations

import base64
from pathlib import Path

import pytest
from click.testing import CliRunner
from pydantic import ValidationError

from llmbridge.backends.opencode import (
    OpenCodeBackend,
    OpenCodeProvider,
    OpenCodeTimeouts,
    SpawnSettings,
)
from llmbridge.backends.opencode.prompt import (
    ModelRef,
)
from llmbridge.backends.opencode.server import AGENT_NAME, basic_auth, server_config
from llmbridge.cli import cli
from llmbridge.gateway.config import ConfigError, ServerConfig, load_config
from llmbridge.serving.build import build_backend
from llmbridge.serving.config import OpenCodeBackendConfig

MODEL = ModelRef("p", "m")


# -- the spawned server's configuration ------------------------------------------------


def test_server_config_makes_opencode_a_plain_llm() -> None:
    config = server_config(SpawnSettings())
    assert config["agent"] == {
        AGENT_NAME: {
            "mode": "primary",
            "prompt": config["agent"][AGENT_NAME]["prompt"],
            "tools": {"*": False},
            "permission": "deny",
        }
    }
    assert config["permission"] == "deny"
    assert config["autoupdate"] is False
    assert config["share"] == "disabled"
    assert config["plugin"] == [] and config["instructions"] == []
    assert "model" not in config and "provider" not in config


def test_server_config_providers_and_default_model() -> None:
    settings = SpawnSettings(
        default_model="local/big",
        providers={
            "local": OpenCodeProvider(
                base_url="http://127.0.0.1:9999/v1",
                models={"big": {"context": 32768, "output": 4096}, "small": {}},
                api_key="k",
                name="Local",
            ),
            "other": OpenCodeProvider(base_url="http://127.0.0.1:9998/v1"),
        },
    )
    config = server_config(settings)
    assert config["model"] == config["small_model"] == "local/big"
    assert config["provider"] == {
        "local": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "Local",
            "options": {"baseURL": "http://127.0.0.1:9999/v1", "apiKey": "k"},
            "models": {"big": {"limit": {"context": 32768, "output": 4096}}, "small": {}},
        },
        "other": {
            "npm": "@ai-sdk/openai-compatible",
            "name": "other",
            "options": {"baseURL": "http://127.0.0.1:9998/v1", "apiKey": "none"},
            "models": {},
        },
    }


def test_extra_config_is_deep_merged() -> None:
    extra = {
        "provider": {"mine": {"npm": "@ai-sdk/openai-compatible", "options": {"baseURL": "u"}}},
        "agent": {AGENT_NAME: {"prompt": "Custom."}},
        "autoupdate": True,
        "username": "me",
    }
    settings = SpawnSettings(
        providers={"local": OpenCodeProvider(base_url="http://127.0.0.1:9999/v1")},
        extra_config=extra,
    )
    config = server_config(settings)
    assert set(config["provider"]) == {"local", "mine"}
    agent = config["agent"][AGENT_NAME]
    assert agent["prompt"] == "Custom."
    assert agent["tools"] == {"*": False} and agent["permission"] == "deny"
    assert config["autoupdate"] is True and config["username"] == "me"
    assert config["permission"] == "deny"
    assert extra["agent"] == {AGENT_NAME: {"prompt": "Custom."}}  # the input is untouched


def test_basic_auth() -> None:
    header = basic_auth("s3cret")["authorization"]
    scheme, token = header.split(" ")
    assert scheme == "Basic"
    assert base64.b64decode(token).decode() == "opencode:s3cret"
    assert base64.b64decode(basic_auth("pw", "me")["authorization"][6:]) == b"me:pw"
    assert basic_auth(None) == {} and basic_auth("") == {}


# -- settings, flags and construction ---------------------------------------------------


@pytest.mark.parametrize("model", ["nomodel", "p/", "/m"])
def test_opencode_config_rejects_a_model_without_provider_and_slash(model: str) -> None:
    with pytest.raises(ValidationError, match="PROVIDER/MODEL"):
        OpenCodeBackendConfig(type="opencode", model=model)


def test_opencode_config_defaults() -> None:
    config = OpenCodeBackendConfig(type="opencode", model="p/m")
    assert config.url is None and config.command == "opencode" and config.pool_size == 2


def test_deadline_settings_reach_the_backend() -> None:
    config = OpenCodeBackendConfig.model_validate(
        {"type": "opencode", "url": "http://127.0.0.1:4096", "model": "p/m"}
    )
    backend = build_backend("oc", config, ServerConfig().serving_host())
    assert isinstance(backend, OpenCodeBackend)
    # Seed 000's 20 / 30 / 5 s; the 30 s is the idle deadline, and no total by default.
    assert backend.timeouts == OpenCodeTimeouts(prompt=20, idle=30, total=None, delete=5)
    config = OpenCodeBackendConfig.model_validate(
        {
            "type": "opencode",
            "url": "http://127.0.0.1:4096",
            "idle_timeout": 45,
            "total_timeout": 600,
        }
    )
    backend = build_backend("oc", config, ServerConfig().serving_host())
    assert isinstance(backend, OpenCodeBackend)
    assert (backend.timeouts.idle, backend.timeouts.total) == (45, 600)


def test_completion_timeout_is_read_as_the_idle_deadline() -> None:
    """Its old name: configuration files written before the idle deadline still load."""
    config = OpenCodeBackendConfig.model_validate(
        {"type": "opencode", "model": "p/m", "completion_timeout": 90}
    )
    assert config.idle_timeout == 90 and config.total_timeout is None


@pytest.mark.parametrize("field", ["idle_timeout", "total_timeout"])
def test_deadlines_must_be_positive(field: str) -> None:
    with pytest.raises(ValidationError, match=field):
        OpenCodeBackendConfig.model_validate({"type": "opencode", "model": "p/m", field: 0})


def test_opencode_url_flag_makes_it_the_default_backend() -> None:
    config = load_config(None, {"opencode_url": "http://127.0.0.1:4096"})
    assert config.default_backend == "opencode"
    backend = config.backends["opencode"]
    assert isinstance(backend, OpenCodeBackendConfig)
    assert backend.url == "http://127.0.0.1:4096" and backend.model is None


def test_opencode_flag_spawns_one_with_the_model() -> None:
    config = load_config(None, {"opencode": True, "opencode_model": "p/m"})
    assert config.default_backend == "opencode"
    backend = config.backends["opencode"]
    assert isinstance(backend, OpenCodeBackendConfig)
    assert backend.url is None and backend.model == "p/m"


def test_opencode_model_alone_needs_an_opencode_backend(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--opencode-model needs an OpenCode backend"):
        load_config(None, {"opencode_model": "p/m"})
    other = tmp_path / "ollama.yaml"
    other.write_text("backends: {o: {type: ollama, url: 'http://127.0.0.1:11434'}}\n")
    with pytest.raises(ConfigError, match="--opencode-model needs an OpenCode backend"):
        load_config(other, {"opencode_model": "p/m"})


def test_opencode_model_sets_the_model_of_a_configured_opencode_backend(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text(
        "backends:\n"
        "  oc: {type: opencode, url: 'http://127.0.0.1:4096', model: old/model}\n"
        "  o: {type: ollama, url: 'http://127.0.0.1:11434'}\n"
    )
    config = load_config(path, {"opencode_model": "p/m"})
    backend = config.backends["oc"]
    assert isinstance(backend, OpenCodeBackendConfig) and backend.model == "p/m"


def test_a_bad_opencode_model_flag_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="PROVIDER/MODEL"):
        load_config(None, {"opencode": True, "opencode_model": "nomodel"})


def test_a_self_provider_points_at_the_gateway_with_its_first_key() -> None:
    config = OpenCodeBackendConfig.model_validate(
        {
            "type": "opencode",
            "model": "gw/scripted",
            "pool_size": 0,
            "providers": {
                "gw": {"url": "self", "models": {"scripted": {"context": 4096}}},
                "own": {"url": "self", "api_key": "explicit"},
                "far": {"url": "http://10.0.0.1:8000/v1", "api_key": "far-key"},
            },
        }
    )
    server = ServerConfig(host="0.0.0.0", port=12345, api_keys=("first", "second"))
    backend = build_backend("oc", config, server.serving_host())
    assert isinstance(backend, OpenCodeBackend)
    spawn = backend.server.spawn
    assert spawn is not None and backend.server.spawned and backend.server.url is None
    assert spawn.default_model == "gw/scripted"
    assert spawn.providers["gw"] == OpenCodeProvider(
        base_url="http://127.0.0.1:12345/v1",
        models={"scripted": {"context": 4096}},
        api_key="first",
        local=True,  # the gateway itself, whatever address it is bound to
    )
    assert spawn.providers["own"].api_key == "explicit"
    assert spawn.providers["own"].base_url == "http://127.0.0.1:12345/v1"
    assert spawn.providers["far"] == OpenCodeProvider(
        base_url="http://10.0.0.1:8000/v1", api_key="far-key"
    )
    assert backend.pool.size == 0 and backend.capabilities.tools is False


def test_a_self_provider_without_gateway_keys_has_none() -> None:
    config = OpenCodeBackendConfig.model_validate(
        {"type": "opencode", "providers": {"gw": {"url": "self"}}}
    )
    backend = build_backend("oc", config, ServerConfig(host="127.0.0.2", port=8080).serving_host())
    assert isinstance(backend, OpenCodeBackend) and backend.server.spawn is not None
    provider = backend.server.spawn.providers["gw"]
    assert provider.base_url == "http://127.0.0.2:8080/v1" and provider.api_key is None


def test_a_url_backend_takes_its_password_from_the_environment() -> None:
    # The reader (gateway.config.load_config) is the one place the environment is read.
    environ = {"OPENCODE_SERVER_PASSWORD": "from-env"}
    loaded = load_config(None, {"opencode_url": "http://127.0.0.1:4096/"}, environ)
    config = loaded.backends["opencode"]
    assert isinstance(config, OpenCodeBackendConfig) and config.password == "from-env"
    backend = build_backend("oc", config)
    assert isinstance(backend, OpenCodeBackend)
    assert not backend.server.spawned and backend.server.url == "http://127.0.0.1:4096"
    assert backend.server.headers == basic_auth("from-env")
    configured = OpenCodeBackendConfig(type="opencode", url="http://h:1", password="mine")
    chosen = build_backend("oc", configured)
    assert isinstance(chosen, OpenCodeBackend) and chosen.server.headers == basic_auth("mine")


@pytest.mark.parametrize("command", ["models", "serve"])
def test_cli_help_lists_the_opencode_flags(command: str) -> None:
    result = CliRunner().invoke(cli, [command, "--help"])
    assert result.exit_code == 0, result.output
    for flag in ("--opencode-url", "--opencode", "--opencode-model"):
        assert f"{flag} " in result.output or f"{flag}\n" in result.output, flag
