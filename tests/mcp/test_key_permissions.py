"""A key's ``mcp_tools`` (accounts/keys.py, migration 0011), made by every way a key
is made: ``llmbridge keys create --mcp-tools`` (comma-separated globs, repeatable),
``POST /admin/keys`` and ``KeyStore.create``, stored alike on SQLite and PostgreSQL,
checked as ``models`` are (an empty glob is refused: it would allow nothing)."""

from __future__ import annotations

import orjson
from click.testing import CliRunner

from llmbridge.accounts.keys import KeyStore
from llmbridge.cli import cli


def test_the_cli_takes_comma_separated_globs(db_url: str) -> None:
    runner = CliRunner()
    created = runner.invoke(
        cli,
        [
            "keys",
            "create",
            "reader",
            "--mcp-tools",
            "box__read_*,web__echo",
            "--mcp-tools",
            "files__*",
            "--db",
            db_url,
        ],
    )
    assert created.exit_code == 0, created.output
    assert "mcp_tools box__read_*,web__echo,files__*" in created.stderr
    listed = runner.invoke(cli, ["keys", "list", "--json", "--db", db_url])
    assert listed.exit_code == 0, listed.output
    (view,) = orjson.loads(listed.stdout)
    assert view["mcp_tools"] == ["box__read_*", "web__echo", "files__*"]
    assert view["models"] is None  # every model: the two are apart

    empty = runner.invoke(cli, ["keys", "create", "e", "--mcp-tools", "a__b,,c__d", "--db", db_url])
    assert empty.exit_code != 0
    assert "mcp_tools holds an empty glob" in empty.output


async def test_the_store_keeps_them_and_the_record_matches_them(db_url: str) -> None:
    store = await KeyStore.open(db_url)
    try:
        record, key = await store.create("scoped", mcp_tools=["box__read_*", "web__echo"])
        found = await store.find_by_key(key)
        unscoped, _ = await store.create("open")
    finally:
        await store.close()
    assert found is not None and found.mcp_tools == ("box__read_*", "web__echo")
    assert found.allows_tool("box__read_file") and found.allows_tool("web__echo")
    assert not found.allows_tool("box__write_file") and not found.allows_tool("web__echoes")
    assert record.mcp_tools == found.mcp_tools
    assert unscoped.mcp_tools is None and unscoped.allows_tool("anything__at_all")
