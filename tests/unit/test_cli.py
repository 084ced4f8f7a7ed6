"""The command line: `llmbridge --help`, `llmbridge models`, `python -m llmbridge`."""

from __future__ import annotations

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
