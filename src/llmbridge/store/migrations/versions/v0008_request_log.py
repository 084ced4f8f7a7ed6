"""The request log: what the operator console's Requests, Overview and
Sessions pages read, on the usage ledger's rows, and the bodies an operator chose to
keep.

New ``usage`` columns, all nullable (rows written before this revision have NULL in
each; a nullable ``ADD COLUMN`` with no default changes the catalogue alone, on both
databases, whatever the number of rows):

- ``dialect``: the API the client spoke (``openai``, ``responses``, ``completions``,
  ``anthropic``, ``gemini``, ``ollama``, ``agent``);
- ``served_model``: the model name the backend was asked for, after aliases, routes and
  fallbacks;
- ``retries``, ``fallbacks``: how many times serving tried the same target again, and
  how many fallback targets it went to, before the first event;
- ``facts``: the ``x-llmbridge-*`` headers of the reply (what the gateway changed), as
  a JSON object;
- ``trace_id`` (OpenTelemetry, 32 hex digits), ``overhead_ms`` (time in the gateway,
  the backend excluded), ``finish_reason``, ``error`` (a failed request's message, cut).

No new index on ``usage``: the log's newest-first pages and the overview's time
ranges read ``ix_usage_created_at`` (each index is a write on every request).

``usage_bodies``: one row per request whose bodies were kept (``ledger.keep_bodies``,
off by default), bounded and redacted before they are written
(accounts/kept_bodies.py), deleted after ``ledger.body_retention_days`` by the
ledger's cleanup (accounts/rollups.py). No foreign key to ``usage``: the two are
written by the same batch, and a body outlives a rolled-up row by its own retention.

Revision ID: 0008
Revises: 0007
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision: str | None = "0007"
branch_labels: str | None = None
depends_on: str | None = None

_COLUMNS = (
    ("dialect", sa.String(20)),
    ("served_model", sa.String(200)),
    ("retries", sa.Integer()),
    ("fallbacks", sa.Integer()),
    ("facts", sa.String(2000)),
    ("trace_id", sa.String(32)),
    ("overhead_ms", sa.Float()),
    ("finish_reason", sa.String(40)),
    ("error", sa.String(500)),
)


def upgrade() -> None:
    for name, kind in _COLUMNS:
        op.add_column("usage", sa.Column(name, kind, nullable=True))
    op.create_table(
        "usage_bodies",
        sa.Column("request_id", sa.String(64), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("request", sa.Text(), nullable=True),
        sa.Column("response", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("request_id", name=op.f("pk_usage_bodies")),
    )
    op.create_index("ix_usage_bodies_created_at", "usage_bodies", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_usage_bodies_created_at", table_name="usage_bodies")
    op.drop_table("usage_bodies")
    with op.batch_alter_table("usage") as batch:
        for name, _ in reversed(_COLUMNS):
            batch.drop_column(name)
