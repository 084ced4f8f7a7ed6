"""The MCP gateway: a team's MCP servers behind the gateway's own keys (docs/MCP.md).

``config`` (the ``mcp:`` section), ``transports`` and ``upstream`` (one supervised
client session per configured server: stdio spawned and restarted, HTTP with its
headers, a breaker each), ``catalog`` (their tools, resources and prompts, merged and
named ``<server>__<name>``), ``permissions`` (a key's ``mcp_tools``), ``gate`` (what
the gateway fills to admit and record each tool call), ``listeners`` (list-changed
notifications to clients) and ``endpoints`` (the SDK's low-level server and
streamable HTTP session manager behind ``/mcp`` and ``/mcp/<server>``). Built on the
official ``mcp`` SDK: no protocol is written here.
"""
