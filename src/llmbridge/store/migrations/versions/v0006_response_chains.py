"""Stored responses: each row's ``previous_response_id`` chain totals, so a
continuation beyond ``server.limits.max_chain_bytes`` or ``max_chain_turns`` is refused
from three integers, without loading the conversation (``store.responses``).

Rows stored before this revision count as a chain of one that holds nothing: their
chains are measured from the next turn on.

Revision ID: 0006
Revises: 0005
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision: str | None = "0005"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # Plain ADD COLUMN with a server default: both databases fill existing rows without
    # rewriting the table (SQLite stores the default in the schema, PostgreSQL 11+ too).
    op.add_column(
        "responses", sa.Column("chain_turns", sa.Integer(), server_default="1", nullable=False)
    )
    for column in ("conversation_bytes", "chain_bytes"):
        op.add_column(
            "responses", sa.Column(column, sa.BigInteger(), server_default="0", nullable=False)
        )


def downgrade() -> None:
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("chain_bytes")
        batch.drop_column("conversation_bytes")
        batch.drop_column("chain_turns")
