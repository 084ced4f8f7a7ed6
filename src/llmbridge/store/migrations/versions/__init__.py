"""Migration scripts, one per schema revision, applied in ``down_revision`` order."""
