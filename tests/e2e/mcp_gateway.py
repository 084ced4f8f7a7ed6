"""What the end-to-end tests of the CLIs as MCP clients share (tests/e2e/test_claude_code.py,
test_codex.py, test_gemini_cli.py, the ``..._mcp_...`` tests): a recorded gateway with
keys on (a master key and a database key the CLI uses for both the model API and
``/mcp``) serving server-filesystem (tests/mcp/npm_servers.py) on a temporary
directory as ``files``, a scripted backend whose first reply calls the MCP tool under
the CLI's name for it and whose second is text once it sees the result, and the
checks that the tool ran on the upstream.

The proof that the call reached server-filesystem: the file it reads holds a marker
that only a read of it can put into the tool's result, and the gateway's ledger has
the call's row (``mcp:files/read_text_file``, the key's name).
"""

from __future__ import annotations

import json
import sqlite3
from collections.abc import AsyncGenerator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.messages import ToolCallPart, ToolResultPart
from llmbridge.core.request import ChatRequest
from tests.conftest import RunningServer, create_key
from tests.e2e.cli_harness import UNSCRIPTED, recorded_gateway
from tests.e2e.recording import Exchange, Recorder
from tests.mcp.npm_servers import filesystem_stdio, installed_node
from tests.waiting import scaled, value_until

MASTER = "sk-master-mcp-e2e"
KEY_NAME = "mcp-cli"
SERVER = "files"  # the gateway's name for server-filesystem
TOOL = "read_text_file"
GATEWAY_TOOL = f"{SERVER}__{TOOL}"  # its name on the gateway's /mcp
MARKER = "llmbridge-mcp-e2e-7c1f"  # only a read of the note puts this in a result
NOTE = f"The note says {MARKER}.\n"
FINAL_TEXT = "The note was read through the gateway."


@dataclass
class McpServed:
    """A running gateway with ``files`` on its ``/mcp``, and what the test needs of it."""

    server: RunningServer
    recorder: Recorder
    key: str
    """A database key (``KEY_NAME``): the CLI's key for the model API and for ``/mcp``."""
    database: Path
    note: Path
    """The file the tool is asked to read, in the directory server-filesystem serves."""

    @property
    def mcp_url(self) -> str:
        return self.server.url + "/mcp"

    def bearer(self) -> dict[str, str]:
        """The header that carries the key."""
        return {"Authorization": f"Bearer {self.key}"}

    def exchange_lines(self) -> list[tuple[str, str, int | None, str]]:
        """Every HTTP exchange, for a failure's report: method, path, status, and the
        JSON-RPC method of a ``/mcp`` POST."""
        lines = []
        for exchange in self.recorder.exchanges:
            method = ""
            if exchange.path == "/mcp" and exchange.request.startswith(b"{"):
                method = str(exchange.body().get("method", ""))
            lines.append((exchange.method, exchange.path, exchange.status, method))
        return lines

    def mcp_calls(self) -> list[Exchange]:
        """The CLI's POSTs to ``/mcp``, in order."""
        return self.recorder.calls("/mcp")

    def tool_calls(self) -> list[dict[str, Any]]:
        """The ``tools/call`` requests the CLI sent to ``/mcp``: their ``params``."""
        calls = []
        for exchange in self.mcp_calls():
            message = exchange.body()
            if message.get("method") == "tools/call":
                params = message["params"]
                assert isinstance(params, dict)
                calls.append(params)
        return calls

    def tool_rows(self) -> list[dict[str, Any]]:
        """The key's ledger rows of MCP tool calls (its model requests have rows too),
        once there is one (the ledger writes every second): a bounded poll."""

        def rows() -> list[dict[str, Any]]:
            with sqlite3.connect(self.database) as db:
                db.row_factory = sqlite3.Row
                found = db.execute(
                    "SELECT * FROM usage WHERE key_name = ? AND backend = 'mcp'", (KEY_NAME,)
                ).fetchall()
            return [dict(row) for row in found]

        return value_until(rows, f"a ledger row of an MCP tool call by {KEY_NAME}", step=0.1)


@contextmanager
def mcp_gateway(
    backend: ScriptedBackend, model: str, backend_model: str, tmp_path: Path
) -> Iterator[McpServed]:
    """The recorded gateway (cli_harness.recorded_gateway) over ``backend`` with keys
    on, its SQLite database under ``tmp_path``, and server-filesystem on
    ``tmp_path/shared`` (holding the note) as the MCP server ``files``."""
    shared = tmp_path / "shared"
    shared.mkdir()
    note = shared / "note.md"
    note.write_text(NOTE, encoding="utf-8")
    database = tmp_path / "gateway.db"
    servers = {SERVER: filesystem_stdio(installed_node(), shared)}
    with recorded_gateway(
        backend,
        model,
        backend_model,
        server={"master_key": MASTER},
        agent={"database": str(database)},
        # The gateway's deadlines on the server's start, scaled as tests/mcp/conftest.py does.
        mcp={"servers": servers, "start_wait_s": scaled(60), "connect_timeout_s": scaled(30)},
    ) as (server, recorder):
        key = create_key(server.url, MASTER, KEY_NAME)
        yield McpServed(server, recorder, key, database, note)


class McpToolBackend(ScriptedBackend):
    """Replies by what the request holds (as cli_harness.ToolLoopBackend does, so a
    CLI's extra requests cannot take the scripted turns): a request offering ``tool``
    gets its call with ``arguments``, then ``FINAL_TEXT`` once it carries that call's
    result. With ``search`` (Claude Code's ``ToolSearch``), a request offering the
    search tool but not ``tool`` first gets a search for ``tool``, as a model that
    sees only the deferred tool's name does."""

    def __init__(self, tool: str, arguments: dict[str, Any], search: str | None = None) -> None:
        super().__init__("scripted", default=Script(text=[UNSCRIPTED]))
        self.tool, self.arguments, self.search = tool, arguments, search

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        offered = {tool.name for tool in request.tools}
        called = {call.name for call in calls_in(request)}
        if self.tool in called:
            self.enqueue(Script(text=[FINAL_TEXT]))
        elif self.tool in offered:
            self.enqueue(Script(text=[], tool_calls=[(self.tool, dict(self.arguments))]))
        elif self.search in offered and self.search not in called:
            query = {"query": f"select:{self.tool}", "max_results": 5}
            self.enqueue(Script(text=[], tool_calls=[(self.search, query)]))
        async for event in super().chat(request):
            yield event


def calls_in(request: ChatRequest) -> list[ToolCallPart]:
    return [part for m in request.messages for part in m.parts if isinstance(part, ToolCallPart)]


def result_of(request: ChatRequest, tool: str) -> tuple[ToolCallPart, ToolResultPart]:
    """The call of ``tool`` in ``request``'s conversation and the result answering it."""
    (call,) = [part for part in calls_in(request) if part.name == tool]
    results = [
        part
        for message in request.messages
        if message.role == "tool"
        for part in message.parts
        if isinstance(part, ToolResultPart) and part.tool_call_id == call.id
    ]
    assert len(results) == 1, results
    return call, results[0]


def check_the_tool_ran(
    served: McpServed, requests: Sequence[ChatRequest], client_tool: str, report: str
) -> None:
    """The MCP tool the backend called as ``client_tool`` ran on server-filesystem: the
    CLI called ``files__read_text_file`` on ``/mcp`` with the key, the gateway recorded
    the call, and the backend's request after it carried the note's text."""
    (params,) = served.tool_calls()
    assert params["name"] == GATEWAY_TOOL, report
    assert params["arguments"] == {"path": str(served.note)}, report
    tools_call = next(e for e in served.mcp_calls() if e.body().get("method") == "tools/call")
    assert tools_call.headers["authorization"] == f"Bearer {served.key}", report
    assert tools_call.status == 200, report
    answer = json.dumps(tools_call.sse_events() or json.loads(tools_call.response or b"{}"))
    assert MARKER in answer, f"the tool's answer on /mcp lacks the marker\n{report}"

    (row,) = served.tool_rows()
    assert (row["model"], row["backend"], row["status"]) == (f"mcp:{SERVER}/{TOOL}", "mcp", 200)

    follow_up = next(r for r in requests if client_tool in {c.name for c in calls_in(r)})
    call, result = result_of(follow_up, client_tool)
    assert call.arguments == {"path": str(served.note)}, report
    assert MARKER in result.content and not result.is_error, report
