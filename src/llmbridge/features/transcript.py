"""Messages as plain text, for prompts that carry a conversation as one text.

Tool calling emulation (``tool_emulation``) and the OpenCode backend, which takes one
user message per prompt, both write earlier turns into a prompt. A tool call becomes
``[called NAME with ARGS]`` and its result ``[NAME result: ...]`` (or ``error``);
the tool's name is remembered from the call, since results often carry only its id.
Images become ``[image]``; thinking is the model's own scratch work and is left out.
Arguments are written with sorted keys: a client that sends a call back with its keys
in another order must not change the prompt (a local model's prefix cache would miss).
"""

from __future__ import annotations

import orjson

from llmbridge.core.messages import ImagePart, Message, TextPart, ToolCallPart, ToolResultPart

__all__ = ["render_message"]


def render_message(message: Message, names: dict[str, str]) -> str:
    """The text of ``message``'s parts; ``names`` maps tool-call ids to tool names and
    learns the calls seen here, for results further on."""
    pieces: list[str] = []
    for part in message.parts:
        if isinstance(part, TextPart) and part.text:
            pieces.append(part.text)
        elif isinstance(part, ToolCallPart):
            names[part.id] = part.name
            arguments = orjson.dumps(part.arguments, option=orjson.OPT_SORT_KEYS).decode()
            pieces.append(f"[called {part.name} with {arguments}]")
        elif isinstance(part, ToolResultPart):
            name = part.name or names.get(part.tool_call_id, "tool")
            status = "error" if part.is_error else "result"
            pieces.append(f"[{name} {status}: {part.content}]")
        elif isinstance(part, ImagePart):
            pieces.append("[image]")
    return " ".join(pieces)
