"""The command line: `llmbridge --help`, `llmbridge models`, `python -m llmbridge`."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import orjson
from click.testing import CliRunner

from llmbridge.cli import cli


def test_models_lists_the_embedded_default() -> None:
    result = CliRunner().invoke(cli, ["models", "--json"])
    assert result.exit_code == 0, result.output
    listing = orjson.loads(result.output)
    assert [m["name"] for m in listing["models"]] == ["smollm2"]
    assert listing["routes"] == ["any other name -> embedded:smollm2"]


def test_models_table_and_bad_config(tmp_path: Path) -> None:
    result = CliRunner().invoke(cli, ["models"])
    assert result.exit_code == 0 and "smollm2" in result.output
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends: {x: {type: nope}}")
    result = CliRunner().invoke(cli, ["models", "--config", str(bad)])
    assert result.exit_code != 0
    assert "backends.x" in result.output
    assert "Traceback" not in result.output


def test_python_dash_m_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "llmbridge", "serve", "--help"],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    ).stdout
    assert "--ollama-url" in out and "--api-key" in out and "--config" in out


def test_a_backend_that_cannot_be_built_is_one_line_not_a_traceback(tmp_path: Path) -> None:
    config = tmp_path / "llmbridge.yaml"
    config.write_text(f"backends:\n  e: {{type: embedded, model_path: {tmp_path / 'no.gguf'}}}\n")
    cases = [
        (["models", "--config", str(config)], {}, "embedded model file not found"),
        (["models"], {"LLMBRIDGE_EMBEDDED_THREADS": "two"}, "LLMBRIDGE_EMBEDDED_THREADS must be"),
    ]
    for args, environ, said in cases:
        out = subprocess.run(
            [sys.executable, "-m", "llmbridge", *args],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, **environ},
        )
        assert out.returncode == 1, out.stderr
        assert out.stderr.startswith(f"Error: {said}"), out.stderr
        assert "Traceback" not in out.stderr
