"""The Anthropic MCP connector, decoded for the gateway's MCP loop (core/hosted_mcp.py;
docs/MCP.md, "MCP tools for any model").

Taken out of the body before it is validated, so no backend sees them:

- ``mcp_servers``: ``[{"type": "url", "url", "name", "authorization_token"?,
  "tool_configuration"?: {"enabled", "allowed_tools"}}]`` (beta ``mcp-client-2025-04-04``),
  each a ``McpServerUse`` named ``name``; the connector has no approvals, so none is
  asked;
- ``tools`` entries ``{"type": "mcp_toolset", "mcp_server_name", "default_config"?:
  {"enabled"}, "configs"?: {tool: {"enabled"}}}`` (beta ``mcp-client-2025-11-20``): when
  the request has any, a server's tools are those its toolset enables (a server without
  one offers none);
- an assistant turn's ``mcp_tool_use`` and ``mcp_tool_result`` blocks (an earlier
  answer sent back): the ``tool_use`` of ``<server>__<tool>`` and, in a user turn of its
  own, its ``tool_result``, as the model saw them.
"""

from __future__ import annotations

from typing import Any

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.hosted_mcp import HostedMcp, McpServerUse, model_tool_name

__all__ = ["split_mcp"]

TOOLSET = "mcp_toolset"


def split_mcp(body: object) -> tuple[object, HostedMcp | None]:
    """``body`` without the connector's fields and blocks, and what they asked."""
    if not isinstance(body, dict):
        return body, None
    servers = body.get("mcp_servers")
    tools = body.get("tools")
    toolsets = [t for t in tools if _is_toolset(t)] if isinstance(tools, list) else []
    messages = body.get("messages")
    if servers is None and not toolsets and not _has_mcp_blocks(messages):
        return body, None
    body = {key: value for key, value in body.items() if key != "mcp_servers"}
    if toolsets:
        body["tools"] = [t for t in tools if not _is_toolset(t)]  # type: ignore[union-attr]
    if isinstance(messages, list):
        body["messages"] = _messages(messages)
    if servers is None:
        servers = []
    if not isinstance(servers, list):
        raise InvalidRequestError("mcp_servers: expected an array", param="mcp_servers")
    uses = [_server(server, index, toolsets) for index, server in enumerate(servers)]
    named = {use.label for use in uses}
    for index, toolset in enumerate(toolsets):
        if toolset.get("mcp_server_name") not in named:
            raise InvalidRequestError(
                f"tools: the mcp_toolset {toolset.get('mcp_server_name')!r} names no server "
                "of mcp_servers",
                param=f"tools.{index}.mcp_server_name",
            )
    return body, HostedMcp(tuple(uses))


def _is_toolset(tool: object) -> bool:
    return isinstance(tool, dict) and tool.get("type") == TOOLSET


def _field(server: dict[str, Any], name: str, where: str, kind: type) -> Any:
    value = server.get(name)
    if value is not None and not isinstance(value, kind):
        raise InvalidRequestError(f"{where}.{name}: expected a {kind.__name__}", param=where)
    return value


def _server(server: object, index: int, toolsets: list[dict[str, Any]]) -> McpServerUse:
    where = f"mcp_servers.{index}"
    if not isinstance(server, dict) or not isinstance(server.get("name"), str):
        raise InvalidRequestError(f"{where}.name: Field required", param=f"{where}.name")
    name: str = server["name"]
    url = _field(server, "url", where, str)
    token = _field(server, "authorization_token", where, str)
    config = _field(server, "tool_configuration", where, dict) or {}
    allowed: tuple[str, ...] | None = None
    denied: tuple[str, ...] = ()
    if config.get("enabled") is False:
        allowed = ()
    elif isinstance(config.get("allowed_tools"), list):
        allowed = tuple(str(tool) for tool in config["allowed_tools"])
    if toolsets:
        allowed, denied = _toolset(
            next((t for t in toolsets if t.get("mcp_server_name") == name), None)
        )
    return McpServerUse(
        label=name,
        param=where,
        url=url,
        url_field="url",
        headers=(("Authorization", f"Bearer {token}"),) if token else (),
        allowed_tools=allowed,
        denied_tools=denied,
        approve_all=False,  # the connector asks for no approvals
    )


def _toolset(toolset: dict[str, Any] | None) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """The tools a toolset enables: (allowed, ``None`` for all but the denied)."""
    if toolset is None:
        return (), ()
    default = toolset.get("default_config") or {}
    configs = toolset.get("configs") or {}
    enabled = {name for name, c in configs.items() if isinstance(c, dict) and c.get("enabled")}
    disabled = {
        name for name, c in configs.items() if isinstance(c, dict) and c.get("enabled") is False
    }
    if isinstance(default, dict) and default.get("enabled") is False:
        return tuple(sorted(enabled)), ()
    return None, tuple(sorted(disabled))


def _has_mcp_blocks(messages: object) -> bool:
    if not isinstance(messages, list):
        return False
    return any(
        isinstance(block, dict) and block.get("type") in ("mcp_tool_use", "mcp_tool_result")
        for message in messages
        if isinstance(message, dict) and isinstance(message.get("content"), list)
        for block in message["content"]
    )


def _messages(messages: list[Any]) -> list[Any]:
    """An assistant turn with MCP blocks split where a result comes (module docstring)."""
    out: list[Any] = []
    for message in messages:
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list) or message.get("role") != "assistant":
            out.append(message)
            continue
        names: dict[str, str] = {}
        turn: list[Any] = []
        for block in content:
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "mcp_tool_use":
                name = model_tool_name(str(block.get("server_name")), str(block.get("name")))
                names[str(block.get("id"))] = name
                turn.append(
                    {
                        "type": "tool_use",
                        "id": block.get("id"),
                        "name": name,
                        "input": block.get("input") or {},
                    }
                )
            elif kind == "mcp_tool_result":
                if turn:
                    out.append({**message, "content": turn})
                    turn = []
                result = {
                    "type": "tool_result",
                    "tool_use_id": block.get("tool_use_id"),
                    "content": block.get("content") or "",
                    "is_error": bool(block.get("is_error")),
                }
                out.append({"role": "user", "content": [result]})
            else:
                turn.append(block)
        if turn:
            out.append({**message, "content": turn})
    return out
