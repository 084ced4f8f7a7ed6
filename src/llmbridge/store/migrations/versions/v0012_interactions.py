"""Stored interactions beside stored responses: ``responses.api``, the API a row was
stored by (``responses``: ``POST /v1/responses``; ``interactions``: Google's
Interactions API), so each API sees only its own ids (``gateway.stored_responses``).
Rows stored before this revision are Responses'.

Revision ID: 0012
Revises: 0011
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# The revision ids, in this one place (a renumbering changes these two lines only).
revision = "0012"
down_revision: str | None = "0011"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # ADD COLUMN with a server default: both databases fill existing rows without
    # rewriting the table (as migration 0006 does).
    op.add_column(
        "responses",
        sa.Column("api", sa.String(20), server_default="responses", nullable=False),
    )


def downgrade() -> None:
    with op.batch_alter_table("responses") as batch:
        batch.drop_column("api")
