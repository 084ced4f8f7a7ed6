"""Real sessions' files as ATIF trajectories, for ``profile import``.

A developer's own sessions were not run by the profiler, but their CLIs kept them:

- **Claude Code**'s transcript, ``~/.claude/projects/<project>/<session id>.jsonl``:
  one JSON object per line; ``user`` lines whose content is text are the prompts, the
  ``assistant`` lines of one API message (one line per content block, the same
  ``message.id``) are one model step (thinking, text, ``tool_use``; the message's
  ``usage``), and ``user`` lines carrying ``tool_result`` blocks are the calls' results
  (``is_error`` when they failed). Other line types (queue operations, attachments,
  request shapes, costs) say nothing a trace needs.
- **Codex**'s rollout, ``$CODEX_HOME/sessions/YYYY/MM/DD/rollout-...-<thread>.jsonl``:
  ``{"timestamp", "type", "payload"}`` lines; ``response_item`` payloads are the
  conversation (the user's ``message`` items, except the context Codex injects, are the
  prompts; ``reasoning``, the assistant's ``message`` and ``function_call`` items make
  a model step, closed by the ``token_usage_record`` of that response with its usage;
  ``function_call_output`` is a call's result, failed when it says the process exited
  with a code other than 0).

- **Gemini CLI**'s session, ``~/.gemini/tmp/<project>/chats/session-...jsonl``: a
  header line (``sessionId``, ``projectHash``), then messages by ``id`` (a message
  written again under the same id replaces the first: a ``gemini`` message is written
  before and after its tool calls ran) and ``{"$set": {"messages": [...]}}`` lines that
  restate the history when the session is resumed; ``user`` messages of text are the
  prompts (not the ``<session_context>`` one Gemini CLI adds), a ``gemini`` message is
  one model step (``thoughts``, ``content``, ``toolCalls`` with their ``result`` and
  ``status``, ``tokens``).

Each becomes an ATIF trajectory (atif.py) that ``from_atif`` turns into a record, so an
imported session is reported exactly as a profiled one. The shapes were read from the
files the pinned CLIs wrote (tests/profiler/capture_transcripts.py: Claude Code
2.1.330, Codex 0.169.0, Gemini CLI 0.61.0); a line that is not JSON, or of another
type, is skipped, never guessed at.

The lines are read as they come (any iterable of text lines: ``input_files.JsonLines``
streams a file), one at a time, and nothing of a line is kept but what its step needs,
so the work and the memory grow with the session, line by line. A line of a known type
that holds what no report can use (a value ``input_files.parse_json`` refuses, a time
out of ``atif.timestamp_ms``'s range, a field of the wrong type) is a
``TranscriptLineError`` with its line number.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Iterator
from datetime import UTC, datetime
from functools import partial
from typing import Any

from llmbridge.profiler.records.atif import ATIF_VERSION, check_time_ms, timestamp_ms
from llmbridge.profiler.records.input_files import InputValueError, parse_json, unexpected_shape

__all__ = [
    "TranscriptLineError",
    "claude_code_to_atif",
    "codex_rollout_to_atif",
    "gemini_session_to_atif",
    "otlp_lines_to_atif",
    "otlp_to_atif",
    "sniff",
]

_EXIT_CODE = re.compile(r"Process exited with code (-?\d+)")
_INJECTED = ("<environment_context>", "<user_instructions>", "<permissions", "<skills")
"""How the user-role messages Codex adds itself begin (not the user's prompts)."""


class TranscriptLineError(ValueError):
    """A line of a session file that no report can use, with its number."""

    def __init__(self, line: int, reason: str) -> None:
        super().__init__(f"line {line}: {reason}")
        self.line, self.reason = line, reason


_SHAPE_ERRORS = (KeyError, TypeError, AttributeError, ValueError)
"""What reading a field of the wrong shape raises (a ``tool_use`` block without an id,
``usage`` that is a list): the line's error, not a traceback."""


def _objects(lines: Iterable[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each line that is a JSON object, with its number (from 1, every line counted)."""
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            value = parse_json(line)
        except InputValueError as exc:
            raise TranscriptLineError(number, exc.reason) from exc
        except ValueError:
            continue
        if isinstance(value, dict):
            yield number, value


def _each(lines: Iterable[str], handle: Callable[[dict[str, Any]], None]) -> None:
    """``handle`` each JSON object of ``lines`` in turn; what it raises on a line of
    the wrong shape becomes that line's ``TranscriptLineError``."""
    for number, line in _objects(lines):
        _at(number, handle, line)


def _at(number: int, handle: Callable[[dict[str, Any]], None], value: dict[str, Any]) -> None:
    try:
        handle(value)
    except TranscriptLineError:
        raise
    except _SHAPE_ERRORS as exc:
        raise TranscriptLineError(number, unexpected_shape(exc, "a line")) from exc


def sniff(lines: list[str]) -> str | None:
    """``claude-code``, ``codex``, ``gemini-cli``, ``otlp`` (the gateway's spans, a
    collector's export a line) or ``None``: what wrote these JSON lines (the first 20
    are enough)."""
    for _, value in _objects(lines[:20]):
        if value.get("type") == "session_meta" and isinstance(value.get("payload"), dict):
            return "codex"
        if "sessionId" in value and "projectHash" in value:
            return "gemini-cli"
        if "sessionId" in value and value.get("type") in ("user", "assistant", "queue-operation"):
            return "claude-code"
        if "resourceSpans" in value:
            return "otlp"
    return None


class _Steps:
    """The ATIF steps being built: prompts, model steps, and each call's step."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []
        self.call_step: dict[str, dict[str, Any]] = {}
        self.answered: set[str] = set()
        """Calls whose result is in: a file may say it twice (Gemini CLI does)."""
        self.first_seen: dict[int, float] = {}
        self.last_seen: dict[int, float] = {}
        """Per model step (by ``id``), the time (Unix ms) of its first line and of its
        last: its duration ends there (a tool's result included, as a profiled step's
        does)."""
        self.pieces: dict[int, dict[str, list[str]]] = {}
        """Per model step (by ``id``), its text and reasoning as they came, joined once
        at the end: adding each piece to the step's string would copy it every time."""

    def touch(self, step: dict[str, Any] | None, stamp: Any) -> None:
        # Every time is checked as its line is read (timestamp_ms raises for one out of
        # range), whether or not it is kept.
        if (at := timestamp_ms(stamp)) is not None and step is not None:
            self.last_seen[id(step)] = at

    def prompt(self, text: str, stamp: Any) -> None:
        step: dict[str, Any] = {"source": "user", "message": text}
        if isinstance(stamp, str):
            timestamp_ms(stamp)
            step["timestamp"] = stamp
        self.steps.append(step)

    def model_step(self, model: str, stamp: Any) -> dict[str, Any]:
        step: dict[str, Any] = {"source": "agent", "model_name": model, "message": ""}
        if isinstance(stamp, str):
            if (at := timestamp_ms(stamp)) is not None:
                self.first_seen[id(step)] = at
            step["timestamp"] = stamp
        step["extra"] = {"llmbridge": {"failed_calls": [], "layout": [], "tokens": {}}}
        self.steps.append(step)
        return step

    @staticmethod
    def ours(step: dict[str, Any]) -> dict[str, Any]:
        """The step's ``extra.llmbridge``: what ATIF has no field for."""
        ours: dict[str, Any] = step["extra"]["llmbridge"]
        return ours

    def text(self, step: dict[str, Any], kind: str, piece: str) -> None:
        if not piece:
            return
        key = "message" if kind == "text" else "reasoning_content"
        self.pieces.setdefault(id(step), {}).setdefault(key, []).append(piece)
        self.ours(step)["layout"].append([kind, len(piece)])

    def call(self, step: dict[str, Any], call_id: str, name: str, arguments: Any) -> None:
        args = arguments if isinstance(arguments, dict) else {"value": arguments}
        step.setdefault("tool_calls", []).append(
            {"tool_call_id": call_id, "function_name": name, "arguments": args}
        )
        self.ours(step)["layout"].append(["call", call_id])
        self.call_step[call_id] = step

    def result(self, call_id: str, content: str, failed: bool, stamp: Any = None) -> None:
        step = self.call_step.get(call_id)
        if step is None or call_id in self.answered:
            return
        self.answered.add(call_id)
        self.touch(step, stamp)
        results = step.setdefault("observation", {"results": []})["results"]
        results.append({"source_call_id": call_id, "content": content})
        self.ours(step)["layout"].append(["result", call_id])
        if failed:
            self.ours(step)["failed_calls"].append(call_id)

    def usage(self, step: dict[str, Any], tokens: dict[str, int]) -> None:
        self.ours(step)["tokens"] = tokens
        step["metrics"] = {
            "prompt_tokens": tokens["input"] + tokens["cache_read"] + tokens["cache_write"],
            "completion_tokens": tokens["output"] + tokens["reasoning"],
            "cached_tokens": tokens["cache_read"],
        }

    def usage_inclusive(
        self,
        step: dict[str, Any],
        *,
        prompt: int,
        cached: int,
        output: int,
        reasoning: int,
        cache_write: int = 0,
    ) -> None:
        """``usage`` from counts where the prompt includes its cached tokens and the
        output its reasoning (OpenAI's, Gemini's and the GenAI conventions' way)."""
        self.usage(
            step,
            {
                "input": prompt - cached,
                "output": output - reasoning,
                "reasoning": reasoning,
                "cache_read": cached,
                "cache_write": cache_write,
            },
        )

    def trajectory(self, session_id: str, agent: dict[str, str]) -> dict[str, Any]:
        for step in self.steps:
            for key, pieces in self.pieces.get(id(step), {}).items():
                step[key] = "".join(pieces)
            first, last = self.first_seen.get(id(step)), self.last_seen.get(id(step))
            if step["source"] == "agent" and first is not None and last is not None:
                self.ours(step)["duration_ms"] = max(last - first, 0.0)
        numbered = [{"step_id": n, **step} for n, step in enumerate(self.steps, 1)]
        return {
            "schema_version": ATIF_VERSION,
            "session_id": session_id,
            "agent": agent,
            "steps": numbered,
        }


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _tool_result_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(b.get("text") or "") for b in content if isinstance(b, dict))
    return ""


class _ClaudeCode:
    """A Claude Code transcript read line by line (module docstring)."""

    def __init__(self) -> None:
        self.built = _Steps()
        self.session, self.version, self.model = "", "", ""
        self.current: dict[str, Any] | None = None
        self.current_id: Any = None

    def line(self, line: dict[str, Any]) -> None:
        built = self.built
        self.session = self.session or str(line.get("sessionId") or "")
        self.version = self.version or str(line.get("version") or "")
        message = line.get("message")
        if line.get("isSidechain") or line.get("isMeta") or not isinstance(message, dict):
            return
        content = message.get("content")
        if line.get("type") == "user":
            blocks = content if isinstance(content, list) else []
            results = [b for b in blocks if isinstance(b, dict) and b.get("type") == "tool_result"]
            for block in results:
                built.result(
                    str(block.get("tool_use_id")),
                    _tool_result_text(block.get("content")),
                    bool(block.get("is_error")),
                    line.get("timestamp"),
                )
            if not results:
                text = content if isinstance(content, str) else _tool_result_text(content)
                built.prompt(text, line.get("timestamp"))
                self.current, self.current_id = None, None
        elif line.get("type") == "assistant":
            self.model = str(message.get("model") or self.model)
            if self.current is None or message.get("id") != self.current_id:
                self.current = built.model_step(self.model, line.get("timestamp"))
                self.current_id = message.get("id")
            current = self.current
            built.touch(current, line.get("timestamp"))
            for block in content if isinstance(content, list) else []:
                kind = block.get("type") if isinstance(block, dict) else None
                if kind == "thinking":
                    built.text(current, "reasoning", str(block.get("thinking") or ""))
                elif kind == "text":
                    built.text(current, "text", str(block.get("text") or ""))
                elif kind == "tool_use":
                    built.call(current, str(block["id"]), str(block["name"]), block.get("input"))
            usage = message.get("usage")
            if isinstance(usage, dict):
                built.usage(
                    current,
                    {
                        "input": _count(usage.get("input_tokens")),
                        "output": _count(usage.get("output_tokens")),
                        "reasoning": 0,
                        "cache_read": _count(usage.get("cache_read_input_tokens")),
                        "cache_write": _count(usage.get("cache_creation_input_tokens")),
                    },
                )

    def trajectory(self) -> dict[str, Any]:
        agent = {
            "name": "claude-code",
            "version": self.version or "unknown",
            "model_name": self.model,
        }
        return self.built.trajectory(self.session or "claude-code-session", agent)


def claude_code_to_atif(lines: Iterable[str]) -> dict[str, Any]:
    """A Claude Code transcript as an ATIF trajectory (module docstring)."""
    reader = _ClaudeCode()
    _each(lines, reader.line)
    return reader.trajectory()


def _codex_text(item: dict[str, Any], kind: str) -> str:
    parts = item.get("content") if kind != "summary_text" else item.get("summary")
    return "".join(
        str(p.get("text") or "")
        for p in parts or []
        if isinstance(p, dict) and p.get("type") == kind
    )


class _Codex:
    """A Codex rollout read line by line (module docstring)."""

    def __init__(self) -> None:
        self.built = _Steps()
        self.session, self.version, self.model = "", "", ""
        self.current: dict[str, Any] | None = None

    def line(self, line: dict[str, Any]) -> None:
        payload = line.get("payload")
        if not isinstance(payload, dict):
            return
        kind, stamp = line.get("type"), line.get("timestamp")
        if kind == "session_meta":
            self.session = str(payload.get("id") or payload.get("session_id") or "")
            self.version = str(payload.get("cli_version") or "")
        elif kind == "turn_context":
            self.model = str(payload.get("model") or self.model)
        elif kind == "token_usage_record" and self.current is not None:
            usage = payload.get("usage") or {}
            self.built.usage_inclusive(
                self.current,
                prompt=_count(usage.get("input_tokens")),
                cached=_count(usage.get("cached_input_tokens")),
                output=_count(usage.get("output_tokens")),
                reasoning=_count(usage.get("reasoning_output_tokens")),
                cache_write=_count(usage.get("cache_write_input_tokens")),
            )
            self.current = None
        elif kind == "response_item":
            self.current = _codex_item(self.built, payload, self.current, self.model, stamp)

    def trajectory(self) -> dict[str, Any]:
        agent = {"name": "codex", "version": self.version or "unknown", "model_name": self.model}
        return self.built.trajectory(self.session or "codex-session", agent)


def codex_rollout_to_atif(lines: Iterable[str]) -> dict[str, Any]:
    """A Codex rollout file as an ATIF trajectory (module docstring)."""
    reader = _Codex()
    _each(lines, reader.line)
    return reader.trajectory()


def _codex_item(
    built: _Steps, item: dict[str, Any], current: dict[str, Any] | None, model: str, stamp: Any
) -> dict[str, Any] | None:
    """One ``response_item``; the model step it belongs to afterwards."""
    kind = item.get("type")
    if kind == "message" and item.get("role") == "user":
        text = _codex_text(item, "input_text")
        if not text.lstrip().startswith(_INJECTED):
            built.prompt(text, stamp)
        return None
    if kind == "function_call_output":
        output = item.get("output")
        text = output if isinstance(output, str) else json.dumps(output)
        code = _EXIT_CODE.search(text)
        failed = code is not None and code.group(1) != "0"
        built.result(str(item.get("call_id")), text, failed, stamp)
        return current
    if kind not in ("reasoning", "message", "function_call", "custom_tool_call"):
        return current
    if kind == "message" and item.get("role") != "assistant":
        return current
    step = current or built.model_step(model, stamp)
    built.touch(step, stamp)
    if kind == "reasoning":
        built.text(step, "reasoning", _codex_text(item, "summary_text"))
    elif kind == "message":
        built.text(step, "text", _codex_text(item, "output_text"))
    else:
        raw = item.get("arguments", item.get("input"))
        try:
            arguments = parse_json(raw) if isinstance(raw, str) else raw
        except InputValueError:
            raise
        except ValueError:  # not JSON: kept as the text it is
            arguments = raw
        built.call(step, str(item.get("call_id")), str(item.get("name")), arguments)
    return step


def _gemini_messages(lines: Iterable[str]) -> tuple[str, list[tuple[int, dict[str, Any]]]]:
    """The session id, and its messages by id in the order they first appeared, each
    as last written, with the number of the line that wrote it."""
    session = ""
    messages: dict[str, tuple[int, dict[str, Any]]] = {}

    def collect(number: int, line: dict[str, Any]) -> None:
        nonlocal session
        session = session or str(line.get("sessionId") or "")
        restated = (line.get("$set") or {}).get("messages")
        # A resumed session restates its history in the API's shape (content parts, no
        # tokens): what was written as it happened is kept over it.
        for message in restated if isinstance(restated, list) else []:
            if isinstance(message, dict) and message.get("id") and message.get("type"):
                _gemini_stamps(message)
                messages.setdefault(str(message["id"]), (number, message))
        if line.get("id") and line.get("type"):
            _gemini_stamps(line)
            messages[str(line["id"])] = (number, line)

    for number, line in _objects(lines):
        _at(number, partial(collect, number), line)
    return session, list(messages.values())


def _gemini_stamps(message: dict[str, Any]) -> None:
    """The times a message carries, checked as its line is read (a time out of range is
    that line's error; one that is not a time at all is passed over, as before)."""
    timestamp_ms(message.get("timestamp"))
    for call in message.get("toolCalls") or []:
        if isinstance(call, dict):
            timestamp_ms(call.get("timestamp"))


def _gemini_result(call: dict[str, Any]) -> tuple[str, bool]:
    """A tool call's result text, and whether it failed."""
    texts, failed = [], call.get("status") not in (None, "success")
    for part in call.get("result") or []:
        response = ((part or {}).get("functionResponse") or {}).get("response") or {}
        if response.get("error"):
            failed = True
            texts.append(str(response["error"]))
        elif "output" in response:
            texts.append(str(response["output"]))
    return "\n".join(texts), failed


def gemini_session_to_atif(lines: Iterable[str]) -> dict[str, Any]:
    """A Gemini CLI session file as an ATIF trajectory (module docstring)."""
    built = _Steps()
    session, messages = _gemini_messages(lines)
    model = ""

    def convert(message: dict[str, Any]) -> None:
        nonlocal model
        model = _gemini_message(built, message, model)

    for number, message in messages:
        _at(number, convert, message)
    agent = {"name": "gemini-cli", "version": "unknown", "model_name": model}
    return built.trajectory(session or "gemini-cli-session", agent)


def _gemini_message(built: _Steps, message: dict[str, Any], model: str) -> str:
    """One Gemini CLI message into ``built``; the session's model afterwards."""
    stamp = message.get("timestamp")
    content = message.get("content")
    if message.get("type") == "user":
        listed = content if isinstance(content, list) else [{"text": content}]
        parts: list[dict[str, Any]] = [p for p in listed if isinstance(p, dict)]
        for part in parts:
            response = part.get("functionResponse")
            if isinstance(response, dict):
                text, failed = _gemini_result({"result": [part]})
                built.result(str(response.get("id")), text, failed, stamp)
        text = "".join(str(p.get("text") or "") for p in parts)
        if text and not text.startswith("<session_context>"):
            built.prompt(text, stamp)
    elif message.get("type") == "gemini":
        model = str(message.get("model") or model)
        step = built.model_step(model, stamp)
        built.touch(step, stamp)
        for thought in message.get("thoughts") or []:
            built.text(step, "reasoning", str((thought or {}).get("description") or ""))
        built.text(step, "text", content if isinstance(content, str) else "")
        for part in content if isinstance(content, list) else []:  # the API's shape
            call = part.get("functionCall") if isinstance(part, dict) else None
            if isinstance(call, dict):
                built.call(step, str(call.get("id")), str(call.get("name")), call.get("args"))
            elif isinstance(part, dict):
                kind = "reasoning" if part.get("thought") else "text"
                built.text(step, kind, str(part.get("text") or ""))
        for call in message.get("toolCalls") or []:
            call_id = str(call.get("id"))
            built.call(step, call_id, str(call.get("name")), call.get("args"))
            text, failed = _gemini_result(call)
            built.result(call_id, text, failed, call.get("timestamp"))
        tokens = message.get("tokens") or {}
        # Gemini's input counts the cached tokens; its output leaves out the thoughts.
        thoughts = _count(tokens.get("thoughts"))
        built.usage_inclusive(
            step,
            prompt=_count(tokens.get("input")),
            cached=_count(tokens.get("cached")),
            output=_count(tokens.get("output")) + thoughts,
            reasoning=thoughts,
        )
    return model


_INTEGER = re.compile(r"-?\d{1,19}")


def _otlp_int(value: Any) -> int:
    """An OTLP/JSON integer: a number, or (int64, uint64) its digits as a string."""
    if isinstance(value, str) and _INTEGER.fullmatch(value):
        return int(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    raise InputValueError(f"{value!r} is not an OTLP integer")


def _otlp_value(value: Any) -> Any:
    """An OTLP/JSON ``AnyValue`` as a Python value (int64s come as strings)."""
    if not isinstance(value, dict):
        return None
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return _otlp_int(value["intValue"])
    if "arrayValue" in value:
        return [_otlp_value(v) for v in (value["arrayValue"] or {}).get("values") or []]
    return None


def _nanos(value: Any) -> int:
    """A span's start or end (Unix nanoseconds), checked: a time out of range is the
    line's error, as a transcript's is."""
    nanos = _otlp_int(value) if value not in (None, "") else 0
    check_time_ms(nanos / 1e6)
    return nanos


def _otlp_spans(export: dict[str, Any]) -> Iterator[dict[str, Any]]:
    """The requests the gateway served in one export (``_server_span``), each with its
    attributes and its resource's as plain dicts and its times as numbers."""
    for resource_spans in export.get("resourceSpans") or []:
        resource = {
            a.get("key"): _otlp_value(a.get("value"))
            for a in (resource_spans.get("resource") or {}).get("attributes") or []
        }
        for scope in resource_spans.get("scopeSpans") or []:
            for span in scope.get("spans") or []:
                attributes = {
                    a.get("key"): _otlp_value(a.get("value")) for a in span.get("attributes") or []
                }
                span = {**span, "attributes": attributes, "resource": resource}
                if _server_span(span):
                    span["startTimeUnixNano"] = _nanos(span.get("startTimeUnixNano"))
                    span["endTimeUnixNano"] = _nanos(span.get("endTimeUnixNano"))
                    status = span.get("status")
                    span["status"] = status.get("code") if isinstance(status, dict) else None
                    yield span


def _server_span(span: dict[str, Any]) -> bool:
    """A request the gateway served: a SERVER span (kind 2, by number or by name) with a
    GenAI operation."""
    kind = span.get("kind")
    server = kind in (2, "SPAN_KIND_SERVER")
    return server and "gen_ai.operation.name" in span["attributes"]


def otlp_lines_to_atif(lines: Iterable[str]) -> list[dict[str, Any]]:
    """``otlp_to_atif`` of a file of OTLP/JSON lines, one export a line, read as they
    come: only the requests' spans are kept; a line that is not an export is an error."""
    spans: list[dict[str, Any]] = []

    def collect(export: dict[str, Any]) -> None:
        if "resourceSpans" not in export:
            raise InputValueError("not OTLP/JSON spans (no resourceSpans)")
        spans.extend(_otlp_spans(export))

    _each(lines, collect)
    return _otlp_sessions(spans)


def otlp_to_atif(exports: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
    """The gateway's request spans (OTLP/JSON ``ExportTraceServiceRequest`` objects, as
    a collector's file exporter writes them) as one ATIF trajectory per client session
    (``session.id``; a request without one is a session of its own). Each request is
    an agent step with its model, tokens and time; the spans carry no prompt or reply,
    so the steps have no text, and one user step says so. A request whose span ended
    in an error (status code 2) is an error step, and fails the session."""
    return _otlp_sessions([span for export in exports for span in _otlp_spans(export)])


def _otlp_sessions(spans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The requests' spans (``_otlp_spans``) as one trajectory per client session."""
    sessions: dict[str, list[dict[str, Any]]] = {}
    for span in spans:
        key = str(span["attributes"].get("session.id") or f"trace-{span.get('traceId')}")
        sessions.setdefault(key, []).append(span)
    trajectories = []
    for session, requests in sessions.items():
        requests.sort(key=lambda s: int(s["startTimeUnixNano"]))
        built = _Steps()
        built.prompt("(the gateway's spans carry no prompts)", None)
        version = ""
        for span in requests:
            a = span["attributes"]
            version = version or str(span["resource"].get("service.version") or "")
            model = str(a.get("gen_ai.response.model") or a.get("gen_ai.request.model") or "")
            start = span["startTimeUnixNano"] / 1e6
            stamp = datetime.fromtimestamp(start / 1000, UTC).isoformat().replace("+00:00", "Z")
            step = built.model_step(model, stamp)
            ours = built.ours(step)
            ours["duration_ms"] = span["endTimeUnixNano"] / 1e6 - start
            built.usage_inclusive(
                step,
                prompt=_count(a.get("gen_ai.usage.input_tokens")),
                cached=_count(a.get("gen_ai.usage.cache_read.input_tokens")),
                output=_count(a.get("gen_ai.usage.output_tokens")),
                reasoning=_count(a.get("gen_ai.usage.reasoning.output_tokens")),
                cache_write=_count(a.get("gen_ai.usage.cache_creation.input_tokens")),
            )
            if span["status"] in (2, "STATUS_CODE_ERROR"):
                error = str(a.get("error.type") or "error")
                ours["layout"].append(["error", f"{span.get('name')}: {error}"])
        agent = {
            "name": "llmbridge-gateway",
            "version": version or "unknown",
            "model_name": str(requests[0]["attributes"].get("gen_ai.request.model") or ""),
        }
        trajectories.append(built.trajectory(session, agent))
    return trajectories
