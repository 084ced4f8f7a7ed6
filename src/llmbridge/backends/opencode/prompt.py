"""A neutral chat request as one OpenCode prompt.

OpenCode takes a system text, which it appends to its agent's prompt, and one user
message per prompt; a new session has no history. So the system messages become the
``system`` text and the conversation becomes the message: the last user message alone
when it is the whole conversation, else a labelled transcript ending in that message.
Images travel as ``file`` parts with data URLs. OpenCode's own tools are switched off
on every prompt (``tools: {"*": false}``); tool calling is emulated above this
backend (features/tool_emulation.py), so any tool calls and results in the history
appear in the transcript as text.

OpenCode has no per-prompt sampling settings (temperature and the like belong to its
agent configuration), so a request's ``params`` are not sent. A JSON response format
becomes an instruction.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.messages import (
    ImagePart,
    Message,
)
from llmbridge.core.request import ChatRequest
from llmbridge.features.transcript import render_message

__all__ = ["ModelRef", "parse_model_ref", "prompt_body", "resolve_model"]

_LABELS = {"user": "User", "assistant": "Assistant", "tool": "Tool", "system": "System"}
_JSON_ONLY = "Reply with one JSON object only: no prose, no code fences."


@dataclass(frozen=True, slots=True)
class ModelRef:
    provider: str
    model: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.model}"


def resolve_model(
    name: str, default: ModelRef | None, providers: Collection[str] | None
) -> ModelRef:
    """The OpenCode provider and model for a backend model name.

    ``provider/model`` goes to that provider when OpenCode has it (or when the
    provider list is unknown); any other name goes to ``default``.
    """
    provider, slash, model = name.partition("/")
    if slash and model and (providers is None or provider in providers):
        return ModelRef(provider, model)
    if default is not None:
        return default
    known = ", ".join(sorted(providers)) if providers else "none known"
    raise InvalidRequestError(
        f"model '{name}' is not PROVIDER/MODEL of an OpenCode provider ({known}), and no "
        "default OpenCode model is set (--opencode-model PROVIDER/MODEL, or the "
        "backend's `model` setting)",
        param="model",
    )


def parse_model_ref(value: str) -> ModelRef:
    provider, slash, model = value.partition("/")
    if not (slash and provider and model):
        raise ValueError(f"an OpenCode model is PROVIDER/MODEL, not {value!r}")
    return ModelRef(provider, model)


def _conversation_text(conversation: list[Message]) -> str:
    last = conversation[-1]
    if len(conversation) == 1 and last.role == "user":
        return render_message(last, {})
    names: dict[str, str] = {}
    lines = [f"{_LABELS[m.role]}: {render_message(m, names)}" for m in conversation]
    intro = "The conversation so far, oldest first:"
    outro = (
        "Reply to the user's last message as the assistant."
        if last.role != "assistant"
        else "Continue the assistant's last message."
    )
    return "\n\n".join([intro, *lines, outro])


def _file_parts(message: Message) -> list[dict[str, Any]]:
    files = []
    for part in message.parts:
        if not isinstance(part, ImagePart):
            continue
        media_type = part.media_type or "image/png"
        url = part.url or f"data:{media_type};base64,{part.data or ''}"
        files.append({"type": "file", "mime": media_type, "url": url})
    return files


def prompt_body(request: ChatRequest, model: ModelRef, agent: str | None) -> dict[str, Any]:
    """The body of ``POST /session/{id}/prompt_async`` for ``request``."""
    system = [m.text for m in request.messages if m.role == "system" and m.text]
    conversation = [m for m in request.messages if m.role != "system"]
    if not conversation:
        raise InvalidRequestError("the request has no user message", param="messages")
    fmt = request.response_format
    if fmt is not None and fmt.type == "json":
        system.append(_JSON_ONLY)
    elif fmt is not None and fmt.type == "json_schema" and fmt.schema is not None:
        schema = orjson.dumps(fmt.schema).decode()
        system.append(f"{_JSON_ONLY} It must match this JSON Schema: {schema}")
    parts: list[dict[str, Any]] = [{"type": "text", "text": _conversation_text(conversation)}]
    if conversation[-1].role == "user":
        parts.extend(_file_parts(conversation[-1]))
    body: dict[str, Any] = {
        "model": {"providerID": model.provider, "modelID": model.model},
        # OpenCode's own tools (shell, edit, read, fetch...) never run for a request.
        "tools": {"*": False},
        "parts": parts,
    }
    if agent:
        body["agent"] = agent
    if system:
        body["system"] = "\n\n".join(system)
    return body
