"""A small MCP server written with the official SDK (``MCPServer``): the upstream the
MCP gateway's tests put behind it, over stdio (run as a program:
``python tests/mcp/servers/toolbox.py``) and over streamable HTTP (``build()``'s
``streamable_http_app()``, on a loopback port).

Its tools: ``echo``, ``add``, ``pid`` (the server's process id: a restart changes it),
``crash`` (the process exits mid-call), ``hang`` (never answers), ``big`` (a result of
``size`` bytes), ``fail`` (the tool's own error: an ``isError`` result) and ``grow``
(adds a tool and says the tool list changed), ``header`` (a request header's value,
over HTTP); ``count`` more tools ``t00``... when
``TOOLBOX_EXTRA_TOOLS`` says how many (pagination). A resource ``toolbox://readme``
and a prompt ``greet``.
"""

from __future__ import annotations

import os
import sys
from typing import Any

import anyio
from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ToolError

README = "the toolbox: tools for the MCP gateway's tests"


def build(name: str = "toolbox", extra_tools: int = 0) -> MCPServer[Any]:
    server: MCPServer[Any] = MCPServer(name)

    @server.tool()
    def echo(text: str) -> str:
        """Say ``text`` back."""
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """The sum of two numbers."""
        return a + b

    @server.tool()
    def pid() -> int:
        """This server's process id."""
        return os.getpid()

    @server.tool()
    def crash() -> str:
        """Exit at once, mid-call."""
        sys.stderr.write("toolbox: crashing on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    @server.tool()
    async def hang() -> str:
        """Never answer."""
        await anyio.sleep_forever()
        return "never"

    @server.tool()
    def big(size: int) -> str:
        """A text of ``size`` bytes."""
        return "x" * size

    @server.tool()
    def fail() -> str:
        """Fail, as a tool does: the result says isError."""
        raise ToolError("the tool failed on purpose")

    @server.tool()
    async def grow(tool: str, ctx: Context[Any, Any]) -> str:
        """Add a tool named ``tool`` and say the tool list changed."""

        def added() -> str:
            return f"I am {tool}"

        server.add_tool(added, name=tool, description=f"added by grow: {tool}")
        await ctx.session.send_tool_list_changed()
        await ctx.notify_tools_changed()
        return f"added {tool}"

    @server.tool()
    def header(name: str, ctx: Context[Any, Any]) -> str:
        """The value of the HTTP request's header ``name`` ("" over stdio)."""
        return (ctx.headers or {}).get(name.lower(), "")

    for number in range(extra_tools):

        def extra(number: int = number) -> int:
            return number

        server.add_tool(extra, name=f"t{number:02d}", description=f"extra tool {number}")

    @server.resource("toolbox://readme")
    def readme() -> str:
        """What this server is."""
        return README

    @server.prompt()
    def greet(who: str) -> str:
        """Greet someone."""
        return f"Hello, {who}!"

    return server


if __name__ == "__main__":
    sys.stderr.write(f"toolbox: serving over stdio (pid {os.getpid()})\n")
    sys.stderr.flush()
    build(extra_tools=int(os.environ.get("TOOLBOX_EXTRA_TOOLS", "0"))).run()
