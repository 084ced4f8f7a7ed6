"""An MCP tool's result as the text a model reads: ``result_text``.

A model's tool result is text, and an MCP result is a list of content blocks. Text
blocks (and the text of an embedded text resource) are joined, one per line, in
their order; a block a model cannot read as text (an image, audio, a blob resource)
is named in brackets with its type, and a resource link by its URI, so the model
knows something was there. A result with no content but ``structuredContent`` is
that JSON.
"""

from __future__ import annotations

import mcp_types as types
import orjson

__all__ = ["result_text"]


def result_text(result: types.CallToolResult) -> str:
    """``result``'s content as text (module docstring)."""
    lines = [_block_text(block) for block in result.content]
    if not lines and result.structured_content is not None:
        return orjson.dumps(result.structured_content).decode()
    return "\n".join(lines)


def _block_text(block: types.ContentBlock) -> str:
    if isinstance(block, types.TextContent):
        return block.text
    if isinstance(block, types.EmbeddedResource):
        resource = block.resource
        if isinstance(resource, types.TextResourceContents):
            return resource.text
        return f"[resource {resource.uri}: {resource.mime_type or 'binary'}]"
    if isinstance(block, types.ResourceLink):
        return f"[resource link {block.uri}]"
    return f"[{block.type}: {block.mime_type}]"  # an image or audio
