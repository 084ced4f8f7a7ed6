"""Interactions steps and contents: the conversation, both ways.

An interaction's ``input`` is a list of steps (or contents, which are the user's turn);
the reply's ``steps`` are what the model did. In the core:

- ``user_input`` (and loose contents) is a user message; ``text`` contents are text
  parts, ``image`` contents image parts (audio, video and documents are refused: the
  core carries text and images).
- ``model_output``, ``thought`` and ``function_call`` steps in a row are one assistant
  message: text, a thinking part (the summary's text, the ``signature``) and a tool
  call (its ``id`` kept, so results are matched by id).
- ``function_result`` is a tool message; a result given as contents is its text, the
  images in it go to a user message after the results (the core's tool results are
  text, and every vision backend can read a user's image); an object is its JSON.

One core part of a reply is one step (``output_step``): a text part a
``model_output`` step, a thinking part a ``thought`` step (its summary shown unless the
client asked for ``thinking_summaries: "none"``), a tool call a ``function_call`` step.

A thought's ``signature`` is bytes in Google's API (base64 in JSON, which the Python
SDK validates), so a signature another backend made goes out wrapped as the Gemini
front wraps it (``gemini.response.wire_signature``) and is unwrapped when it comes
back. The ``gemini_interactions`` backend tags Google's own with its name
(``INTERACTIONS``, ``dialects/carried.py``) and sends back only those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import orjson

from llmbridge.core.errors import InvalidRequestError, UnsupportedFeatureError
from llmbridge.core.messages import (
    ImagePart,
    Message,
    Part,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from llmbridge.dialects.carried import Carrier
from llmbridge.dialects.gemini.response import signature_from_wire, wire_signature
from llmbridge.dialects.images import is_base64, split_base64_data_url
from llmbridge.dialects.interactions.types import (
    FunctionCallStep,
    FunctionResultStep,
    ImageContent,
    MediaContent,
    ModelOutputStep,
    TextContent,
    ThoughtStep,
    UserInputStep,
)

__all__ = [
    "INTERACTIONS",
    "InputDecoder",
    "encode_conversation",
    "output_step",
]

INTERACTIONS = Carrier(prefix="llmbridge.interactions.v1.", provider="gemini_interactions")
"""Google's thought signatures, as the ``gemini_interactions`` backend carries them."""

Item = (
    TextContent
    | ImageContent
    | MediaContent
    | UserInputStep
    | ModelOutputStep
    | ThoughtStep
    | FunctionCallStep
    | FunctionResultStep
)
_CONTENTS = (TextContent, ImageContent, MediaContent)
_MODEL_STEPS = (ModelOutputStep, ThoughtStep, FunctionCallStep)

# -- decoding: the front ------------------------------------------------------------


@dataclass
class InputDecoder:
    """One request's ``input`` as core messages."""

    names: dict[str, str] = field(default_factory=dict)
    """Each function call's name by its id, for the results that leave it out."""

    def messages(self, value: Any) -> list[Message]:
        """The conversation in ``input`` (a string, one content or a list of items)."""
        if value is None:
            return []
        if isinstance(value, str):
            return [Message("user", (TextPart(value),))] if value else []
        items: list[Item] = value if isinstance(value, list) else [value]
        prefix = "input." if isinstance(value, list) else "input"
        out: list[Message] = []
        user: list[Part] = []
        model: list[Part] = []
        results: list[Message] = []
        media: list[Part] = []

        def flush() -> None:
            if model:
                out.append(Message("assistant", tuple(model)))
                model.clear()
            out.extend(results)
            results.clear()
            if user or media:
                out.append(Message("user", (*media, *user)))
                user.clear()
                media.clear()

        for index, item in enumerate(items):
            path = f"{prefix}{index}" if prefix.endswith(".") else prefix
            if isinstance(item, _CONTENTS):
                if model or results:
                    flush()
                user.extend(self.content(item, path))
            elif isinstance(item, UserInputStep):
                if model or user:
                    flush()  # results and their media wait: they join this turn
                for position, content in enumerate(item.content or ()):
                    user.extend(self.content(content, f"{path}.content.{position}"))
                flush()
            elif isinstance(item, _MODEL_STEPS):
                if user or results:
                    flush()
                model.extend(self.model_step(item, path))
            else:
                if model or user:
                    flush()
                result, extra = self.function_result(item, path)
                results.append(Message("tool", (result,)))
                media.extend(extra)
        flush()
        return out

    def content(self, content: TextContent | ImageContent | MediaContent, path: str) -> list[Part]:
        if isinstance(content, TextContent):
            return [TextPart(content.text)] if content.text else []
        if isinstance(content, MediaContent):
            raise UnsupportedFeatureError(
                f"{path}: {content.type} contents are not supported (text and images only)",
                param=path,
            )
        if content.data is not None:
            if not is_base64(content.data):
                raise InvalidRequestError(f"{path}.data: invalid base64 data", param=f"{path}.data")
            return [ImagePart(data=content.data, media_type=content.mime_type)]
        if content.uri:
            return [ImagePart(url=content.uri, media_type=content.mime_type)]
        raise InvalidRequestError(f"{path}: an image content needs data or uri", param=path)

    def model_step(
        self, step: ModelOutputStep | ThoughtStep | FunctionCallStep, path: str
    ) -> list[Part]:
        if isinstance(step, FunctionCallStep):
            self.names[step.id] = step.name
            return [ToolCallPart(id=step.id, name=step.name, arguments=step.arguments)]
        if isinstance(step, ThoughtStep):
            summary = "".join(c.text for c in step.summary or () if isinstance(c, TextContent))
            signature = signature_from_wire(step.signature) if step.signature else None
            if not summary and not signature:
                return []
            return [ThinkingPart(summary, signature=signature)]
        parts: list[Part] = []
        for position, content in enumerate(step.content or ()):
            parts.extend(self.content(content, f"{path}.content.{position}"))
        return parts

    def function_result(
        self, step: FunctionResultStep, path: str
    ) -> tuple[ToolResultPart, list[Part]]:
        media: list[Part] = []
        result = step.result
        if isinstance(result, str):
            text = result
        elif isinstance(result, list):
            texts: list[str] = []
            for position, content in enumerate(result):
                parts = self.content(content, f"{path}.result.{position}")
                texts.extend(p.text for p in parts if isinstance(p, TextPart))
                media.extend(p for p in parts if not isinstance(p, TextPart))
            text = "\n".join(texts)
        else:
            text = orjson.dumps(result).decode()
        name = step.name or self.names.get(step.call_id)
        part = ToolResultPart(
            tool_call_id=step.call_id, content=text, is_error=bool(step.is_error), name=name
        )
        return part, media


# -- encoding: the reply's steps (the front) ----------------------------------------


def output_step(part: Part, *, shown: bool) -> dict[str, Any] | None:
    """The step for one part of a reply (``None``: nothing to show, such as an
    unsigned thought whose summary the client did not ask for)."""
    if isinstance(part, TextPart):
        return {"type": "model_output", "content": [{"type": "text", "text": part.text}]}
    if isinstance(part, ToolCallPart):
        return {
            "type": "function_call",
            "id": part.id,
            "name": part.name,
            "arguments": part.arguments,
        }
    if isinstance(part, ThinkingPart):
        step: dict[str, Any] = {"type": "thought"}
        if part.signature:
            step["signature"] = wire_signature(part.signature)
        if shown and part.text:
            step["summary"] = [{"type": "text", "text": part.text}]
        return step if len(step) > 1 else None
    if isinstance(part, ImagePart):
        return {"type": "model_output", "content": [_image(part)]}
    return None


# -- encoding: the conversation, for Google (the backend) ---------------------------


def encode_conversation(
    messages: tuple[Message, ...], *, origin: str | None
) -> tuple[str | None, list[dict[str, Any]]]:
    """The system instruction and the ``input`` steps for ``messages``. Thinking goes
    back only where it carries a signature this backend (``origin``) issued; a tool
    result is a ``function_result`` step with its call's name."""
    system: list[str] = []
    steps: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for message in messages:
        if message.role == "system":
            if message.text:
                system.append(message.text)
            continue
        if message.role == "assistant":
            steps.extend(_model_steps(message.parts, origin, names))
            continue
        contents: list[dict[str, Any]] = []
        for part in message.parts:
            if isinstance(part, ToolResultPart):
                steps.append(_function_result(part, names))
            elif isinstance(part, TextPart) and part.text:
                contents.append({"type": "text", "text": part.text})
            elif isinstance(part, ImagePart):
                contents.append(_image(part))
        if contents:
            steps.append({"type": "user_input", "content": contents})
    return ("\n\n".join(system) or None), steps


def _model_steps(
    parts: tuple[Part, ...], origin: str | None, names: dict[str, str]
) -> list[dict[str, Any]]:
    steps: list[dict[str, Any]] = []
    contents: list[dict[str, Any]] = []

    def flush() -> None:
        if contents:
            steps.append({"type": "model_output", "content": list(contents)})
            contents.clear()

    for part in parts:
        if isinstance(part, TextPart):
            if part.text:
                contents.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            contents.append(_image(part))
        elif isinstance(part, ToolCallPart):
            flush()
            names[part.id] = part.name
            steps.append(
                {
                    "type": "function_call",
                    "id": part.id,
                    "name": part.name,
                    "arguments": part.arguments,
                }
            )
        elif isinstance(part, ThinkingPart):
            token = INTERACTIONS.recover(part.signature, origin)
            if token is None:
                continue  # another server's reasoning (or none signed): not Google's to read
            flush()
            thought: dict[str, Any] = {"type": "thought", "signature": token}
            if part.text:
                thought["summary"] = [{"type": "text", "text": part.text}]
            steps.append(thought)
    flush()
    return steps


def _function_result(part: ToolResultPart, names: dict[str, str]) -> dict[str, Any]:
    step: dict[str, Any] = {
        "type": "function_result",
        "call_id": part.tool_call_id,
        "result": part.content,
    }
    name = part.name or names.get(part.tool_call_id)
    if name:
        step["name"] = name
    if part.is_error:
        step["is_error"] = True
    return step


def _image(part: ImagePart) -> dict[str, Any]:
    data, media_type = part.data, part.media_type
    if data is None and part.url:
        split = split_base64_data_url(part.url)
        if split is not None:
            media_type, data = media_type or split[0], split[1]
    if data is not None:
        return {"type": "image", "data": data, "mime_type": media_type or "image/png"}
    image: dict[str, Any] = {"type": "image", "uri": part.url or ""}
    if media_type:
        image["mime_type"] = media_type
    return image
