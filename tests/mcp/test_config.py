"""The ``mcp:`` section (mcp/config.py): which entry is stdio and which HTTP, the
names a server may have, ``${VAR}`` from the environment, and a server whose variable
is not set staying down with a reason while the gateway starts."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest
import yaml

from llmbridge.gateway.config import ConfigError, GatewayConfig, load_config
from llmbridge.mcp.config import HttpServerConfig, McpConfig, StdioServerConfig, expanded
from llmbridge.mcp.upstream import Upstream


def test_an_entry_with_a_command_is_stdio_one_with_a_url_http() -> None:
    config = McpConfig.model_validate(
        {
            "servers": {
                "files": {"command": ["npx", "-y", "server"], "env": {"A": "1"}},
                "search": {"url": "https://mcp.example.com/mcp", "headers": {"X": "y"}},
                "old": {"url": "http://old.example.com/sse", "transport": "sse"},
            }
        }
    )
    files, search, old = config.servers.values()
    assert isinstance(files, StdioServerConfig) and files.command == ("npx", "-y", "server")
    assert isinstance(search, HttpServerConfig) and search.transport == "streamable_http"
    assert isinstance(old, HttpServerConfig) and old.transport == "sse"
    assert config.enabled and not McpConfig().enabled


@pytest.mark.parametrize(
    ("entry", "fault"),
    [
        ({"command": []}, "command"),
        ({"command": [" "]}, "program"),
        ({"url": "ftp://x"}, "http"),
        ({"url": "http://x", "transport": "websocket"}, "transport"),
        ({"url": "http://x", "command": ["x"]}, "url"),  # a command makes it stdio
        ({"command": ["x"], "call_timeout_s": 0}, "call_timeout_s"),
    ],
)
def test_a_bad_entry_is_refused_naming_its_field(
    tmp_path: Path, entry: dict[str, object], fault: str
) -> None:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, {"mcp": {"servers": {"s": entry}}})
    assert fault in str(refused.value)


@pytest.mark.parametrize("name", ["a__b", "-x", "has space", "ü", "x" * 65])
def test_a_server_name_cannot_hold_the_separator(tmp_path: Path, name: str) -> None:
    with pytest.raises(ConfigError) as refused:
        _load(tmp_path, {"mcp": {"servers": {name: {"command": ["x"]}}}})
    assert "never '__'" in str(refused.value)


def _load(tmp_path: Path, raw: dict[str, object]) -> GatewayConfig:
    """The configuration file holding ``raw``, read as ``llmbridge serve`` reads it."""
    path = tmp_path / "llmbridge.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return load_config(path, environ={})


def test_variables_are_read_from_the_environment() -> None:
    values = {"Authorization": "Bearer ${TOKEN}", "Plain": "$NOT ${A}${A}"}
    assert expanded(values, {"TOKEN": "t0k", "A": "a"}, "headers") == {
        "Authorization": "Bearer t0k",
        "Plain": "$NOT aa",
    }
    with pytest.raises(ValueError, match=r"headers.Authorization names \$\{TOKEN\}"):
        expanded(values, {"A": "a"}, "headers")


async def test_a_server_whose_variable_is_not_set_is_down_saying_why() -> None:
    settings = McpConfig.model_validate(
        {
            "servers": {"s": {"command": [sys.executable, "-c", "pass"], "env": {"K": "${K}"}}},
            "restart_backoff_s": 30,
        }
    )
    upstream = Upstream("s", settings.servers["s"], settings, environ={})
    upstream.start()
    try:
        await asyncio.wait_for(upstream.first_attempt(), timeout=60)
        assert upstream.state == "down"
        assert upstream.error is not None and "${K}" in upstream.error
        assert upstream.status()["tools"] == 0
    finally:
        await upstream.stop()
    assert upstream.state == "stopped"
