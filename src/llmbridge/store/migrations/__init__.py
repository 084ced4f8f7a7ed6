"""Alembic migrations of the product's database, run in process by ``store.migrate``."""
