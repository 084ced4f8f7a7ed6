"""The MCP gateway's per-key tool permissions: ``api_keys.mcp_tools``, the globs of
the MCP tool names (``<server>__<tool>``) a key may list and call (accounts/keys.py),
stored as ``models`` is, a JSON list; NULL (every key made before this revision, and a
key made without ``--mcp-tools``) allows every tool.

Revision ID: 0011
Revises: 0010
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

# The revision ids, in this one place (a renumbering changes these two lines only).
revision = "0011"
down_revision: str | None = "0010"
branch_labels: str | None = None
depends_on: str | None = None


def upgrade() -> None:
    # A nullable ADD COLUMN with no default: a change to the catalogue alone on both
    # databases, whatever the number of keys.
    op.add_column("api_keys", sa.Column("mcp_tools", sa.JSON(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("api_keys") as batch:
        batch.drop_column("mcp_tools")
