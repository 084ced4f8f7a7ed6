"""Alembic migrations of the agent store, run in process by ``store.migrate``."""
