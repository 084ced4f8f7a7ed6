"""The usage ledger's client session: ``usage.session_id``, the session a
request named (Claude Code's ``X-Claude-Code-Session-Id``, Codex's ``session-id``,
``x-llmbridge-session-id``, or the body's ``prompt_cache_key`` or Claude Code
``metadata.user_id``), so one session's cost can be summed.

Rows recorded before this revision name no session (NULL). The index is partial
(``WHERE session_id IS NOT NULL``, on SQLite and PostgreSQL alike): it holds only the
rows that name one, so on an existing ledger it is built from a scan that adds
nothing to it, and requests without a session do not write to it.

Revision ID: 0007
Revises: 0006
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision: str | None = "0006"
branch_labels: str | None = None
depends_on: str | None = None

_NAMED = sa.text("session_id IS NOT NULL")


def upgrade() -> None:
    # A nullable ADD COLUMN with no default: a change to the catalogue alone on both
    # databases, whatever the number of rows.
    op.add_column("usage", sa.Column("session_id", sa.String(128), nullable=True))
    op.create_index(
        "ix_usage_session_id",
        "usage",
        ["session_id"],
        sqlite_where=_NAMED,
        postgresql_where=_NAMED,
    )


def downgrade() -> None:
    op.drop_index("ix_usage_session_id", table_name="usage")
    with op.batch_alter_table("usage") as batch:
        batch.drop_column("session_id")
