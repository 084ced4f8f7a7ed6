"""Tracing without the ``otlp`` extra: ``telemetry.otlp_endpoint`` is refused with one
line naming the extra, as a configuration error, never a traceback.

The OpenTelemetry SDK and exporter are the optional ``otlp`` extra (pyproject.toml); the
tests' environment has them (``dev``), so a plain install is simulated by putting
``None`` in ``sys.modules`` for every OpenTelemetry module: ``import`` then raises
``ImportError`` and ``importlib.util.find_spec`` finds nothing, as where it is not
installed. With the extra, the same settings load (test_telemetry.py traces with them).
"""

from __future__ import annotations

import importlib
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from llmbridge.cli import cli
from llmbridge.gateway.config import OTLP_EXTRA_MISSING, ConfigError, load_config

MESSAGE = "telemetry.otlp_endpoint needs the OpenTelemetry exporter: pip install 'llmbridge[otlp]'"
OTLP_PACKAGES = ("opentelemetry", "opentelemetry.sdk", "opentelemetry.exporter.otlp.proto.http")


@pytest.fixture
def without_the_otlp_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    loaded = [name for name in sys.modules if name.startswith("opentelemetry.")]
    for name in {*OTLP_PACKAGES, *loaded}:
        monkeypatch.setitem(sys.modules, name, None)


def test_the_message_names_the_setting_and_the_extra() -> None:
    assert OTLP_EXTRA_MISSING == MESSAGE


@pytest.mark.usefixtures("without_the_otlp_extra")
def test_an_endpoint_from_the_environment_is_a_configuration_error() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    with pytest.raises(ConfigError) as refused:
        load_config(None, environ=environ)
    assert str(refused.value) == MESSAGE
    assert load_config(None, environ={}).telemetry.otlp_endpoint is None  # off: nothing needed


@pytest.mark.usefixtures("without_the_otlp_extra")
def test_serve_with_an_endpoint_in_the_file_says_one_line_and_starts_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def started(level: str) -> None:
        raise AssertionError("serve went on past its configuration")

    # What serve does first once its configuration is read: were the endpoint let
    # through, the test fails here instead of serving.
    monkeypatch.setattr("llmbridge.gateway.server.asgi.configure_logging", started)
    config = tmp_path / "llmbridge.yaml"
    config.write_text("telemetry: {otlp_endpoint: 'http://127.0.0.1:4318'}\n")
    result = CliRunner().invoke(cli, ["serve", "--config", str(config), "--port", "0"])
    assert result.output.splitlines() == [f"Error: {MESSAGE}"]
    assert result.exit_code == 1
    assert isinstance(result.exception, SystemExit)  # click's error exit, no traceback


@pytest.mark.usefixtures("without_the_otlp_extra")
def test_the_tracer_module_itself_refuses_with_the_same_line(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A gateway built from a ``GatewayConfig`` made in code (no ``load_config``) meets
    the import guard of gateway/telemetry.py when its lifespan opens the tracer."""
    monkeypatch.delitem(sys.modules, "llmbridge.gateway.telemetry", raising=False)
    with pytest.raises(ConfigError) as refused:
        importlib.import_module("llmbridge.gateway.telemetry")
    assert str(refused.value) == MESSAGE
    assert isinstance(refused.value.__cause__, ImportError)


def test_with_the_extra_installed_the_endpoint_loads() -> None:
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://127.0.0.1:4318"}
    assert load_config(None, environ=environ).telemetry.otlp_endpoint == "http://127.0.0.1:4318"
