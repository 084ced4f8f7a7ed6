"""Owners: the API key (a hash of it) that created a persona, session, document or
patient (``store.access``).

Revision ID: 0002
Revises: 0001
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision: str | None = "0001"
branch_labels: str | None = None
depends_on: str | None = None

# Nullable, so adding them is a plain ALTER TABLE ... ADD COLUMN on both databases
# (no table rebuild on SQLite) and every existing row stays shared / unscoped.
_OWNED = ("personas", "sessions", "documents", "patients")


def upgrade() -> None:
    for table in _OWNED:
        op.add_column(table, sa.Column("owner", sa.String(64), nullable=True))
    op.create_index("ix_personas_owner", "personas", ["owner"])
    op.create_index("ix_sessions_owner_created_at", "sessions", ["owner", "created_at"])
    op.create_index("ix_documents_owner", "documents", ["owner"])
    op.create_index("ix_patients_owner", "patients", ["owner"])


def downgrade() -> None:
    op.drop_index("ix_patients_owner", table_name="patients")
    op.drop_index("ix_documents_owner", table_name="documents")
    op.drop_index("ix_sessions_owner_created_at", table_name="sessions")
    op.drop_index("ix_personas_owner", table_name="personas")
    for table in _OWNED:
        # SQLite drops a column by rebuilding the table: batch mode does that.
        with op.batch_alter_table(table) as batch:
            batch.drop_column("owner")
