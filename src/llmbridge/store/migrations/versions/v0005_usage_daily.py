"""The usage ledger's daily rollups (``usage_daily``): rows past the
ledger's retention, summed per UTC day, key and model, kept after the rows go.

Revision ID: 0005
Revises: 0004
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision: str | None = "0004"
branch_labels: str | None = None
depends_on: str | None = None

# As 0004: SQLite's autoincrementing rowid needs INTEGER PRIMARY KEY.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def upgrade() -> None:
    op.create_table(
        "usage_daily",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("day", sa.String(10), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=True),
        sa.Column("key_name", sa.String(200), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        # Sums of many rows: 64 bits, where usage's per-request counts are 32.
        sa.Column("requests", sa.BigInteger(), nullable=False),
        sa.Column("errors", sa.BigInteger(), nullable=False),
        sa.Column("priced", sa.BigInteger(), nullable=False),
        sa.Column("input_tokens", sa.BigInteger(), nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), nullable=False),
        sa.Column("reasoning_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cached_tokens", sa.BigInteger(), nullable=False),
        sa.Column("cost_usd", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage_daily")),
    )
    op.create_index("ix_usage_daily_day_key_id_model", "usage_daily", ["day", "key_id", "model"])


def downgrade() -> None:
    op.drop_index("ix_usage_daily_day_key_id_model", table_name="usage_daily")
    op.drop_table("usage_daily")
