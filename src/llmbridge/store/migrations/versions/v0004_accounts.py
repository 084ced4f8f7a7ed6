"""Accounts: API keys kept in the database (``api_keys``) and the usage ledger
(``usage``); ``llmbridge.accounts`` reads and writes them.

Revision ID: 0004
Revises: 0003
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision: str | None = "0003"
branch_labels: str | None = None
depends_on: str | None = None

# SQLite's autoincrementing rowid needs INTEGER PRIMARY KEY; PostgreSQL gets 64 bits:
# the ledger gains a row per request, so it outgrows 32 bits first.
BigId = sa.BigInteger().with_variant(sa.Integer(), "sqlite")


def _ts() -> sa.DateTime:
    return sa.DateTime(timezone=True)


def upgrade() -> None:
    op.create_table(
        "api_keys",
        sa.Column("id", sa.String(40), nullable=False),
        sa.Column("name", sa.String(200), nullable=False),
        sa.Column("key_hash", sa.String(64), nullable=False),
        sa.Column("identity", sa.String(64), nullable=False),
        sa.Column("prefix", sa.String(16), nullable=True),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("revoked_at", _ts(), nullable=True),
        sa.Column("rpm", sa.Integer(), nullable=True),
        sa.Column("tpm", sa.Integer(), nullable=True),
        sa.Column("max_parallel", sa.Integer(), nullable=True),
        sa.Column("budget_usd", sa.Float(), nullable=True),
        sa.Column("models", sa.JSON(), nullable=True),
        sa.Column("spent_usd", sa.Float(), server_default=sa.text("0"), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_api_keys")),
        sa.UniqueConstraint("name", name=op.f("uq_api_keys_name")),
        sa.UniqueConstraint("key_hash", name=op.f("uq_api_keys_key_hash")),
    )
    op.create_table(
        "usage",
        sa.Column("id", BigId, autoincrement=True, nullable=False),
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", _ts(), nullable=False),
        sa.Column("key_id", sa.String(40), nullable=True),
        sa.Column("key_name", sa.String(200), nullable=True),
        sa.Column("model", sa.String(200), nullable=False),
        sa.Column("backend", sa.String(100), nullable=True),
        sa.Column("deployment", sa.String(200), nullable=True),
        sa.Column("endpoint", sa.String(100), nullable=True),
        sa.Column("status", sa.Integer(), nullable=False),
        sa.Column("input_tokens", sa.Integer(), nullable=True),
        sa.Column("output_tokens", sa.Integer(), nullable=True),
        sa.Column("reasoning_tokens", sa.Integer(), nullable=True),
        sa.Column("cached_tokens", sa.Integer(), nullable=True),
        sa.Column("cost_usd", sa.Float(), nullable=True),
        sa.Column("latency_ms", sa.Float(), nullable=True),
        sa.Column("ttft_ms", sa.Float(), nullable=True),
        sa.Column("streamed", sa.Boolean(), nullable=True),
        sa.Column("replica", sa.String(100), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_usage")),
        # A retried flush inserts the same request again: the second insert is refused.
        sa.UniqueConstraint("request_id", name=op.f("uq_usage_request_id")),
    )
    op.create_index("ix_usage_created_at", "usage", ["created_at"])
    op.create_index("ix_usage_key_id", "usage", ["key_id"])


def downgrade() -> None:
    op.drop_index("ix_usage_key_id", table_name="usage")
    op.drop_index("ix_usage_created_at", table_name="usage")
    op.drop_table("usage")
    op.drop_table("api_keys")
