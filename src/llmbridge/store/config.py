"""The ``database:`` section of the configuration file: where the product's one
database is, and how long it is waited on.

``gateway.config.GatewayConfig`` holds it as ``database``; its reader
(``gateway.config.load_config``) maps the older spellings onto ``url`` (``--db``,
``LLMBRIDGE_DB``, ``agent.database``) and fills in the default file, since the store
never reads the environment. Every part that opens the database (the gateway's
``OpenOnce``, ``llmbridge keys``, ``usage``, ``agent``) opens ``opened_url(url)``: the
URL with this section's deadlines, so each engine made on it (store/engine.py) waits
the same.

The deadlines are those store/engine.py reads from a URL's query
(``connect_timeout``, ``command_timeout``, ``pool_timeout``; its docstring has each
one's reasoning and default). A parameter the URL names wins over the section's
setting: a URL given by ``--db`` or ``LLMBRIDGE_DB``, which override the file, keeps
its own.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from llmbridge.store.engine import resolve_url, split_deadlines

__all__ = ["DatabaseConfig"]


class DatabaseConfig(BaseModel):
    """The product's database (docs/CONFIGURATION.md, "The database")."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    url: str | None = None
    """A SQLite path, ``sqlite:///FILE`` or ``postgresql://user:pass@host/db``
    (``--db``, ``LLMBRIDGE_DB``; ``agent.database`` is the older spelling);
    ``None``: the default file, ``$XDG_DATA_HOME/llmbridge/llmbridge.db``
    (gateway.config fills it in)."""
    connect_timeout: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds to open a connection (PostgreSQL); ``None``: the URL's, else 5. Each
    deadline is a positive, finite number (store/engine.py says why)."""
    command_timeout: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds for one statement (PostgreSQL), or to wait for SQLite's write lock;
    ``None``: the URL's, else 10."""
    pool_timeout: float | None = Field(None, gt=0, allow_inf_nan=False)
    """Seconds to wait for a free pooled connection; ``None``: the URL's, else 10."""

    @field_validator("url")
    @classmethod
    def _openable(cls, value: str | None) -> str | None:
        """Refuse, when the file is read, a URL no engine could be made on (an
        unsupported database, a deadline parameter that is not a number of seconds)."""
        value = (value or "").strip()
        if not value:
            return None  # unset: the default file, as when it is left out
        split_deadlines(resolve_url(value))  # each raises a ValueError naming the problem
        return value

    def opened_url(self, url: str) -> str:
        """``url`` (this section's, or the default file) with the deadlines this
        section sets and the URL does not name (module docstring); ``url`` as it is
        when there are none to add, so a path stays a path."""
        settings = {
            name: value
            for name in ("connect_timeout", "command_timeout", "pool_timeout")
            if (value := getattr(self, name)) is not None
        }
        if not settings:
            return url
        parsed = resolve_url(url)  # a path becomes sqlite+aiosqlite:///its/absolute/path
        missing = {name: str(value) for name, value in settings.items() if name not in parsed.query}
        return parsed.update_query_dict(missing).render_as_string(hide_password=False)
