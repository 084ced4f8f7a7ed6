"""Turn vendor deltas into neutral stream events.

Every backend stream decoder feeds what it reads (a text delta, a thinking delta, a
tool-call fragment or a whole tool call) into one ``PartsManager``, which opens,
extends and closes parts so that exactly one is open at a time. No dialect
re-implements accumulation or the start/delta/end state machine.

Tool-call fragments are told apart by ``id`` as well as ``index``, because Ollama
(and OpenAI-compatible servers in front of it) give every call of a parallel batch
index 0 (ollama/ollama#16212): a fragment whose id differs from the open call's id
starts a new call even when the index is the same.
"""

from __future__ import annotations

from typing import Any

import orjson

from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    SignatureDelta,
    StreamEvent,
    TextDelta,
    ThinkingDelta,
    ToolArgsDelta,
)
from llmbridge.core.ids import new_id
from llmbridge.core.messages import Part, TextPart, ThinkingPart, ToolCallPart
from llmbridge.core.tool_arguments import parse_tool_arguments

__all__ = ["PartsManager"]


class PartsManager:
    """Builds the part events of one response.

    Each method returns the events to emit (possibly none). Call ``finish`` once at
    the end to close the open part. ``saw_tool_call`` says whether any tool call was
    seen in the stream, which decides the ``tool_use`` stop reason however the
    backend labelled its last chunk.
    """

    __slots__ = (
        "_args",
        "_index",
        "_open",
        "_signature",
        "_text",
        "_tool_id",
        "_tool_index",
        "_tool_name",
        "parts",
        "saw_tool_call",
    )

    def __init__(self) -> None:
        self._index = -1
        self._open: str | None = None  # "text" | "thinking" | "tool_call"
        self._text: list[str] = []
        self._signature: str | None = None
        self._args: list[str] = []
        self._tool_id = ""
        self._tool_name = ""
        self._tool_index: int | None = None
        self.parts: list[Part] = []
        """Every completed part, in order."""
        self.saw_tool_call = False

    # -- text and thinking ----------------------------------------------------------

    def text(self, delta: str) -> list[StreamEvent]:
        if not delta:
            return []
        if self._open == "text":  # the hot path: every chunk after the first
            self._text.append(delta)
            return [PartDelta(self._index, TextDelta(delta))]
        events = self._switch_to("text", TextPart(""))
        self._text.append(delta)
        events.append(PartDelta(self._index, TextDelta(delta)))
        return events

    def thinking(self, delta: str) -> list[StreamEvent]:
        if not delta:
            return []
        if self._open == "thinking":
            self._text.append(delta)
            return [PartDelta(self._index, ThinkingDelta(delta))]
        events = self._switch_to("thinking", ThinkingPart(""))
        self._text.append(delta)
        events.append(PartDelta(self._index, ThinkingDelta(delta)))
        return events

    def signature(self, signature: str) -> list[StreamEvent]:
        """Attach a signature to the open thinking part (Anthropic ``signature_delta``)."""
        if not signature:
            return []
        events: list[StreamEvent] = []
        if self._open != "thinking":
            events = self._switch_to("thinking", ThinkingPart(""))
        self._signature = (self._signature or "") + signature
        events.append(PartDelta(self._index, SignatureDelta(signature)))
        return events

    # -- tool calls -----------------------------------------------------------------

    def tool_call(self, name: str, arguments: Any, call_id: str | None = None) -> list[StreamEvent]:
        """A whole tool call, as Ollama sends them."""
        args_text = arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()
        events = self._open_tool(call_id or new_id("call_"), name, None)
        events.extend(self._tool_args(args_text))
        events.extend(self._close())
        return events

    def tool_call_fragment(
        self,
        index: int | None,
        call_id: str | None,
        name: str | None,
        arguments: str | None,
    ) -> list[StreamEvent]:
        """A piece of a tool call, as OpenAI streams them (``delta.tool_calls[i]``)."""
        events: list[StreamEvent] = []
        continues = (
            self._open == "tool_call"
            and (call_id is None or call_id == self._tool_id)
            and (index is None or index == self._tool_index)
        )
        if not continues:
            events.extend(self._open_tool(call_id or new_id("call_"), name or "", index))
        elif name and not self._tool_name:
            self._tool_name = name
        if arguments:
            events.extend(self._tool_args(arguments))
        return events

    # -- end ------------------------------------------------------------------------

    def finish(self) -> list[StreamEvent]:
        """Close the open part, if any."""
        return self._close()

    # -- internals ------------------------------------------------------------------

    def _open_tool(self, call_id: str, name: str, index: int | None) -> list[StreamEvent]:
        events = self._close()
        self._index += 1
        self._open = "tool_call"
        self._tool_id, self._tool_name, self._tool_index = call_id, name, index
        self._args = []
        self.saw_tool_call = True
        events.append(PartStart(self._index, ToolCallPart(id=call_id, name=name)))
        return events

    def _tool_args(self, fragment: str) -> list[StreamEvent]:
        if not fragment:
            return []
        self._args.append(fragment)
        return [PartDelta(self._index, ToolArgsDelta(fragment))]

    def _switch_to(self, kind: str, initial: Part) -> list[StreamEvent]:
        if self._open == kind:
            return []
        events = self._close()
        self._index += 1
        self._open = kind
        self._text = []
        self._signature = None
        events.append(PartStart(self._index, initial))
        return events

    def _close(self) -> list[StreamEvent]:
        if self._open is None:
            return []
        part: Part
        if self._open == "text":
            part = TextPart("".join(self._text))
        elif self._open == "thinking":
            part = ThinkingPart("".join(self._text), signature=self._signature)
        else:
            arguments, raw = parse_tool_arguments("".join(self._args))
            part = ToolCallPart(
                id=self._tool_id, name=self._tool_name, arguments=arguments, raw_arguments=raw
            )
        self._open = None
        self.parts.append(part)
        return [PartEnd(self._index, part)]
