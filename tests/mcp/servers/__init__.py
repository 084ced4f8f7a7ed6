"""Upstream MCP servers the MCP gateway's tests put behind it (written with the SDK)."""
