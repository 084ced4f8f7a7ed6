"""MCP tools the gateway runs for any model (a Responses ``mcp`` tool, the Anthropic MCP
connector): the dialect-neutral loop (loop.py) and how a route serves it (serve.py).
docs/MCP.md, "MCP tools for any model"."""
