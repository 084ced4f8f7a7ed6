"""One prompt's OpenCode events as neutral stream events, and when the turn is over.

OpenCode reports a reply as events on its ``/event`` stream (shapes verified against
1.18.33, see shared/reference/opencode-server.md): ``message.updated`` for each
message (the user's, then one assistant message per LLM step, with ``tokens``,
``finish`` and ``error``), ``message.part.updated`` for each part (its type, and its
full text once done) and ``message.part.delta`` for streamed text. The turn is over
when ``session.status`` turns ``idle``, with ``session.idle`` as a backup (OpenCode
has sent each twice); ``session.error`` is a failure. Nothing is polled.

Text and reasoning stream as OpenCode produces them. A part's final text is compared
with what its deltas delivered, and any missing tail is sent, so a provider that does
not stream (or a lost delta) still yields the whole reply. Permission and question
requests are collected for the backend to reject: OpenCode runs no tools for us.

A failure OpenCode reports carries its verdict on retrying as
``BackendError.retryable`` (``isRetryable`` on a provider's API error; no for every
other failure), so the serving layer retries exactly the failures OpenCode would.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    ContextLengthError,
    LLMBridgeError,
)
from llmbridge.core.events import ResponseEnd, StreamEvent
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.response import StopReason, Usage

__all__ = ["Turn", "as_dict", "opencode_error"]

log = logging.getLogger("llmbridge.opencode")

_STOP_REASONS = {
    "stop": StopReason.END_TURN,
    "length": StopReason.MAX_TOKENS,
    "content-filter": StopReason.CONTENT_FILTER,
}


def opencode_error(error: Any, backend: str) -> LLMBridgeError | None:
    """An OpenCode ``error`` object as a gateway error (``None``: not a failure).
    A ``BackendError`` is retryable only when OpenCode marked it ``isRetryable``."""
    if not isinstance(error, dict):
        return None
    name = str(error.get("name") or "UnknownError")
    data = as_dict(error.get("data"))
    message = str(data.get("message") or error.get("message") or name)
    if name == "MessageOutputLengthError":
        return None  # the reply hit its length limit: a stop reason, not a failure
    if name == "APIError":
        status = data.get("statusCode")
        retryable = bool(data.get("isRetryable"))
        if isinstance(status, int) and status >= 400:
            return BackendHTTPError(
                f"backend '{backend}': OpenCode's model provider returned HTTP {status}: {message}",
                backend_status=status,
                backend=backend,
                retryable=retryable,
            )
        return BackendError(
            f"backend '{backend}': OpenCode's model call failed: {message}",
            backend=backend,
            retryable=retryable,
        )
    if name == "ContextOverflowError":
        return ContextLengthError(f"OpenCode: {message}")
    if name == "ProviderAuthError":
        provider = data.get("providerID", "?")
        return BackendError(
            f"backend '{backend}': OpenCode's provider '{provider}' rejected its "
            f"credentials: {message}",
            backend=backend,
            retryable=False,
        )
    if name == "MessageAbortedError":
        return BackendError(
            f"backend '{backend}': OpenCode aborted the reply", backend=backend, retryable=False
        )
    return BackendError(
        f"backend '{backend}': OpenCode reported {name}: {message}",
        backend=backend,
        retryable=False,
    )


@dataclass(slots=True)
class _Part:
    kind: str
    message_id: str
    sent: str = ""


@dataclass(slots=True)
class Turn:
    """The state of one prompt, fed the session's events in order."""

    backend: str
    parts: PartsManager = field(default_factory=PartsManager)
    done: bool = False
    failure: LLMBridgeError | None = None
    retry_message: str | None = None
    """OpenCode's last "retrying the provider" message (shown if the turn times out)."""
    retry_report: bool = False
    """Whether the last event fed was such a report: no sign of progress, so it does
    not hold off the backend's idle deadline."""
    to_reject: list[tuple[str, str]] = field(default_factory=list)
    """``("permission" | "question", request id)`` for the backend to refuse."""
    produced: bool = False
    """Whether any text or reasoning has been emitted."""
    _assistant: dict[str, dict[str, Any]] = field(default_factory=dict)
    _user_messages: set[str] = field(default_factory=set)
    _parts: dict[str, _Part] = field(default_factory=dict)
    _length_stop: bool = False

    def feed(self, event: dict[str, Any]) -> list[StreamEvent]:
        self.retry_report = False
        kind = event.get("type")
        props = event.get("properties")
        if not isinstance(props, dict):
            return []
        if kind == "message.part.delta":
            return self._delta(props)
        if kind == "message.part.updated":
            return self._part_updated(props.get("part"))
        if kind == "message.updated":
            self._message_updated(props.get("info"))
        elif kind == "session.status":
            self._status(props.get("status"))
        elif kind == "session.idle":
            self.done = True
        elif kind == "session.error":
            self.failure = self.failure or opencode_error(props.get("error"), self.backend)
            self.done = True
        elif kind in ("permission.asked", "question.asked") and isinstance(props.get("id"), str):
            self.to_reject.append((kind.partition(".")[0], props["id"]))
        return []

    def finish(self) -> list[StreamEvent]:
        """The closing events once the turn is done without a failure."""
        events = self.parts.finish()
        events.append(ResponseEnd(stop_reason=self.stop_reason(), usage=self.usage()))
        return events

    def stop_reason(self) -> StopReason:
        if self._length_stop:
            return StopReason.MAX_TOKENS
        finishes = [info.get("finish") for info in self._assistant.values()]
        last = next((f for f in reversed(finishes) if isinstance(f, str)), "stop")
        return _STOP_REASONS.get(last, StopReason.END_TURN)

    def usage(self) -> Usage:
        """The tokens of every step of the turn (each step is its own message)."""
        totals = {"input": 0, "output": 0, "read": 0, "write": 0}
        seen = False
        for info in self._assistant.values():
            tokens = info.get("tokens")
            if not isinstance(tokens, dict):
                continue
            seen = True
            cache = as_dict(tokens.get("cache"))
            totals["input"] += _int(tokens.get("input"))
            totals["output"] += _int(tokens.get("output")) + _int(tokens.get("reasoning"))
            totals["read"] += _int(cache.get("read"))
            totals["write"] += _int(cache.get("write"))
        if not seen:
            return Usage()
        # OpenCode's ``input`` leaves out cache reads and writes (Session.getUsage), as
        # Anthropic's does; the core's input_tokens count them in.
        return Usage(
            input_tokens=totals["input"] + totals["read"] + totals["write"],
            output_tokens=totals["output"],
            cache_read_input_tokens=totals["read"] or None,
            cache_creation_input_tokens=totals["write"] or None,
        )

    # -- event handlers -------------------------------------------------------------

    def _message_updated(self, info: Any) -> None:
        if not isinstance(info, dict) or not isinstance(info.get("id"), str):
            return
        if info.get("role") == "user":
            self._user_messages.add(info["id"])
            return
        if info.get("role") != "assistant":
            return
        self._assistant[info["id"]] = info
        error = info.get("error")
        if isinstance(error, dict) and error.get("name") == "MessageOutputLengthError":
            self._length_stop = True
        elif (failure := opencode_error(error, self.backend)) is not None:
            self.failure = self.failure or failure

    def _status(self, status: Any) -> None:
        if not isinstance(status, dict):
            return
        if status.get("type") == "idle":
            self.done = True
        elif status.get("type") == "retry":
            self.retry_report = True
            self.retry_message = str(status.get("message") or "")
            log.info(
                "backend %s: OpenCode is retrying its provider (attempt %s): %s",
                self.backend,
                status.get("attempt"),
                self.retry_message,
            )

    def _part_updated(self, part: Any) -> list[StreamEvent]:
        if not isinstance(part, dict):
            return []
        pid, mid, kind = part.get("id"), part.get("messageID"), part.get("type")
        if not (isinstance(pid, str) and isinstance(mid, str) and isinstance(kind, str)):
            return []
        if mid in self._user_messages:
            return []
        state = self._parts.get(pid)
        if state is None:
            state = self._parts[pid] = _Part(kind, mid)
        if kind == "tool":
            # Tools are off on every prompt; a server that runs one anyway is named.
            log.warning(
                "backend %s: OpenCode reported a tool part (%s) despite tools being off",
                self.backend,
                part.get("tool"),
            )
            return []
        text = part.get("text")
        if kind in ("text", "reasoning") and isinstance(text, str) and text.startswith(state.sent):
            return self._emit(state, text[len(state.sent) :])
        return []

    def _delta(self, props: dict[str, Any]) -> list[StreamEvent]:
        pid, mid, delta = props.get("partID"), props.get("messageID"), props.get("delta")
        if props.get("field") != "text" or not isinstance(delta, str):
            return []
        if not (isinstance(pid, str) and isinstance(mid, str)) or mid in self._user_messages:
            return []
        state = self._parts.get(pid)
        if state is None:  # a delta before its part: OpenCode sends text deltas only
            state = self._parts[pid] = _Part("text", mid)
        return self._emit(state, delta)

    def _emit(self, state: _Part, text: str) -> list[StreamEvent]:
        if not text or state.kind not in ("text", "reasoning"):
            return []
        state.sent += text
        self.produced = True
        if state.kind == "reasoning":
            return self.parts.thinking(text)
        return self.parts.text(text)


def as_dict(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one (OpenCode's shapes vary)."""
    return value if isinstance(value, dict) else {}


def _int(value: Any) -> int:
    return value if isinstance(value, int) and value > 0 else 0
