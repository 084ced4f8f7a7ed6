"""The store's boundary: the one place a database's exceptions become ``core.errors``.

Every transaction of the store (``AgentStore.reading``, ``writing``, ``reader``, and
so every read and write of ``documents`` and ``eldercare`` too) runs inside
``mapped_errors``, so nothing above the store imports SQLAlchemy or a driver, or
classifies a database error itself. What each failure becomes:

- **A refused value** (``store.values`` says which): ``OverflowError`` (sqlite3), a
  ``DataError`` or PostgreSQL's SQLSTATE class 22 "data exception" (U+0000 in text,
  an int64 asyncpg cannot send), or a bind parameter the driver cannot encode:
  ``InvalidRequestError`` (400).
- **A unique or primary-key violation** (an id in use): ``ConflictError`` (409).
- **A foreign-key violation** (the row refers to a session, persona, patient or
  message that does not exist, or was deleted meanwhile): ``NotFoundError`` (404).
- **A database that is down**: SQLAlchemy's ``OperationalError`` (SQLite's "unable
  to open database file", "database is locked" past ``busy_timeout``; PostgreSQL's
  admin shutdown), ``InterfaceError`` (a connection closed under us), and the
  ``OSError`` asyncpg raises when it cannot connect at all (``ConnectionRefusedError``,
  ``TimeoutError``): ``ServiceUnavailableError`` (503), logged here with the details,
  which the client never sees (they may name the server).

Integrity violations are told apart by the code the database gives, never by the
wording of its message: PostgreSQL's SQLSTATE (23505 unique, 23503 foreign key) and
SQLite's extended result code (``sqlite3.Error.sqlite_errorname``, Python 3.11+:
``SQLITE_CONSTRAINT_UNIQUE``, ``_PRIMARYKEY``, ``_FOREIGNKEY``). Anything else (a
``ProgrammingError``, a NOT NULL violation) is a bug in llmbridge and passes through
unchanged, to be logged with its traceback and answered as a 500.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy.exc import (
    DataError,
    DBAPIError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    StatementError,
)

from llmbridge.core.errors import (
    ConflictError,
    InvalidRequestError,
    LLMBridgeError,
    NotFoundError,
    ServiceUnavailableError,
)

__all__ = ["UNAVAILABLE", "mapped_errors"]

log = logging.getLogger("llmbridge.agent.store")

UNAVAILABLE = "the agent database is unavailable"
"""What a client is told when the database is down (the log has the details)."""

_UNIQUE = frozenset({"23505", "SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})
_FOREIGN_KEY = frozenset({"23503", "SQLITE_CONSTRAINT_FOREIGNKEY"})


@contextmanager
def mapped_errors(*, conflict: str | None = None, missing: str | None = None) -> Iterator[None]:
    """Raise a database's failures as ``core.errors`` (module docstring). ``conflict``
    and ``missing`` word a unique and a foreign-key violation for the caller
    (``"persona id 'nurse' is taken"``, ``"no session 'x'"``)."""
    try:
        yield
    except DBAPIError as exc:
        error = _core_error(exc, conflict, missing)
        if error is None:
            raise
        raise error from exc
    except StatementError as exc:
        # A bind parameter the driver could not even send (a str it cannot encode).
        if isinstance(exc.orig, OverflowError | UnicodeError):
            raise InvalidRequestError(f"the database refused a value: {exc.orig}") from exc
        raise
    except OverflowError as exc:  # sqlite3: "Python int too large to convert to SQLite INTEGER"
        raise InvalidRequestError(f"a value is out of the database's range: {exc}") from exc
    except OSError as exc:
        # asyncpg connects outside SQLAlchemy's exception translation: a server that
        # is not there surfaces as the socket's own error (ConnectionRefusedError).
        log.error("%s: %s: %s", UNAVAILABLE, type(exc).__name__, exc)
        raise ServiceUnavailableError(UNAVAILABLE) from exc


def _core_error(
    exc: DBAPIError, conflict: str | None, missing: str | None
) -> LLMBridgeError | None:
    """``exc`` as a core error, or ``None`` for a bug (raised as it is)."""
    # SQLSTATE class 22 is PostgreSQL's "data exception": U+0000 in text (22021), an
    # int64 asyncpg cannot send (22000), a number out of range (22003). First: a
    # refused value is the caller's, whatever class the driver gave it.
    if isinstance(exc, DataError) or _sqlstate(exc).startswith("22"):
        return InvalidRequestError(f"the database refused a value: {_first_line(exc)}")
    if isinstance(exc, IntegrityError):
        code = _integrity_code(exc)
        if code in _UNIQUE:
            return ConflictError(conflict or "the row conflicts with one already stored")
        if code in _FOREIGN_KEY:
            return NotFoundError(missing or "a row it refers to does not exist")
        return None
    if isinstance(exc, OperationalError | InterfaceError) or exc.connection_invalidated:
        log.error("%s: %s", UNAVAILABLE, _first_line(exc))
        return ServiceUnavailableError(UNAVAILABLE)
    return None


def _integrity_code(exc: IntegrityError) -> str:
    """PostgreSQL's SQLSTATE, else SQLite's extended result code name."""
    return _sqlstate(exc) or str(getattr(exc.orig, "sqlite_errorname", None) or "")


def _sqlstate(exc: DBAPIError) -> str:
    return str(getattr(exc.orig, "sqlstate", None) or "")


def _first_line(exc: DBAPIError) -> str:
    text = str(exc.orig) if exc.orig is not None else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__
