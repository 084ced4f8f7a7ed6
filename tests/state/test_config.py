"""Where the shared state's Redis comes from: ``state.redis_url`` in the file,
``--redis-url``, or ``LLMBRIDGE_REDIS_URL`` (gateway/config.py, the one reader)."""

from __future__ import annotations

from pathlib import Path

from click.testing import CliRunner

from llmbridge.cli.serve import serve
from llmbridge.gateway.config import load_config

FILE_URL = "redis://10.0.0.1:6379/0"
FLAG_URL = "redis://10.0.0.2:6379/1"
ENV_URL = "redis://10.0.0.3:6379/2"


def test_no_redis_by_default() -> None:
    assert load_config(None, environ={}).state.redis_url is None


def test_file_flag_and_environment(tmp_path: Path) -> None:
    path = tmp_path / "llmbridge.yaml"
    path.write_text(f"state: {{redis_url: '{FILE_URL}'}}\n", encoding="utf-8")
    assert load_config(path, environ={"LLMBRIDGE_REDIS_URL": ENV_URL}).state.redis_url == FILE_URL
    flagged = load_config(path, {"redis_url": FLAG_URL}, environ={})
    assert flagged.state.redis_url == FLAG_URL
    from_env = load_config(None, environ={"LLMBRIDGE_REDIS_URL": f" {ENV_URL} "})
    assert from_env.state.redis_url == ENV_URL


def test_serve_takes_the_flag() -> None:
    result = CliRunner().invoke(serve, ["--help"])
    assert result.exit_code == 0
    assert "--redis-url" in result.output
    assert "LLMBRIDGE_REDIS_URL" in result.output
