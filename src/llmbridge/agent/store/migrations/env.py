"""Alembic's environment script for the agent store.

It runs only inside ``llmbridge.agent.store.migrate``, which passes an open
connection (already in a transaction) through ``config.attributes``; there is no
``alembic.ini`` and no URL to read.
"""

from __future__ import annotations

from alembic import context

from llmbridge.agent.store.models import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("agent migrations run through llmbridge.agent.store.migrate.migrate()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things; batch mode rebuilds tables for later migrations.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
