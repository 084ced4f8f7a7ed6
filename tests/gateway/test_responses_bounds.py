"""Bounds on what a Responses client sends and llmbridge names back, through
the official ``openai`` client against the gateway over a scripted backend:

- namespace tools whose flattened names meet (two namespaces, or a namespace and a
  plain function, or a custom and a function tool of one name) are a 400 naming the
  tool: their calls came back under the wrong tool;
- ``x-llmbridge-ignored-tools`` lists at most 1 KiB of hosted tool types and counts the
  rest (a megabyte of them broke the SDK reading the reply);
- response ids, item ids and call ids longer than any real one are a 400 naming the
  field, before they are looked up or echoed.
"""

from __future__ import annotations

from typing import Any

import httpx
import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.dialects.responses.types import MAX_ITEM_ID_CHARS
from tests.conftest import RunningServer, openai_client


def function(name: str) -> dict[str, Any]:
    return {"type": "function", "name": name, "parameters": {"type": "object"}}


def namespace(name: str, *tools: str) -> dict[str, Any]:
    return {"type": "namespace", "name": name, "tools": [function(t) for t in tools]}


@pytest.fixture
def client(gateway: RunningServer) -> openai.OpenAI:
    return openai_client(gateway.url, "x")


@pytest.mark.parametrize(
    ("tools", "param", "flat"),
    [
        # a + b__c and a__b + c both flatten to a__b__c
        ([namespace("a", "b__c"), namespace("a__b", "c")], "tools.1.tools.0.name", "a__b__c"),
        # a namespace tool and a plain function of the flat name, in either order
        ([namespace("mcp", "read"), function("mcp__read")], "tools.1.name", "mcp__read"),
        ([function("mcp__read"), namespace("mcp", "read")], "tools.1.tools.0.name", "mcp__read"),
        # a custom tool's call goes back as custom_tool_call, a function's as function_call
        (
            [function("edit"), {"type": "custom", "name": "edit"}],
            "tools.1.name",
            "edit",
        ),
    ],
)
def test_tools_whose_flat_names_meet_are_a_400_naming_the_tool(
    client: openai.OpenAI,
    scripted: ScriptedBackend,
    tools: list[dict[str, Any]],
    param: str,
    flat: str,
) -> None:
    asked = len(scripted.requests)
    for stream in (False, True):
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(model="scripted", input="go", tools=tools, stream=stream)  # type: ignore[arg-type]
        assert refused.value.param == param
        assert repr(flat) in refused.value.message
        assert refused.value.code == "duplicate_tool_name"
    assert len(scripted.requests) == asked  # refused before the model


def test_calls_come_back_under_the_tool_that_was_called(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    """Two namespaces with a tool of one own name, a plain function beside them, and a
    namespace listed twice alike (which is no ambiguity): each call goes back under its
    own namespace and name."""
    tools = [
        namespace("files", "read"),
        namespace("web", "read"),
        function("read"),
        namespace("files", "read"),
    ]
    for flat, expected in [
        ("files__read", ("read", "files")),
        ("web__read", ("read", "web")),
        ("read", ("read", None)),
    ]:
        scripted.enqueue(Script(text=[], tool_calls=[(flat, {})]))
        reply = client.responses.create(model="scripted", input="go", tools=tools)  # type: ignore[arg-type]
        call = reply.output[0]
        assert call.type == "function_call"
        assert (call.name, call.namespace) == expected
    sent = [tool.name for tool in scripted.requests[-1].tools]
    assert sent[:3] == ["files__read", "web__read", "read"]


def test_the_ignored_tools_header_is_bounded_and_counts_the_rest(
    client: openai.OpenAI, scripted: ScriptedBackend
) -> None:
    """A megabyte of hosted tool types was one header line: the SDK's HTTP library
    refused the reply ("Header line too long" / over h11's 64 KiB)."""
    hosted = [{"type": f"hosted_{i:03d}_" + "x" * 3000} for i in range(300)]  # ~0.9 MB
    short = [{"type": f"tool_{i:03d}"} for i in range(200)]
    for tools, listed_first in ((hosted, 0), (short, None)):
        scripted.enqueue(Script(text=["fine"]))
        raw = client.responses.with_raw_response.create(
            model="scripted",
            input="go",
            tools=[*tools, function("lookup")],  # type: ignore[list-item]
        )
        assert raw.status_code == 200 and raw.parse().output_text == "fine"
        header = raw.headers["x-llmbridge-ignored-tools"]
        assert len(header) <= 1024
        names = header.split(",")
        shown, rest = names[:-1], names[-1]
        assert rest == f"+{len(tools) - len(shown)} more"
        assert shown == [tool["type"] for tool in tools[: len(shown)]]
        if listed_first is not None:
            assert len(shown) == listed_first  # each is 3 kB: none fits
        else:
            assert len(shown) > 50
    scripted.enqueue(Script(text=["fine"]))
    few = client.responses.with_raw_response.create(
        model="scripted",
        input="go",
        tools=[{"type": "web_search"}, {"type": "code_interpreter"}],  # type: ignore[list-item,misc]
    )
    assert few.headers["x-llmbridge-ignored-tools"] == "web_search,code_interpreter"
    # An mcp tool is not ignored: with no mcp.servers here, a 400 naming the setting.
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="scripted",
            input="go",
            tools=[{"type": "mcp", "server_label": "files"}],  # type: ignore[list-item]
        )
    assert "mcp.servers" in refused.value.message and refused.value.param == "tools.0"


def test_over_long_ids_are_a_400_naming_the_field(
    client: openai.OpenAI, gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    asked = len(scripted.requests)
    huge = "resp_" + "0" * (1024 * 1024)
    with pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(model="scripted", input="go", previous_response_id=huge)
    assert refused.value.param == "previous_response_id"
    assert refused.value.code == "string_above_max_length"
    assert len(refused.value.message) < 300  # the id is not echoed
    for method in ("GET", "DELETE"):
        reply = httpx.request(method, f"{gateway.url}/v1/responses/{'r' * 2000}")
        assert reply.status_code == 400, method
        error = reply.json()["error"]
        assert error["param"] == "response_id" and len(error["message"]) < 300
    long_id = "call_" + "x" * MAX_ITEM_ID_CHARS
    items: list[tuple[dict[str, Any], str]] = [
        (
            {"type": "function_call", "call_id": long_id, "name": "f", "arguments": "{}"},
            "input.0.call_id",
        ),
        (
            {"type": "function_call_output", "call_id": long_id, "output": "done"},
            "input.0.call_id",
        ),
        ({"type": "message", "role": "user", "content": "hi", "id": long_id}, "input.0.id"),
    ]
    for item, param in items:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="scripted", input=[item])  # type: ignore[list-item]
        assert caught.value.param == param
    assert len(scripted.requests) == asked
    # An id as long as the limit is taken.
    scripted.enqueue(Script(text=["fine"]))
    fits = "c" * MAX_ITEM_ID_CHARS
    taken = client.responses.create(
        model="scripted",
        input=[
            {"type": "function_call", "call_id": fits, "name": "f", "arguments": "{}"},
            {"type": "function_call_output", "call_id": fits, "output": "done"},
        ],
    )
    assert taken.output_text == "fine"
