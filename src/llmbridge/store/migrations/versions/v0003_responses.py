"""Responses: what ``POST /v1/responses`` kept with ``store`` (``store.responses``).

Revision ID: 0003
Revises: 0002
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision: str | None = "0002"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    op.create_table(
        "responses",
        sa.Column("id", sa.String(200), nullable=False),
        sa.Column("owner", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("instructions", sa.Text(), nullable=True),
        sa.Column("input", sa.JSON(), nullable=False),
        sa.Column("output", sa.JSON(), nullable=False),
        sa.Column("usage", sa.JSON(), nullable=True),
        sa.Column("response", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_responses")),
    )


def downgrade() -> None:
    op.drop_table("responses")
