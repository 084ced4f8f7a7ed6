"""The embedded model's limits as configuration: file, flags and environment."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click
import pytest
from click.testing import CliRunner

from llmbridge.backends.embedded.backend import (
    DEFAULT_FLASH_ATTN,
    THREADS_VARIABLE,
    EmbeddedBackend,
    default_threads,
    physical_cores,
)
from llmbridge.cli.options import config_options, load_from_options
from llmbridge.core.errors import BackendUnavailableError
from llmbridge.gateway.config import ConfigError, load_config
from llmbridge.serving.build import build_backend
from llmbridge.serving.config import EmbeddedBackendConfig


def test_defaults_with_no_configuration() -> None:
    backend = load_config(None).backends["embedded"]
    assert isinstance(backend, EmbeddedBackendConfig)
    assert (backend.max_queue, backend.queue_timeout_s, backend.max_embed_inputs) == (8, 30.0, 256)


def test_the_file_sets_them_and_the_backend_gets_them(tmp_path: Path) -> None:
    path = tmp_path / "llmbridge.yaml"
    path.write_text(
        "backends:\n"
        "  local: {type: embedded, max_queue: 2, queue_timeout_s: 4.5, max_embed_inputs: 9}\n"
    )
    config = load_config(path).backends["local"]
    backend = build_backend("local", config)  # nothing is spawned before start()
    assert isinstance(backend, EmbeddedBackend)
    assert backend.chat_queue.max_waiting == backend.embed_queue.max_waiting == 2
    assert backend.chat_queue.timeout == 4.5
    assert backend.max_embed_inputs == 9
    assert backend.worker_state()["state"] == "not started"


def test_threads_and_flash_attention_reach_the_worker(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(THREADS_VARIABLE, raising=False)  # the parallel suite sets it
    path = tmp_path / "llmbridge.yaml"
    path.write_text("backends:\n  local: {type: embedded, n_threads: 3, flash_attn: true}\n")
    backend = build_backend("local", load_config(path).backends["local"])
    assert isinstance(backend, EmbeddedBackend)
    assert (backend.n_threads, backend.flash_attn) == (3, True)
    assert backend.workers.settings["n_threads"] == 3
    assert backend.workers.settings["flash_attn"] is True
    # Unset: one thread per physical core, and the measured default (docs/DEPLOY.md).
    default = build_backend("local", load_config(None).backends["embedded"])
    assert isinstance(default, EmbeddedBackend)
    assert default.n_threads == physical_cores()
    assert default.flash_attn is DEFAULT_FLASH_ATTN


def test_the_environment_sets_the_threads_the_configuration_leaves_unset(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(THREADS_VARIABLE, "1")
    unset = build_backend("embedded", load_config(None).backends["embedded"])
    assert isinstance(unset, EmbeddedBackend)
    assert unset.n_threads == 1 and unset.workers.settings["n_threads"] == 1
    path = tmp_path / "llmbridge.yaml"
    path.write_text("backends:\n  local: {type: embedded, n_threads: 3}\n")
    configured = build_backend("local", load_config(path).backends["local"])
    assert isinstance(configured, EmbeddedBackend) and configured.n_threads == 3
    assert default_threads("x", {}) == physical_cores()
    assert default_threads("x", {THREADS_VARIABLE: " 4 "}) == 4
    for bad in ("0", "two", "-1", "1.5"):
        with pytest.raises(BackendUnavailableError, match=THREADS_VARIABLE) as caught:
            default_threads("x", {THREADS_VARIABLE: bad})
        assert repr(bad) in str(caught.value)


def test_flags_set_every_embedded_backend_or_the_default_one(tmp_path: Path) -> None:
    flags = {"embedded_max_queue": 0, "embedded_queue_timeout": 2.0, "embedded_max_embed_inputs": 5}
    default = load_config(None, flags).backends["embedded"]
    assert isinstance(default, EmbeddedBackendConfig)
    assert (default.max_queue, default.queue_timeout_s, default.max_embed_inputs) == (0, 2.0, 5)

    path = tmp_path / "two.yaml"
    path.write_text(
        "backends:\n"
        "  a: {type: embedded}\n"
        "  b: {type: embedded, max_queue: 3}\n"
        "  remote: {type: ollama, url: 'http://127.0.0.1:1'}\n"
    )
    backends = load_config(path, {"embedded_max_queue": 1}).backends
    assert [getattr(backends[n], "max_queue", None) for n in ("a", "b", "remote")] == [1, 1, None]

    # A URL shortcut replaces the default backend: the flags add no embedded one.
    shortcut = load_config(None, {"ollama_url": "http://127.0.0.1:1", "embedded_max_queue": 1})
    assert list(shortcut.backends) == ["ollama"]


def test_bad_values_are_configuration_errors(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("backends:\n  local: {type: embedded, queue_timeout_s: 0}\n")
    with pytest.raises(ConfigError, match="queue_timeout_s"):
        load_config(path)


def test_flags_and_environment_variables(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    @click.command()
    @config_options
    def show(config_path: str | None, **shortcuts: Any) -> None:
        backend = load_from_options(config_path, **shortcuts).backends["embedded"]
        assert isinstance(backend, EmbeddedBackendConfig)
        seen.update(backend.model_dump())

    monkeypatch.setenv("LLMBRIDGE_EMBEDDED_QUEUE_TIMEOUT", "7.5")
    monkeypatch.setenv("LLMBRIDGE_EMBEDDED_MAX_EMBED_INPUTS", "12")
    result = CliRunner().invoke(show, ["--embedded-max-queue", "4"])
    assert result.exit_code == 0, result.output
    assert (seen["max_queue"], seen["queue_timeout_s"], seen["max_embed_inputs"]) == (4, 7.5, 12)

    refused = CliRunner().invoke(show, ["--embedded-max-queue", "-1"])
    assert refused.exit_code == 2
    assert "--embedded-max-queue" in refused.output
