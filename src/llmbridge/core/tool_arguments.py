"""Turn the text of a tool call's arguments into a JSON object, losing nothing.

Backends send arguments as an object (Ollama), as a JSON string (OpenAI), or as a
JSON string encoded twice (some small models). This is the baseline parser used
wherever a tool call is completed; ``features`` may add heavier repair on top.
``parse_request_tool_arguments`` is the same for calls in a client's request, where
arguments parsed from a string must also be ones llmbridge can send on.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmbridge.core.request_limits import check_encodable

__all__ = ["parse_request_tool_arguments", "parse_tool_arguments"]


def parse_tool_arguments(raw: Any) -> tuple[dict[str, Any], str | None]:
    """Parse tool-call arguments.

    Returns:
        ``(arguments, raw_text)``: the parsed object, and the original text when it
        could not be parsed into an object (``None`` when parsing succeeded), so the
        caller can keep it rather than drop it.
    """
    if isinstance(raw, dict):
        return raw, None
    if raw is None or raw == "":
        return {}, None
    if not isinstance(raw, str):
        return {}, orjson.dumps(raw).decode()
    value: Any = raw
    # A double-encoded object decodes to a string first; decode at most twice.
    for _ in range(2):
        try:
            value = orjson.loads(value)
        except orjson.JSONDecodeError:
            return {}, raw
        if isinstance(value, dict):
            return value, None
        if not isinstance(value, str):
            break
    return {}, raw


def parse_request_tool_arguments(
    raw: Any, path: str, max_depth: int
) -> tuple[dict[str, Any], str | None]:
    """``parse_tool_arguments`` for a tool call in a client's request.

    Raises:
        InvalidRequestError: arguments parsed here from a string hold what the JSON
            encoder cannot write back (``check_encodable``), named at ``path``. The
            body's own depth check never saw inside the string.
    """
    arguments, raw_text = parse_tool_arguments(raw)
    if isinstance(raw, str) and arguments:
        check_encodable(arguments, path, max_depth)
    return arguments, raw_text
