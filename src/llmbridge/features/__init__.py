"""Transformations on the neutral form, each small and testable on its own."""
