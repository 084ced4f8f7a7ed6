"""The store's boundary: the one place a database's exceptions become ``core.errors``.

Every transaction on the product's database (``Database.reading``, ``writing``,
``reader``, so every read and write of the agent's repository, its documents and
eldercare records, and the stored responses; the key store's and the ledger's own)
runs inside ``mapped_errors``, so nothing above the store imports SQLAlchemy or a
driver, or classifies a database error itself. What each failure becomes:

- **A refused value** (``store.values`` says which): ``OverflowError`` (sqlite3), a
  ``DataError`` or PostgreSQL's SQLSTATE class 22 "data exception" (U+0000 in text,
  an int64 asyncpg cannot send), or a bind parameter the driver cannot encode:
  ``InvalidRequestError`` (400).
- **A unique or primary-key violation** (an id in use): ``ConflictError`` (409).
- **A foreign-key violation** (the row refers to a session, persona, patient or
  message that does not exist, or was deleted meanwhile): ``NotFoundError`` (404).
- **A database that is down, frozen or overwhelmed**: ``ServiceUnavailableError``
  (503), logged here with the details, which the client never sees (they may name
  the server); its message says which of these it was:

  - a deadline passed (``store/engine.py``): the builtin
    ``TimeoutError``, which is ``asyncio.TimeoutError`` and what asyncpg raises past
    ``connect_timeout`` or ``command_timeout`` (outside SQLAlchemy's exception
    translation), and SQLAlchemy's own ``sqlalchemy.exc.TimeoutError``, no pooled
    connection free within ``pool_timeout``;
  - it cannot be reached: the ``OSError`` asyncpg raises when it cannot connect
    (``ConnectionRefusedError``, an unknown host);
  - it refused or dropped us: SQLAlchemy's ``OperationalError`` (SQLite's "unable to
    open database file", "database is locked" past ``busy_timeout``),
    ``InterfaceError`` (a connection closed under us, or still busy with a statement
    that timed out), and PostgreSQL's SQLSTATE classes 08 (connection exception), 53
    (insufficient resources: too many connections) and 57 (operator intervention: a
    statement cancelled, the server shutting down or starting).

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
from sqlalchemy.exc import TimeoutError as PoolTimeoutError

from llmbridge.core.errors import (
    ConflictError,
    InvalidRequestError,
    LLMBridgeError,
    NotFoundError,
    ServiceUnavailableError,
)

__all__ = [
    "POOL_EXHAUSTED",
    "REFUSED",
    "TIMED_OUT",
    "UNAVAILABLE",
    "UNREACHABLE",
    "mapped_errors",
]

log = logging.getLogger("llmbridge.store")

UNAVAILABLE = "the database is unavailable"
"""What a client is told when the database is down, with one of the reasons below
(the log has the details)."""

TIMED_OUT = f"{UNAVAILABLE}: it did not answer in time"
POOL_EXHAUSTED = f"{UNAVAILABLE}: no connection to it was free in time"
UNREACHABLE = f"{UNAVAILABLE}: it cannot be reached"
REFUSED = f"{UNAVAILABLE}: it refused or dropped the connection"

_TIMED_OUT_SQLSTATES = frozenset({"57014", "57P05", "25P03", "25P04"})
"""PostgreSQL's own deadlines: a statement cancelled (``statement_timeout``, a
cancel request), ``idle_session_timeout``, ``idle_in_transaction_session_timeout``,
``transaction_timeout``."""
_UNAVAILABLE_SQLSTATE_CLASSES = ("08", "53", "57")
"""Connection exception, insufficient resources, operator intervention."""

_UNIQUE = frozenset({"23505", "SQLITE_CONSTRAINT_UNIQUE", "SQLITE_CONSTRAINT_PRIMARYKEY"})
_FOREIGN_KEY = frozenset({"23503", "SQLITE_CONSTRAINT_FOREIGNKEY"})


@contextmanager
def mapped_errors(
    *, conflict: str | None = None, missing: str | None = None, log_unavailable: bool = True
) -> Iterator[None]:
    """Raise a database's failures as ``core.errors`` (module docstring). ``conflict``
    and ``missing`` word a unique and a foreign-key violation for the caller
    (``"persona id 'nurse' is taken"``, ``"no session 'x'"``). ``log_unavailable=False``:
    a database that is down is not logged here, the caller says so once per outage
    (store/outages.py), not once per attempt."""
    try:
        yield
    except DBAPIError as exc:
        error = _core_error(exc, conflict, missing, log_unavailable)
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
    except PoolTimeoutError as exc:
        # Every pooled connection is in use past pool_timeout: on a frozen server,
        # each held by a statement waiting out its own deadline.
        raise _unavailable(POOL_EXHAUSTED, exc, log_unavailable) from exc
    except OSError as exc:
        # asyncpg connects, and times statements out, outside SQLAlchemy's exception
        # translation: a server that is not there surfaces as the socket's own error
        # (ConnectionRefusedError), a deadline as the builtin TimeoutError (an OSError,
        # PEP 3151; asyncio.TimeoutError is the same class since Python 3.11).
        raise _unavailable(
            TIMED_OUT if isinstance(exc, TimeoutError) else UNREACHABLE, exc, log_unavailable
        ) from exc


def _unavailable(message: str, exc: BaseException, logged: bool = True) -> ServiceUnavailableError:
    """The 503 of a database that is not answering; the details go to the log only
    (unless the caller logs the outage itself: ``logged=False``)."""
    if logged:
        orig = exc.orig if isinstance(exc, DBAPIError) and exc.orig is not None else exc
        detail = str(orig).splitlines()[0] if str(orig) else "no detail"
        log.error("%s (%s: %s)", message, type(orig).__name__, detail)
    return ServiceUnavailableError(message)


def _core_error(
    exc: DBAPIError, conflict: str | None, missing: str | None, log_unavailable: bool = True
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
    sqlstate = _sqlstate(exc)
    if sqlstate in _TIMED_OUT_SQLSTATES:
        return _unavailable(TIMED_OUT, exc, log_unavailable)
    if (
        isinstance(exc, OperationalError | InterfaceError)
        or exc.connection_invalidated
        or sqlstate[:2] in _UNAVAILABLE_SQLSTATE_CLASSES
    ):
        return _unavailable(REFUSED, exc, log_unavailable)
    return None


def _integrity_code(exc: IntegrityError) -> str:
    """PostgreSQL's SQLSTATE, else SQLite's extended result code name."""
    return _sqlstate(exc) or str(getattr(exc.orig, "sqlite_errorname", None) or "")


def _sqlstate(exc: DBAPIError) -> str:
    return str(getattr(exc.orig, "sqlstate", None) or "")


def _first_line(exc: DBAPIError) -> str:
    text = str(exc.orig) if exc.orig is not None else str(exc)
    return text.splitlines()[0] if text else type(exc).__name__
