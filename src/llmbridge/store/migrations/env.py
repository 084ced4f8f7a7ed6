"""Alembic's environment script for the product's database.

It runs only inside ``llmbridge.store.migrate``, which passes an open
connection (already in a transaction) through ``config.attributes``; there is no
``alembic.ini`` and no URL to read.
"""

from __future__ import annotations

from alembic import context

from llmbridge.store.tables import Base

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("migrations run through llmbridge.store.migrate.migrate()")

context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    # SQLite cannot ALTER most things; batch mode rebuilds tables for later migrations.
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
