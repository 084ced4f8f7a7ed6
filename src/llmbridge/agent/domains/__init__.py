"""Domains: what the agent knows about the world its conversations are about (eldercare)."""
