"""The ``database:`` section: its URL and the older spellings that map onto it
(``agent.database``, ``--db``, ``LLMBRIDGE_DB``), the error when two of them disagree,
the default file (``llmbridge.db``, or an existing ``agent.db`` from before), and the
deadlines it adds to the URL every part opens. The CLI's spellings go through click
itself, and ``llmbridge keys`` shows which file the key landed in."""

from __future__ import annotations

from pathlib import Path

import click
import pytest
from click.testing import CliRunner

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.cli import cli
from llmbridge.cli.serve import serve
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import ConfigError, GatewayConfig, load_config
from llmbridge.store.engine import resolve_url, split_deadlines


def _file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "llmbridge.yaml"
    path.write_text(text)
    return path


def _cli_url(environ: dict[str, str], *argv: str, config: Path | None = None) -> str | None:
    """``database.url`` as ``llmbridge serve`` loads it: its options parsed by click (the
    flag and its variable from ``environ``), then the one configuration reader."""
    with pytest.MonkeyPatch.context() as patch:
        patch.delenv("LLMBRIDGE_DB", raising=False)
        for name, value in environ.items():
            patch.setenv(name, value)
        context = serve.make_context("serve", list(argv))
    params = dict(context.params)
    params.pop("config_path")
    params.pop("access_log")
    return load_config(config, params, environ=environ).database.url


# -- the older spellings ---------------------------------------------------------------


def test_agent_database_in_the_file_is_database_url(tmp_path: Path) -> None:
    older = _file(tmp_path, "agent: {database: /srv/older.db, model: m}\n")
    config = load_config(older, environ={})
    assert config.database.url == "/srv/older.db"
    assert config.agent.model == "m"  # the rest of the agent section is kept
    assert "database" not in config.agent.model_dump()
    both = _file(
        tmp_path, "database: {url: 'sqlite:////srv/one.db'}\nagent: {database: /srv/one.db}\n"
    )
    assert load_config(both, environ={}).database.url == "sqlite:////srv/one.db"  # one file


def test_database_url_and_agent_database_that_differ_are_a_clear_error(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "database: {url: 'postgresql://u:secret@db/llmbridge'}\nagent: {database: /srv/agent.db}\n",
    )
    with pytest.raises(ConfigError) as caught:
        load_config(path, environ={})
    message = str(caught.value)
    assert "database.url" in message and "agent.database" in message
    assert "different databases" in message and "/srv/agent.db" in message
    assert "secret" not in message  # the password is not repeated in an error
    # The CLI says it in one line, no traceback.
    result = CliRunner().invoke(cli, ["keys", "list", "--config", str(path)])
    assert result.exit_code == 1
    assert "different databases" in result.stderr and "Traceback" not in result.output


def test_db_and_its_variable_set_database_url_over_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "database: {url: /srv/file.db}\nagent: {database: /srv/other.db}\n")
    assert _cli_url({}, "--db", "/srv/flag.db", config=path) == "/srv/flag.db"
    assert _cli_url({"LLMBRIDGE_DB": "/srv/env.db"}, config=path) == "/srv/env.db"
    assert _cli_url({"LLMBRIDGE_DB": "/srv/env.db"}, "--db", "/srv/flag.db") == "/srv/flag.db"
    only = _file(tmp_path, "database: {url: /srv/file.db}\n")
    assert _cli_url({}, config=only) == "/srv/file.db"


def test_the_cli_puts_a_key_in_the_database_the_variable_names(tmp_path: Path) -> None:
    in_file, in_env = tmp_path / "from-file.db", tmp_path / "from-env.db"
    path = _file(tmp_path, f"database: {{url: 'sqlite:///{in_file}'}}\n")
    runner = CliRunner(env={"LLMBRIDGE_DB": str(in_env)})
    made = runner.invoke(cli, ["keys", "create", "env-team", "--config", str(path)])
    assert made.exit_code == 0, made.output
    assert in_env.exists() and not in_file.exists()
    listed = CliRunner(env={"LLMBRIDGE_DB": None}).invoke(
        cli, ["keys", "list", "--config", str(path)]
    )
    assert listed.exit_code == 0, listed.output
    assert "env-team" not in listed.stdout  # the file's database is another one


# -- the default file ------------------------------------------------------------------


def test_the_default_file_is_llmbridge_db_or_an_existing_agent_db(tmp_path: Path) -> None:
    home = tmp_path / "data"
    environ = {"XDG_DATA_HOME": str(home)}
    current, older = home / "llmbridge" / "llmbridge.db", home / "llmbridge" / "agent.db"
    assert load_config(None, environ=environ).database.url == str(current)
    older.parent.mkdir(parents=True)
    older.write_bytes(b"")  # a database made before the section: its data must not vanish
    assert load_config(None, environ=environ).database.url == str(older)
    current.write_bytes(b"")
    assert load_config(None, environ=environ).database.url == str(current)
    # Without XDG_DATA_HOME: under ~/.local/share (either name, by what is there).
    home_default = Path(str(load_config(None, environ={}).database.url))
    assert home_default.parent == Path.home() / ".local" / "share" / "llmbridge"
    assert home_default.name in ("llmbridge.db", "agent.db")


def test_the_gateway_and_the_cli_open_the_same_older_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    home = tmp_path / "data"
    monkeypatch.setenv("XDG_DATA_HOME", str(home))
    monkeypatch.delenv("LLMBRIDGE_DB", raising=False)
    older = home / "llmbridge" / "agent.db"
    runner = CliRunner(env={"XDG_DATA_HOME": str(home)})
    older.parent.mkdir(parents=True)
    older.write_bytes(b"")
    made = runner.invoke(cli, ["keys", "create", "kept"])
    assert made.exit_code == 0, made.output
    assert "kept" in runner.invoke(cli, ["keys", "list"]).stdout
    assert not (home / "llmbridge" / "llmbridge.db").exists()
    # A configuration built without the reader (no url) resolves it the same way.
    config = GatewayConfig.model_validate(
        {"backends": {"s": {"type": "scripted"}}, "default_backend": "s"}
    )
    app = create_app(config, backends={"s": ScriptedBackend("s")})
    assert app.state.gateway.database.url == str(older)


# -- the section's settings ------------------------------------------------------------


def test_the_sections_deadlines_join_the_url_unless_it_names_them(tmp_path: Path) -> None:
    path = _file(
        tmp_path,
        "database:\n"
        "  url: 'postgresql://u:p%40ss@db/llmbridge?command_timeout=3'\n"
        "  connect_timeout: 2\n"
        "  command_timeout: 30\n"
        "  pool_timeout: 4.5\n",
    )
    opened = load_config(path, environ={}).database_url()
    url, deadlines = split_deadlines(resolve_url(opened))
    assert (deadlines.connect_s, deadlines.statement_s, deadlines.pool_s) == (2, 3, 4.5)
    assert url.password == "p@ss" and url.database == "llmbridge"
    local = _file(tmp_path, f"database: {{url: {tmp_path / 'x.db'}, pool_timeout: 1}}\n")
    url, deadlines = split_deadlines(resolve_url(load_config(local, environ={}).database_url()))
    assert (url.database, deadlines.pool_s) == (str(tmp_path / "x.db"), 1)
    # Without deadlines in the section the URL is opened as it was written.
    plain = _file(tmp_path, "database: {url: ./plain.db}\n")
    assert load_config(plain, environ={}).database_url() == "./plain.db"


@pytest.mark.parametrize(
    ("section", "named"),
    [
        ("{url: 'mysql://u@h/d'}", "database.url"),
        ("{url: 'sqlite:////x.db?pool_timeout=soon'}", "database.url"),
        ("{url: /x.db, command_timeout: 0}", "database.command_timeout"),
        ("{url: /x.db, connect_timeout: .inf}", "database.connect_timeout"),
        ("{url: /x.db, pool_size: 5}", "database.pool_size"),
    ],
)
def test_a_bad_database_section_is_refused_naming_the_field(
    tmp_path: Path, section: str, named: str
) -> None:
    path = _file(tmp_path, f"database: {section}\n")
    with pytest.raises(ConfigError, match=named.replace(".", r"\.")):
        load_config(path, environ={})


def test_the_db_flag_is_documented_as_the_database() -> None:
    (option,) = [p for p in serve.params if isinstance(p, click.Option) and p.name == "db"]
    assert option.envvar == "LLMBRIDGE_DB"
    assert option.help is not None and "llmbridge.db" in option.help
