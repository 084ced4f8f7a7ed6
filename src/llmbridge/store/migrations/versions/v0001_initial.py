"""The initial agent schema: conversation, documents and the eldercare domain.

Revision ID: 0001
Revises:
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision: str | None = None
branch_labels: str | None = None
depends_on: str | None = None

# SQLite's autoincrementing rowid needs INTEGER PRIMARY KEY; PostgreSQL gets 64 bits.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def _id() -> sa.Column[int]:
    return sa.Column("id", BigId, primary_key=True, autoincrement=True)


def upgrade() -> None:
    op.create_table(
        "personas",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("prompt", sa.Text(), nullable=False),
        sa.Column("settings", sa.JSON(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
    )
    op.create_table(
        "patients",
        _id(),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("birth_date", sa.Date(), nullable=True),
        sa.Column("conditions", sa.JSON(), nullable=False),
        sa.Column("allergies", sa.JSON(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
    )
    op.create_table(
        "sessions",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column(
            "persona_id",
            sa.String(64),
            sa.ForeignKey("personas.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column(
            "patient_id",
            BigId,
            sa.ForeignKey("patients.id", ondelete="SET NULL"),
            nullable=True,
        ),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("updated_at", _ts(), nullable=False),
    )
    op.create_index("ix_sessions_created_at", "sessions", ["created_at"])
    op.create_table(
        "messages",
        _id(),
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("role", sa.String(16), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("tool_data", sa.JSON(), nullable=True),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
    )
    op.create_index("ix_messages_session_id_id", "messages", ["session_id", "id"])
    op.create_table(
        "summaries",
        _id(),
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("message_ids", sa.JSON(), nullable=False),
        sa.Column("first_message_id", sa.BigInteger(), nullable=False),
        sa.Column("last_message_id", sa.BigInteger(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(200), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.UniqueConstraint("session_id", "first_message_id", name="uq_summaries_session_id"),
    )
    op.create_index("ix_summaries_session_id_id", "summaries", ["session_id", "id"])
    op.create_table(
        "pins",
        _id(),
        sa.Column(
            "session_id",
            sa.String(64),
            sa.ForeignKey("sessions.id", ondelete="CASCADE"),
            nullable=False,
        ),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column(
            "message_id", BigId, sa.ForeignKey("messages.id", ondelete="SET NULL"), nullable=True
        ),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
    )
    op.create_index("ix_pins_session_id_id", "pins", ["session_id", "id"])

    op.create_table(
        "documents",
        _id(),
        sa.Column("title", sa.String(500), nullable=False),
        sa.Column("source", sa.String(1000), nullable=True),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
    )
    op.create_table(
        "document_chunks",
        _id(),
        sa.Column(
            "document_id", BigId, sa.ForeignKey("documents.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("ordinal", sa.Integer(), nullable=False),
        sa.Column("content", sa.Text(), nullable=False),
        sa.Column("token_count", sa.Integer(), nullable=False),
        sa.Column("term_count", sa.Integer(), nullable=False),
        sa.UniqueConstraint("document_id", "ordinal", name="uq_document_chunks_document_id"),
    )
    op.create_table(
        "document_terms",
        sa.Column("term", sa.String(64), primary_key=True),
        sa.Column(
            "chunk_id",
            BigId,
            sa.ForeignKey("document_chunks.id", ondelete="CASCADE"),
            primary_key=True,
        ),
        sa.Column("tf", sa.Integer(), nullable=False),
    )
    op.create_index("ix_document_terms_chunk_id", "document_terms", ["chunk_id"])

    op.create_table(
        "caregivers",
        _id(),
        sa.Column(
            "patient_id", BigId, sa.ForeignKey("patients.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("relationship", sa.String(100), nullable=False),
        sa.Column("phone", sa.String(50), nullable=True),
        sa.Column("is_primary", sa.Boolean(), nullable=False),
    )
    op.create_index("ix_caregivers_patient_id", "caregivers", ["patient_id"])
    op.create_table(
        "medications",
        _id(),
        sa.Column(
            "patient_id", BigId, sa.ForeignKey("patients.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("dosage", sa.String(100), nullable=False),
        sa.Column("frequency", sa.String(200), nullable=False),
        sa.Column("times", sa.JSON(), nullable=False),
        sa.Column("purpose", sa.String(200), nullable=False),
        sa.Column("side_effects", sa.JSON(), nullable=False),
        sa.Column("prescriber", sa.String(200), nullable=True),
        sa.Column("active", sa.Boolean(), nullable=False),
        sa.Column("start_date", sa.Date(), nullable=True),
        sa.Column("end_date", sa.Date(), nullable=True),
    )
    op.create_index("ix_medications_patient_id", "medications", ["patient_id"])
    op.create_table(
        "vitals",
        _id(),
        sa.Column(
            "patient_id", BigId, sa.ForeignKey("patients.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("kind", sa.String(50), nullable=False),
        sa.Column("value", sa.Float(), nullable=False),
        sa.Column("secondary_value", sa.Float(), nullable=True),
        sa.Column("unit", sa.String(20), nullable=False),
        sa.Column("measured_at", _ts(), nullable=False),
        sa.Column("note", sa.Text(), nullable=False),
    )
    op.create_index("ix_vitals_patient_id_measured_at", "vitals", ["patient_id", "measured_at"])
    op.create_table(
        "appointments",
        _id(),
        sa.Column(
            "patient_id", BigId, sa.ForeignKey("patients.id", ondelete="CASCADE"), nullable=False
        ),
        sa.Column("provider", sa.String(200), nullable=False),
        sa.Column("specialty", sa.String(100), nullable=False),
        sa.Column("location", sa.String(300), nullable=False),
        sa.Column("scheduled_at", _ts(), nullable=False),
        sa.Column("notes", sa.Text(), nullable=False),
        sa.Column("status", sa.String(20), nullable=False),
    )
    op.create_index(
        "ix_appointments_patient_id_scheduled_at", "appointments", ["patient_id", "scheduled_at"]
    )


def downgrade() -> None:
    for table in (
        "appointments",
        "vitals",
        "medications",
        "caregivers",
        "document_terms",
        "document_chunks",
        "documents",
        "pins",
        "summaries",
        "messages",
        "sessions",
        "patients",
        "personas",
    ):
        op.drop_table(table)
