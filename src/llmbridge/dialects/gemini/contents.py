"""Gemini turns and parts: ``contents`` (and ``systemInstruction``) to core messages
and back. ``request.py`` handles the rest of a request around them.

Decoding (``ContentDecoder``), the decisions docs/GEMINI.md lists:

- ``model`` turns are assistant messages; ``user`` turns are user messages, except that
  each ``functionResponse`` in them (or in a ``function``/``tool`` turn from older
  clients) is a ``Message(role="tool")`` of its own, placed before the user's own parts
  of that turn, so it directly follows the assistant turn that made the call (as
  ``dialects/anthropic/request.py`` places ``tool_result`` blocks).
- Function call ids: Gemini's API leaves ``functionCall.id`` out and matches results to
  calls by name and order. A call without an id gets a synthetic one (``call_<n>``,
  never one the client used); a result is matched by ``id`` when it has one, else to the
  first unanswered call of its name. ``explicit_ids`` records whether the client sent
  ids, so the reply gives it ids only then.
- A ``functionResponse.response`` is the result the model sees: the clients' wrappers
  (``{"output": ...}``, ``{"result": ...}``, ``{"name", "content"}``, Strands'
  ``{"output": [{"text": ...}]}``) are taken off, anything else goes as JSON text
  (``_result_content`` says exactly which objects are wrappers).
- A ``thoughtSignature`` is a ``ThinkingPart`` (empty, or the thought's own text when
  the part is a thought) directly before the part it was on, kept byte for byte: it is
  what the gateway gave the client (``thoughts.py``).
- ``inlineData`` images are image parts, ``text/*`` inline data is text (decoded), a
  ``fileData`` image is an image by URL; other media are a 400 naming the part.

Encoding (``encode_contents``) for the ``gemini`` backend: leading system messages are
the ``systemInstruction``, tool results are ``functionResponse`` parts in ``user`` turns,
consecutive turns of one role are merged, and only what this backend issued goes back:
its signatures (thought text never does), and the ids of its calls, on the call and on
the result that answers it (``call_ids.py``); other calls and results go without ids.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
from collections.abc import Iterable
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
from llmbridge.dialects.gemini.call_ids import recover_call_id
from llmbridge.dialects.gemini.response import signature_from_wire
from llmbridge.dialects.gemini.thoughts import GEMINI
from llmbridge.dialects.gemini.types import PROVIDER, Content
from llmbridge.dialects.gemini.types import Part as WirePart
from llmbridge.dialects.images import is_base64

__all__ = ["ContentDecoder", "encode_contents"]

_CONTENT_ROLES = {"user": "user", "model": "assistant", "function": "tool", "tool": "tool"}
_CALL_PREFIX = "call_"
_UNSUPPORTED_PARTS = {
    "executable_code": "executableCode",
    "code_execution_result": "codeExecutionResult",
}

# -- decoding -----------------------------------------------------------------------


@dataclass
class _Call:
    id: str
    name: str
    answered: bool = False


@dataclass
class ContentDecoder:
    """One request's contents: the path prefix its errors name
    (``generateContentRequest.`` inside a ``countTokens`` body) and the function calls
    seen so far."""

    prefix: str
    explicit_ids: bool = False
    """Whether any ``functionCall``/``functionResponse`` had an ``id``."""
    calls: list[_Call] = field(default_factory=list)
    taken_ids: set[str] = field(default_factory=set)
    next_call: int = 0

    def error(self, path: str, message: str) -> InvalidRequestError:
        where = self.prefix + path
        return InvalidRequestError(f"{where}: {message}", param=where)

    def unsupported(self, path: str, message: str) -> UnsupportedFeatureError:
        where = self.prefix + path
        return UnsupportedFeatureError(f"{where}: {message}", param=where)

    def messages(
        self, system_instruction: Content | None, contents: list[Content]
    ) -> tuple[Message, ...]:
        """The conversation: the system instruction, then each content's messages."""
        self._reserve_ids(contents)
        messages: list[Message] = []
        if system_instruction is not None:
            system = self.system(system_instruction)
            if system is not None:
                messages.append(system)
        for index, content in enumerate(contents):
            role = _CONTENT_ROLES.get(content.role or "user")
            if role is None:
                raise self.error(
                    f"contents.{index}.role",
                    f"Please use a valid role: user, model (got {content.role!r})",
                )
            if role == "assistant":
                message = self.model_turn(content, index)
                if message.parts:
                    messages.append(message)
            else:
                messages.extend(self.user_turn(content, index))
        return tuple(messages)

    def _reserve_ids(self, contents: Iterable[Content]) -> None:
        for content in contents:
            for part in content.parts:
                for item in (part.function_call, part.function_response):
                    if item is not None and item.id:
                        self.explicit_ids = True
                        self.taken_ids.add(item.id)

    def _synthetic_id(self) -> str:
        while True:
            self.next_call += 1
            candidate = f"{_CALL_PREFIX}{self.next_call}"
            if candidate not in self.taken_ids:
                return candidate

    def system(self, content: Content) -> Message | None:
        texts: list[str] = []
        for index, part in enumerate(content.parts):
            if part.text is None:
                raise self.error(
                    f"systemInstruction.parts.{index}", "system instructions must be text parts"
                )
            texts.append(part.text)
        if not texts:
            return None
        # Joined into one part: every other dialect renders a system prompt as one string.
        return Message(role="system", parts=(TextPart("\n\n".join(texts)),))

    def model_turn(self, content: Content, index: int) -> Message:
        parts: list[Part] = []
        for position, part in enumerate(content.parts):
            path = f"contents.{index}.parts.{position}"
            if part.function_response is not None:
                raise self.error(path, "functionResponse parts belong in user turns")
            # The gateway wrapped a signature that is not base64 (response.wire_signature).
            signature = signature_from_wire(part.thought_signature or "") or None
            if part.thought:
                # A thought summary: its text and its signature are one thinking part.
                provider = PROVIDER if signature else None
                parts.append(ThinkingPart(part.text or "", signature=signature, provider=provider))
                continue
            if signature is not None:
                parts.append(ThinkingPart("", signature=signature, provider=PROVIDER))
            if part.function_call is not None:
                call = part.function_call
                call_id = call.id or self._synthetic_id()
                self.calls.append(_Call(call_id, call.name))
                parts.append(ToolCallPart(id=call_id, name=call.name, arguments=call.args or {}))
            parts.extend(self.media(part, path))
        return Message(role="assistant", parts=tuple(parts))

    def user_turn(self, content: Content, index: int) -> list[Message]:
        """One tool message per ``functionResponse``, then the user's own parts."""
        results: list[Message] = []
        parts: list[Part] = []
        for position, part in enumerate(content.parts):
            path = f"contents.{index}.parts.{position}"
            if part.function_call is not None:
                raise self.error(path, "functionCall parts belong in model turns")
            if part.thought:
                continue  # a user turn has no reasoning of the model's to carry
            response = part.function_response
            if response is not None:
                result, media = self.function_response(part, path)
                results.append(Message(role="tool", parts=(result,)))
                # The core's tool results are text; media a function returned goes to
                # the user turn that follows, which every vision backend can see.
                parts.extend(media)
            parts.extend(self.media(part, path))
        if parts:
            results.append(Message(role="user", parts=tuple(parts)))
        return results

    def function_response(self, part: WirePart, path: str) -> tuple[ToolResultPart, list[Part]]:
        response = part.function_response
        assert response is not None
        call_id = self._match(response.id, response.name)
        content, is_error = _result_content(response.response, response.name)
        media: list[Part] = []
        for position, item in enumerate(response.parts or ()):
            media.extend(self.media(item, f"{path}.functionResponse.parts.{position}"))
        result = ToolResultPart(
            tool_call_id=call_id, content=content, is_error=is_error, name=response.name
        )
        return result, media

    def _match(self, call_id: str | None, name: str) -> str:
        """The core id of the call a result answers: by ``id`` when given, else the
        first unanswered call with its name (Gemini's own rule: name and order)."""
        for call in self.calls:
            if call.answered:
                continue
            if (call_id and call.id == call_id) or (not call_id and call.name == name):
                call.answered = True
                return call.id
        # A result for a call not in this history (a trimmed one): its own id, or a
        # fresh one; the backend decides what an orphan result means.
        return call_id or self._synthetic_id()

    def media(self, part: WirePart, path: str) -> list[Part]:
        """The text and media of ``part`` (its calls and results are handled apart)."""
        for key, wire_name in _UNSUPPORTED_PARTS.items():
            if getattr(part, key) is not None:
                raise self.unsupported(
                    f"{path}.{wire_name}", "code execution parts are not supported"
                )
        out: list[Part] = []
        if part.text:  # an empty text (the carrier of a signature) says nothing
            out.append(TextPart(part.text))
        if part.inline_data is not None:
            out.append(self.inline_data(part, path))
        if part.file_data is not None:
            data = part.file_data
            mime = data.mime_type or mimetypes.guess_type(data.file_uri)[0] or ""
            if not mime.startswith("image/"):
                raise self.unsupported(
                    f"{path}.fileData", f"only images are supported (got {mime or 'no mimeType'})"
                )
            out.append(ImagePart(url=data.file_uri, media_type=mime))
        known = (
            part.text,
            part.inline_data,
            part.file_data,
            part.function_call,
            part.function_response,
            part.thought_signature,
        )
        if all(item is None for item in known):
            raise self.error(
                path,
                "a part must hold one of text, inlineData, fileData, functionCall, "
                "functionResponse",
            )
        return out

    def inline_data(self, part: WirePart, path: str) -> Part:
        blob = part.inline_data
        assert blob is not None
        where = f"{path}.inlineData"
        if not is_base64(blob.data):
            raise self.error(f"{where}.data", "invalid base64 data")
        mime = blob.mime_type.lower()
        if mime.startswith("image/"):
            return ImagePart(data=blob.data, media_type=blob.mime_type)
        if mime.startswith("text/"):
            try:
                return TextPart(base64.b64decode(blob.data).decode("utf-8"))
            except (binascii.Error, UnicodeDecodeError) as exc:
                raise self.error(f"{where}.data", "text data is not valid UTF-8") from exc
        raise self.unsupported(where, f"{blob.mime_type!r} is not supported (images and text only)")


def _result_content(response: dict[str, Any] | None, name: str) -> tuple[str, bool]:
    """``ToolResultPart.content`` and ``is_error`` for a ``functionResponse.response``
    of the function ``name``: the result itself when the object is one of the
    clients' wrappers, else the whole object as JSON text. The wrappers, exactly
    (docs/GEMINI.md, "Function results"):

    - ``{"output"|"content"|"error": <str>}``, that one key only (Gemini CLI, the SDK);
    - ``{"result": <any>}``, that one key only (Google ADK wraps a non-dict return,
      agno every result);
    - ``{"name": <name>, "content": <any>}``, those two keys only and ``name`` equal to
      the function's (@ai-sdk/google, so OpenCode);
    - ``{"output": [<item>, ...]}``, that one key only, a non-empty list whose every
      item is ``{"text": <str>}`` or ``{"json": <any>}`` (Strands): the items joined
      by newlines.

    A text result stays text; a structured one (a number, list, object) is its JSON.
    ``is_error`` is whether the object has an ``error`` key, wrapped or not."""
    if not response:
        return "", False
    is_error = "error" in response
    unwrapped = _unwrap(response, name)
    if unwrapped is not None:
        return unwrapped, is_error
    return _json_text(response), is_error


def _unwrap(response: dict[str, Any], name: str) -> str | None:
    """The result inside a known wrapper (``_result_content``), or ``None``."""
    if len(response) == 1:
        ((key, value),) = response.items()
        if key in ("output", "content", "error") and isinstance(value, str):
            return value
        if key == "result":
            return _as_text(value)
        if key == "output" and isinstance(value, list):
            return _strands_items(value)
        return None
    if response.keys() == {"name", "content"} and response["name"] == name:
        return _as_text(response["content"])
    return None


def _strands_items(items: list[Any]) -> str | None:
    """Strands' ``[{"text": ...}, {"json": ...}]`` as text, or ``None`` when any item
    is something else (an image, a document): then the whole object goes as JSON."""
    texts: list[str] = []
    for item in items:
        if not isinstance(item, dict) or len(item) != 1:
            return None
        ((key, value),) = item.items()
        if key == "text" and isinstance(value, str):
            texts.append(value)
        elif key == "json":
            texts.append(_json_text(value))
        else:
            return None
    return "\n".join(texts) if texts else None


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else _json_text(value)


def _json_text(value: Any) -> str:
    return orjson.dumps(value).decode()


# -- encoding -----------------------------------------------------------------------


def encode_contents(
    messages: tuple[Message, ...], origin: str | None
) -> tuple[str, list[dict[str, Any]]]:
    """The system instruction (the leading system messages' text) and the contents.

    A system message after the conversation started has no place in Gemini's contents;
    it goes as user text where it was. Consecutive turns of one role are merged (Gemini
    wants the parts of one turn together) and turns left without parts are dropped.
    """
    system: list[str] = []
    contents: list[dict[str, Any]] = []
    names = {call.id: call.name for m in messages for call in m.tool_calls}
    for message in messages:
        if message.role == "system" and not contents:
            if message.text:
                system.append(message.text)
            continue
        role = "model" if message.role == "assistant" else "user"
        if message.role == "assistant":
            parts = _model_parts(message.parts, origin)
        else:
            encoded = (_user_part(part, names, origin) for part in message.parts)
            parts = [part for part in encoded if part is not None]
        if not parts:
            continue
        if contents and contents[-1]["role"] == role:
            contents[-1]["parts"].extend(parts)
        else:
            contents.append({"role": role, "parts": parts})
    return "\n\n".join(system), contents


def _model_parts(parts: tuple[Part, ...], origin: str | None) -> list[dict[str, Any]]:
    """A model turn's parts. A signature Google issued to ``origin`` goes back on the
    part after its thinking part (where the reply had it); thinking text is dropped."""
    out: list[dict[str, Any]] = []
    pending: str | None = None
    for part in parts:
        if isinstance(part, ThinkingPart):
            token = GEMINI.recover(part.signature, origin)
            pending = token or pending
            continue
        encoded: dict[str, Any] | None
        if isinstance(part, ToolCallPart):
            # Google's own id back, when it gave one; else none: Google matches results
            # to calls by name and order, and may refuse an id it did not issue.
            encoded = {"functionCall": _function_call(part, origin)}
        elif isinstance(part, TextPart):
            encoded = {"text": part.text} if part.text or pending else None
        elif isinstance(part, ImagePart):
            encoded = _encode_image(part)
        else:
            encoded = None  # a tool result in a model turn has no Gemini form
        if encoded is None:
            continue
        if pending is not None:
            encoded["thoughtSignature"] = pending
            pending = None
        out.append(encoded)
    if pending is not None:
        # The signature was on a part with nothing else (Gemini sends an empty text
        # part carrying it at the end of a turn): sent back the same way.
        out.append({"text": "", "thoughtSignature": pending})
    return out


def _function_call(part: ToolCallPart, origin: str | None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": part.name, "args": part.arguments}
    google_id = recover_call_id(part.id, origin)
    if google_id is not None:
        call["id"] = google_id
    return call


def _user_part(part: Part, names: dict[str, str], origin: str | None) -> dict[str, Any] | None:
    if isinstance(part, TextPart):
        return {"text": part.text} if part.text else None
    if isinstance(part, ImagePart):
        return _encode_image(part)
    if isinstance(part, ToolResultPart):
        name = part.name or names.get(part.tool_call_id) or part.tool_call_id
        key = "error" if part.is_error else "output"
        response: dict[str, Any] = {"name": name, "response": {key: part.content}}
        google_id = recover_call_id(part.tool_call_id, origin)
        if google_id is not None:  # the id of the call it answers, as Google issued it
            response = {"id": google_id, **response}
        return {"functionResponse": response}
    return None  # thinking and calls belong to model turns


def _encode_image(part: ImagePart) -> dict[str, Any]:
    data, media_type = part.data, part.media_type
    if data is None and part.url and part.url.startswith("data:"):
        header, _, data = part.url.partition(",")
        media_type = media_type or header[5:].split(";")[0] or None
    if data is not None:
        return {"inlineData": {"mimeType": media_type or "image/png", "data": data}}
    url = part.url or ""
    mime = media_type or mimetypes.guess_type(url)[0] or "image/jpeg"
    return {"fileData": {"mimeType": mime, "fileUri": url}}
