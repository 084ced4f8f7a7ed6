"""Memory that compacts and remembers facts: ``long_summaries`` (the rolling
long-range summary of a session: each row folds the previous one and the oldest
ordinary summaries into one, so the whole session stays represented in the budget),
``facts`` (durable facts extracted from a session, optionally shared by every session
about the same patient) and ``memory_cursors`` (how far fact extraction has read each
session).

New tables only: nothing existing is rewritten, on SQLite or PostgreSQL.

Revision ID: 0009
Revises: 0008
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision: str | None = "0008"
branch_labels: str | None = None
depends_on: str | None = None

BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _session_id() -> sa.Column[str]:
    return sa.Column(
        "session_id",
        sa.String(64),
        sa.ForeignKey("sessions.id", ondelete="CASCADE"),
        nullable=False,
    )


def upgrade() -> None:
    op.create_table(
        "long_summaries",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        _session_id(),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("first_message_id", sa.BigInteger(), nullable=False),
        sa.Column("last_message_id", sa.BigInteger(), nullable=False),
        sa.Column("folded", sa.Integer(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.UniqueConstraint("session_id", "last_message_id", name="uq_long_summaries_session_id"),
    )
    op.create_index("ix_long_summaries_session_id_id", "long_summaries", ["session_id", "id"])
    op.create_table(
        "facts",
        sa.Column("id", BigId, primary_key=True, autoincrement=True),
        _session_id(),
        sa.Column(
            "patient_id", BigId, sa.ForeignKey("patients.id", ondelete="SET NULL"), nullable=True
        ),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column(
            "message_id", BigId, sa.ForeignKey("messages.id", ondelete="SET NULL"), nullable=True
        ),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
    )
    op.create_index("ix_facts_session_id_id", "facts", ["session_id", "id"])
    op.create_index("ix_facts_patient_id_id", "facts", ["patient_id", "id"])
    op.create_table(
        "memory_cursors",
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("facts_upto", sa.BigInteger(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("memory_cursors")
    op.drop_index("ix_facts_patient_id_id", table_name="facts")
    op.drop_index("ix_facts_session_id_id", table_name="facts")
    op.drop_table("facts")
    op.drop_index("ix_long_summaries_session_id_id", table_name="long_summaries")
    op.drop_table("long_summaries")
