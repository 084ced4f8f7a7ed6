"""Responses tools as the core sees them, and the way back for the calls.

- ``function`` tools are core tools as they are.
- ``custom`` tools (Codex's ``apply_patch``: freeform input, maybe a grammar) have no
  core equivalent, and most backends take only JSON-schema functions, so each becomes a
  function with one string argument, ``input``; its call goes back to the client as a
  ``custom_tool_call`` whose ``input`` is that string.
- ``namespace`` tools are flattened: ``ns`` + ``__`` + ``tool`` (backends take flat
  names, OpenAI's ``^[a-zA-Z0-9_-]+$``); a call of the flat name goes back as the
  tool's own name with ``namespace: ns``, as OpenAI answers. Two tools whose flat
  names meet (namespace ``a`` with ``b__c`` and namespace ``a__b`` with ``c``, or
  namespace ``a`` with ``b`` and a function ``a__b``) could not be told apart when the
  model calls one, so the request is a 400 naming the second (the call used to go
  back under the other tool). So is a ``custom`` and a ``function`` tool of one name.
- ``mcp`` tools name MCP servers whose tools the gateway runs for the model
  (mcp_request.py, gateway/hosted/): kept apart, never sent to the backend as such.
- other hosted tools (``web_search``, ``image_generation``...) are run by OpenAI's servers,
  not by any backend here: they are left out, and named so the route can say so in
  ``x-llmbridge-ignored-tools`` (a 400 would stop Codex, which always sends one).

What the way back needs is kept in the request's ``provider_details["responses"]``
(``ToolShapes.details``) so the reply encoders, which get the request, can read it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.hosted_mcp import McpServerUse
from llmbridge.core.messages import ToolDefinition
from llmbridge.dialects.responses.mcp_request import decode_mcp_tool
from llmbridge.dialects.responses.types import (
    CustomTool,
    FunctionTool,
    McpTool,
    NamespaceTool,
    Tool,
)

__all__ = [
    "CUSTOM_INPUT",
    "NAMESPACE_SEPARATOR",
    "CallShape",
    "ToolShapes",
    "call_shape",
    "decode_tools",
    "flat_name",
]

NAMESPACE_SEPARATOR = "__"
CUSTOM_INPUT = "input"
"""The one argument of a custom tool presented to the backend as a function."""


@dataclass(slots=True)
class ToolShapes:
    """What the request's tools became, for the way back."""

    definitions: list[ToolDefinition] = field(default_factory=list)
    custom: set[str] = field(default_factory=set)
    """Flat names of custom tools."""
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Flat name -> (namespace, the tool's own name)."""
    ignored: list[str] = field(default_factory=list)
    """Hosted tools' types, in order, without repeats."""
    mcp: list[McpServerUse] = field(default_factory=list)
    """The ``mcp`` tools: servers whose tools the gateway runs (mcp_request.py)."""
    defined: dict[str, tuple[str, CallShape]] = field(default_factory=dict)
    """Flat name -> where the first tool of that name is (``tools.1.tools.0``) and how
    its calls go back: two different ways back for one name are refused."""

    def details(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        if self.custom:
            out["custom_tools"] = sorted(self.custom)
        if self.namespaced:
            out["namespaced"] = {flat: list(pair) for flat, pair in self.namespaced.items()}
        if self.ignored:
            out["ignored_tools"] = list(self.ignored)
        return out


@dataclass(frozen=True, slots=True)
class CallShape:
    """How a core tool call goes back to the client."""

    name: str
    namespace: str | None
    custom: bool


def flat_name(namespace: str | None, name: str) -> str:
    """The name the backend sees for ``name`` inside ``namespace``."""
    return f"{namespace}{NAMESPACE_SEPARATOR}{name}" if namespace else name


def decode_tools(tools: Sequence[Tool] | None) -> ToolShapes:
    """The core's tools, and what their calls need on the way back.

    Raises:
        InvalidRequestError: two tools have one flat name but go back differently
            (``param`` names the second one's ``name``).
    """
    shapes = ToolShapes()
    for index, tool in enumerate(tools or ()):
        if isinstance(tool, NamespaceTool):
            for position, inner in enumerate(tool.tools):
                where = f"tools.{index}.tools.{position}"
                _add(shapes, inner, tool.name, tool.description, where)
        elif isinstance(tool, FunctionTool | CustomTool):
            _add(shapes, tool, None, None, f"tools.{index}")
        elif isinstance(tool, McpTool):
            shapes.mcp.append(decode_mcp_tool(tool, f"tools.{index}"))
        elif tool.type not in shapes.ignored:
            shapes.ignored.append(tool.type)
    return shapes


def _check_unique(shapes: ToolShapes, name: str, shape: CallShape, where: str) -> None:
    """Refuse a second tool of the flat ``name`` whose calls would go back differently
    (the same tool listed twice goes back the same way, and is let be)."""
    first = shapes.defined.setdefault(name, (where, shape))
    if first[1] == shape:
        return
    raise InvalidRequestError(
        f"Invalid '{where}.name': the {_spelled(shape)} and the {_spelled(first[1])} "
        f"({first[0]}) are both named {name!r} to the model (a namespace's tools are "
        f"named namespace{NAMESPACE_SEPARATOR}tool), so a call could not be told apart; "
        "rename one of them.",
        param=f"{where}.name",
        code="duplicate_tool_name",
    )


def _spelled(shape: CallShape) -> str:
    kind = "custom tool" if shape.custom else "function"
    inside = f" in namespace {shape.namespace!r}" if shape.namespace else ""
    return f"{kind} {shape.name!r}{inside}"


def _add(
    shapes: ToolShapes,
    tool: FunctionTool | CustomTool,
    namespace: str | None,
    namespace_description: str | None,
    where: str,
) -> None:
    name = flat_name(namespace, tool.name)
    _check_unique(
        shapes, name, CallShape(tool.name, namespace, isinstance(tool, CustomTool)), where
    )
    if namespace is not None:
        shapes.namespaced[name] = (namespace, tool.name)
    description = tool.description or ""
    if namespace_description:
        description = f"{namespace_description}\n\n{description}".strip()
    if isinstance(tool, FunctionTool):
        details = {"openai": {"strict": tool.strict}} if tool.strict is not None else None
        schema = tool.parameters if tool.parameters is not None else {"type": "object"}
        shapes.definitions.append(ToolDefinition(name, description, schema, details))
        return
    shapes.custom.add(name)
    shapes.definitions.append(
        ToolDefinition(
            name,
            _custom_description(description, tool.format),
            {
                "type": "object",
                "properties": {
                    CUSTOM_INPUT: {
                        "type": "string",
                        "description": "The tool's whole input, as free text.",
                    }
                },
                "required": [CUSTOM_INPUT],
                "additionalProperties": False,
            },
            {"responses": {"custom": True, "format": tool.format}},
        )
    )


def _custom_description(description: str, format_: dict[str, Any] | None) -> str:
    """The description, plus the grammar the input must follow: the backend cannot
    be given the grammar itself, so the model reads it."""
    if not format_ or format_.get("type") != "grammar":
        return description
    definition = format_.get("definition")
    if not isinstance(definition, str) or not definition:
        return description
    syntax = format_.get("syntax") or "grammar"
    return (
        f"{description}\n\nPut the whole input in the `{CUSTOM_INPUT}` argument; "
        f"it must follow this {syntax} grammar:\n{definition}"
    ).strip()


def call_shape(details: dict[str, Any], name: str) -> CallShape:
    """How a call of the flat ``name`` goes back, from the request's details."""
    namespaced = details.get("namespaced") or {}
    pair = namespaced.get(name)
    custom = name in (details.get("custom_tools") or ())
    if pair is not None:
        return CallShape(pair[1], pair[0], custom)
    return CallShape(name, None, custom)
