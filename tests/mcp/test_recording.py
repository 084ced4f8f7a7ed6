"""What a tool call leaves behind beyond its ledger row (tests/mcp/test_gateway.py):
its ``execute_tool`` span (the GenAI and MCP conventions' attributes) received by a
real OTLP receiver, the row naming the span's trace, and its arguments and result
kept as the request log's bodies when ``ledger.keep_bodies`` is on; a refused call
too."""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp.shared.exceptions import MCPError

from tests.conftest import RunningServer, create_key, ledger_rows
from tests.mcp.conftest import MASTER, mcp_client, mcp_gateway
from tests.otlp_receiver import ERROR, SERVER, OtlpReceiver, ReceivedSpan


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("mcp-recording") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(database: Path, toolbox_url: str, receiver: OtlpReceiver) -> Iterator[RunningServer]:
    saved = os.environ.get("OTEL_BSP_SCHEDULE_DELAY")
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "50"  # the SDK's batch processor: send soon
    try:
        with mcp_gateway(
            database,
            {"web": {"url": toolbox_url}},
            gateway_config={
                "telemetry": {"otlp_endpoint": receiver.url},
                "ledger": {"keep_bodies": True},
            },
        ) as server:
            yield server
    finally:
        if saved is None:
            os.environ.pop("OTEL_BSP_SCHEDULE_DELAY", None)
        else:
            os.environ["OTEL_BSP_SCHEDULE_DELAY"] = saved


def _span_of(receiver: OtlpReceiver, request_id: str) -> ReceivedSpan:
    spans = receiver.wait_for(
        lambda spans: any(s.attributes.get("llmbridge.request_id") == request_id for s in spans),
        f"the span of {request_id}",
    )
    return next(s for s in spans if s.attributes.get("llmbridge.request_id") == request_id)


async def test_a_call_is_a_span_and_a_row_with_its_bodies(
    gateway: RunningServer, database: Path, receiver: OtlpReceiver
) -> None:
    key = create_key(gateway.url, MASTER, "traced", mcp_tools=["web__echo"])
    async with mcp_client(gateway.url + "/mcp", key, mode="legacy") as client:
        await client.call_tool("web__echo", {"text": "kept"})
        with pytest.raises(MCPError):
            await client.call_tool("web__add", {"a": 1, "b": 2})
    called, refused = ledger_rows(database, "traced", 2)

    span = _span_of(receiver, called["request_id"])
    assert span.name == "execute_tool echo" and span.kind == SERVER
    attributes = span.attributes
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "echo"
    assert attributes["gen_ai.tool.type"] == "extension"
    assert attributes["mcp.method.name"] == "tools/call"
    assert attributes["mcp.protocol.version"] == "2025-11-25"
    assert attributes["mcp.session.id"]  # a handshake client's session
    assert attributes["gen_ai.tool.call.id"] == attributes["jsonrpc.request.id"]
    assert attributes["llmbridge.key.name"] == "traced"
    assert attributes["http.response.status_code"] == 200
    assert called["trace_id"] == span.trace_id
    assert called["session_id"] == attributes["mcp.session.id"]

    denied = _span_of(receiver, refused["request_id"])
    assert denied.name == "execute_tool add" and denied.status == ERROR
    assert denied.attributes["error.type"] == "PermissionDeniedError"
    assert refused["status"] == 403 and "mcp_tools" in refused["error"]

    with sqlite3.connect(database) as db:
        (request_body, reply_body) = db.execute(
            "SELECT request, response FROM usage_bodies WHERE request_id = ?",
            (called["request_id"],),
        ).fetchone()
    assert '"arguments":{"text":"kept"}' in request_body.replace(" ", "")
    assert "kept" in reply_body
