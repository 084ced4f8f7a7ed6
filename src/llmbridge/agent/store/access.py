"""Who may see and change what: the ``owner`` of agent rows.

With the gateway's API keys on, every row an HTTP caller creates records its
``owner``: a hash of the key (``web.auth.key_identity``), never the key. The
rules, applied by every owner-aware read and write of the store:

- ``owner=None`` means *unscoped*: auth is off, or the caller is the CLI talking to
  the database directly. Everything is visible and writable, and rows it creates
  have no owner.
- **Sessions are private.** A key sees only the sessions it created; any other
  session (another key's, or one created without a key) does not exist for it: the
  store raises ``core.errors.NotFoundError`` (404, not 403), so a session's
  existence never leaks.
- **Personas, documents and patients** (with a patient's caregivers, medications,
  vitals and appointments) are the key's own, or *shared*: created without a key
  (auth off, the CLI). A key sees its own and the shared ones, and can use them, but
  can change or delete only its own: writing a shared row raises
  ``core.errors.PermissionDeniedError`` (403).
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import ColumnElement, or_, true

from llmbridge.core.errors import PermissionDeniedError

__all__ = [
    "check_writable",
    "private_to",
    "sees",
    "visible_to",
]


def visible_to(column: Any, owner: str | None) -> ColumnElement[bool]:
    """The filter for rows ``owner`` may see among the shareable kinds: its own and
    the shared ones (everything when ``owner`` is ``None``)."""
    if owner is None:
        return true()
    condition: ColumnElement[bool] = or_(column == owner, column.is_(None))
    return condition


def private_to(column: Any, owner: str | None) -> ColumnElement[bool]:
    """The filter for private rows (sessions): ``owner``'s own only (everything when
    ``owner`` is ``None``)."""
    if owner is None:
        return true()
    condition: ColumnElement[bool] = column == owner
    return condition


def sees(row_owner: str | None, owner: str | None, *, shared: bool) -> bool:
    """Whether ``owner`` may see a row owned by ``row_owner``: ``shared`` for the
    shareable kinds (personas, documents, patients), not for sessions."""
    return owner is None or row_owner == owner or (shared and row_owner is None)


def check_writable(row_owner: str | None, owner: str | None, what: str) -> None:
    """Raise ``PermissionDeniedError`` when ``owner`` may see the row but not change
    it (a shared row written by a key). Call only for rows visible to ``owner``."""
    if owner is not None and row_owner != owner:
        raise PermissionDeniedError(
            f"{what} is shared (created without an API key) and can only be changed "
            "with auth off or through the CLI"
        )
