"""A key's ``mcp_tools`` (accounts/keys.py, migration 0011), made by every way a key
is made: ``llmbridge keys create --mcp-tools`` (comma-separated globs, repeatable),
``POST /admin/keys`` and ``KeyStore.create``, stored alike on SQLite and PostgreSQL,
checked as ``models`` are (an empty glob is refused: it would allow nothing); and
whether its globs reach a server (``GlobSet.may_start_with``: the server's resources,
mcp/permissions.py)."""

from __future__ import annotations

import fnmatch
import itertools

import orjson
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st

from llmbridge.accounts.key_fields import compiled_globs
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


def test_a_glob_reaches_the_servers_whose_names_it_may_match() -> None:
    globs = compiled_globs(("files__read_*", "w?b__echo", "[ab]ox__*", "exact__tool"))
    servers = ("files", "web", "wob", "box", "aox", "cox", "exact", "search")
    assert {server for server in servers if globs.may_start_with(server + "__")} == {
        "files",
        "web",
        "wob",
        "box",
        "aox",
        "exact",
    }
    assert compiled_globs(("*",)).may_start_with("anything__")
    assert compiled_globs(("*__echo",)).may_start_with("files__")
    assert not compiled_globs(("search__*",)).may_start_with("files__")
    assert not compiled_globs(("files",)).may_start_with("files__")  # the server's name alone
    assert compiled_globs(("fi[",)).may_start_with("fi[") and not compiled_globs(
        ("fi[",)
    ).may_start_with("fi_")


_ALPHABET = "ab_"
_GLOB_PIECES = st.sampled_from(["a", "b", "_", "*", "?", "[ab]", "[!a]", "["])
_SUFFIXES = [
    "".join(letters)
    for length in range(5)
    for letters in itertools.product(_ALPHABET + "[", repeat=length)
]


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(_GLOB_PIECES, min_size=1, max_size=4),
    prefix=st.text(alphabet=_ALPHABET + "[", max_size=4),
)
def test_may_start_with_agrees_with_matching_every_short_name(
    pieces: list[str], prefix: str
) -> None:
    # A glob of at most four pieces, when it matches some name beginning with the
    # prefix, matches one whose rest is at most four characters: every one is tried.
    glob = "".join(pieces)
    some_name = any(fnmatch.fnmatchcase(prefix + rest, glob) for rest in _SUFFIXES)
    assert compiled_globs((glob,)).may_start_with(prefix) == some_name
