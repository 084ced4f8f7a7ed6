"""Keeping requests' and replies' bodies for the request log, when an operator turns it
on (``ledger.keep_bodies``; off by default): bounded, redacted, in the ``usage_bodies``
table (store/tables.py ``UsageBodyRow``), deleted after ``ledger.body_retention_days``
(accounts/rollups.py ``delete_bodies_batch``).

What is kept is the request as the gateway read it (the neutral ``ChatRequest``: the
messages, tools and parameters whatever the dialect) and the reply it gave (the neutral
``ChatResponse``, or the parts a stream had finished when it stopped), each as JSON.

- **Cut when queued.** ``BodyKeeper.keep`` renders a request's two bodies at once,
  each redacted and cut to ``max_bytes``, and queues only that text: a 5 MB prompt
  waits for the ledger's write as 16 KiB, not whole (it waited whole while the
  database was down, 5 MB a request). The work is bounded by ``max_bytes``, not by the
  body: ``render_body`` walks the neutral objects in the order their JSON has and stops
  once it has what the cut keeps (a string is cut before it is searched for
  credentials); what lies past the cut is never visited, not even to count its size
  (that alone took 24 ms of the event loop for a request of 10,000 messages). With
  keeping off the ledger has no ``BodyKeeper`` and a request does not even build the
  reply it would have kept.
- **Redacted** before it is cut: an image's base64 (an ``ImagePart``'s ``data``, a
  ``data:`` URL) becomes ``[image: N base64 characters]``; the value of any field
  named like a credential (``authorization``, ``api_key``, ``x-api-key``, ``token``,
  ``secret``, ``password``...) becomes ``[redacted]``; any text matching a key's shape
  (llmbridge's ``llmb-...``, ``sk-...``, Google's ``AIza...``, ``Bearer ...``) and any
  of the gateway's own configured keys (``secrets``) is replaced by ``[redacted]``
  wherever it appears, in a message's text too. A string cut short is searched with
  some text beyond the cut, and that margin is dropped after the search, so a key cut
  in two never shows its first half.
- **Bounded**: each body is cut to ``max_bytes`` (16 KiB by default) of UTF-8, and
  ends with ``...[cut at N bytes]`` when it was (N: ``max_bytes``; a cut body is no
  longer JSON). The bodies waiting for the next
  write hold at most ``max_pending_bytes`` (``ledger.max_pending_body_bytes``, 32 MiB
  by default), counted as their text's UTF-8 bytes and ``ENTRY_BYTES`` each
  (``pending_bytes``).
- **Best effort**: a request whose bodies do not fit in what is left of
  ``max_pending_bytes`` (the database is down, or slower than the traffic) has them
  dropped, and ``keep`` says so: its usage row is still written, with a ``bodies``
  fact saying they were not kept (gateway/exchange/record.py). A write that fails is logged
  and its bodies are dropped. Both are counted in ``dropped`` and ``on_dropped``
  (``llmbridge_kept_bodies_dropped_total``). The usage rows never wait on bodies.
"""

from __future__ import annotations

import dataclasses
import enum
import logging
import re
from collections import deque
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.store.tables import UsageBodyRow
from llmbridge.store.values import storable_text

__all__ = [
    "DEFAULT_BODY_RETENTION_DAYS",
    "DEFAULT_MAX_BODY_BYTES",
    "DEFAULT_MAX_PENDING_BODY_BYTES",
    "DROPPED_FACT",
    "ENTRY_BYTES",
    "BodyKeeper",
    "KeptBody",
    "redacted",
    "render_body",
    "write_bodies",
]

log = logging.getLogger("llmbridge.accounts")

DEFAULT_MAX_BODY_BYTES = 16 * 1024
"""Each kept body's bound (``ledger.max_body_bytes``)."""
DEFAULT_MAX_PENDING_BODY_BYTES = 32 * 1024 * 1024
"""What the bodies waiting for the next write may hold (``ledger.max_pending_body_bytes``):
some 1,000 requests' two bodies at the default 16 KiB each."""
DEFAULT_BODY_RETENTION_DAYS = 7
"""Days a kept body stays (``ledger.body_retention_days``)."""
ENTRY_BYTES = 256
"""What one waiting request costs besides its bodies' text (its tuple, id and time), so
that many tiny bodies count too."""
DROPPED_FACT = "not kept: the bodies waiting for the database held ledger.max_pending_body_bytes"
"""The ``bodies`` fact of a usage row whose bodies were dropped (``BodyKeeper.keep``)."""

USAGE_BODIES: Table = UsageBodyRow.__table__  # type: ignore[assignment]

REDACTED = "[redacted]"
REQUEST_ID_LENGTH = 64
"""``usage_bodies.request_id``'s length, as ``usage.request_id``'s."""

MAX_DEPTH = 254
"""Nesting past this is not kept (``orjson``'s own limit when it renders JSON)."""

_KEY_SHAPES = re.compile(
    r"llmb-[A-Za-z0-9_\-]{16,}"  # llmbridge's own keys (accounts/keys.py)
    r"|sk-[A-Za-z0-9_\-]{16,}"  # OpenAI's and Anthropic's (sk-ant-...)
    r"|AIza[0-9A-Za-z_\-]{30,}"  # Google's API keys
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{8,}=*"
)
"""Text shaped like an API key or a bearer credential, wherever it appears."""

SHAPE_MARGIN = 64
"""Searched beyond a cut and then dropped: longer than the shortest text each of
``_KEY_SHAPES`` matches, so a key cut in two shows neither half."""

_SECRET_FIELDS = re.compile(
    r"^(authorization|proxy-authorization|x-api-key|x-goog-api-key|api[-_]?key|apikey"
    r"|access[-_]?token|refresh[-_]?token|token|secret|client[-_]?secret|password"
    r"|cookie|set-cookie)$",
    re.IGNORECASE,
)
"""Names of fields whose value is a credential, whatever it looks like."""

_DATA_URL = re.compile(r"^data:([\w.+\-]+/[\w.+\-]+)?(;[\w\-]+=[^;,]*)*;base64,", re.IGNORECASE)

KeptBody = tuple[str, datetime, str | None, str | None]
"""``(request_id, created_at, request, reply)``: a request's bodies as they wait, each
rendered (``render_body``) or ``None``."""


def _image(value: str) -> str:
    return f"[image: {len(value)} base64 characters]"


def _redacted_text(text: str, secrets: tuple[str, ...]) -> str:
    text = _KEY_SHAPES.sub(REDACTED, text)
    for secret in secrets:
        if secret and secret in text:
            text = text.replace(secret, REDACTED)
    return text


def _is_image(value: Mapping[Any, Any]) -> bool:
    return value.get("kind") == "image" or value.get("type") in ("image", "image_url")


def redacted(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """``value`` (JSON data: dicts, lists, text, numbers) with images' base64 and
    credentials replaced (module docstring)."""
    if isinstance(value, str):
        if _DATA_URL.match(value):
            return _image(value)
        return _redacted_text(value, secrets)
    if isinstance(value, list):
        return [redacted(item, secrets) for item in value]
    if isinstance(value, dict):
        image = _is_image(value)
        out: dict[str, Any] = {}
        for key, item in value.items():
            name = str(key)
            if _SECRET_FIELDS.match(name) and item is not None:
                out[name] = REDACTED
            elif image and name == "data" and isinstance(item, str) and item:
                out[name] = _image(item)
            else:
                out[name] = redacted(item, secrets)
        return out
    return value


class _TooDeep(Exception):
    """Nested past ``MAX_DEPTH``."""


class _Cutter:
    """A neutral object (dataclasses, enums, dicts, lists, text, numbers) as JSON data,
    redacted as ``redacted`` does and cut once ``budget`` characters of it are in, in
    the order ``orjson`` renders it: what comes after the cut is never visited, and a
    string is cut before it is searched (module docstring). ``cut``: whether anything
    was left out. Values it does not know are left for ``orjson`` (``default=str``)."""

    def __init__(self, budget: int, secrets: tuple[str, ...]) -> None:
        self.left = budget
        self.secrets = secrets
        self.margin = max([SHAPE_MARGIN, *(len(s) for s in secrets)])
        self.cut = False

    def value(self, value: Any, depth: int) -> Any:
        if isinstance(value, str):
            return self._text(value)
        if depth > MAX_DEPTH:
            raise _TooDeep
        if isinstance(value, enum.Enum):
            return self.value(value.value, depth)
        if dataclasses.is_dataclass(value) and not isinstance(value, type):
            fields = {f.name: getattr(value, f.name) for f in dataclasses.fields(value)}
            return self._mapping(fields, depth)
        if isinstance(value, dict):
            return self._mapping(value, depth)
        if isinstance(value, list | tuple):
            out: list[Any] = []
            for item in value:
                if self.left <= 0:
                    self.cut = True
                    break
                self.left -= 1
                out.append(self.value(item, depth + 1))
            return out
        self.left -= 8  # a number, a boolean, null, a time...
        return value

    def _mapping(self, value: Mapping[Any, Any], depth: int) -> dict[Any, Any]:
        image = _is_image(value)
        out: dict[Any, Any] = {}
        for key, item in value.items():
            if self.left <= 0:
                self.cut = True
                break
            name = storable_text(key) if isinstance(key, str) else key
            self.left -= len(name) + 4 if isinstance(name, str) else 8
            if isinstance(name, str) and _SECRET_FIELDS.match(name) and item is not None:
                out[name] = REDACTED
            elif image and name == "data" and isinstance(item, str) and item:
                out[name] = _image(item)
            else:
                out[name] = self.value(item, depth + 1)
        return out

    def _text(self, text: str) -> str:
        if _DATA_URL.match(text):
            marker = _image(text)
            self.left -= len(marker)
            return marker
        if len(text) <= self.left:
            self.left -= len(text) + 2
            return _redacted_text(storable_text(text), self.secrets)
        # Cut: searched with a margin beyond the cut, the margin dropped after.
        self.cut = True
        head = _redacted_text(storable_text(text[: self.left + self.margin]), self.secrets)
        head = head[: max(len(head) - self.margin, 0)]
        self.left = 0
        return head


def render_body(value: object, max_bytes: int, secrets: tuple[str, ...] = ()) -> str | None:
    """``value`` (a neutral request or reply, or JSON data) as redacted JSON text cut to
    ``max_bytes`` of UTF-8 with a marker; ``None`` for ``None``. The work is bounded by
    ``max_bytes``, whatever the size of ``value`` (module docstring)."""
    if value is None:
        return None
    cutter = _Cutter(max_bytes, secrets)
    try:
        raw = orjson.dumps(cutter.value(value, 0), default=str)
    except _TooDeep:
        return "[not kept: nested too deep]"
    except (TypeError, orjson.JSONEncodeError) as exc:
        return f"[not kept: {type(exc).__name__}]"
    if not cutter.cut and len(raw) <= max_bytes:
        return storable_text(raw.decode())
    # Cut on a character boundary: a split UTF-8 sequence is dropped, not mangled.
    head = raw[:max_bytes].decode("utf-8", errors="ignore")
    return storable_text(f"{head}...[cut at {max_bytes} bytes]")


def _utf8(text: str | None) -> int:
    if text is None:
        return 0
    return len(text) if text.isascii() else len(text.encode("utf-8", errors="replace"))


class BodyKeeper:
    """The bodies waiting for the ledger's next write, bounded in bytes (module
    docstring). ``on_dropped``: told how many requests' bodies were dropped (the
    gateway's metric)."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BODY_BYTES,
        secrets: Iterable[str] = (),
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BODY_BYTES,
        on_dropped: Callable[[int], None] | None = None,
    ) -> None:
        self.max_bytes = max_bytes
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        """The gateway's own keys (static keys, the master key): redacted wherever they
        appear, the longest first (one may contain another)."""
        self.max_pending_bytes = max_pending_bytes
        self._pending: deque[KeptBody] = deque()
        self.pending_bytes = 0
        """What the waiting bodies hold: their text's UTF-8 bytes and ``ENTRY_BYTES``
        each."""
        self.dropped = 0
        """Requests whose bodies were dropped: no room while they waited, or their
        write failed."""
        self._on_dropped = on_dropped

    @property
    def pending(self) -> int:
        """Requests whose bodies wait for the next write."""
        return len(self._pending)

    def keep(self, request_id: str, created_at: datetime, request: object, reply: object) -> bool:
        """Render a request's bodies (redacted, cut: module docstring) and queue them
        for the next write; ``False`` when they did not fit in ``max_pending_bytes``
        and were dropped (counted)."""
        if self.pending_bytes + ENTRY_BYTES > self.max_pending_bytes:
            self.count_dropped(1)  # full: not even rendered
            return False
        request_text = render_body(request, self.max_bytes, self.secrets)
        reply_text = render_body(reply, self.max_bytes, self.secrets)
        size = ENTRY_BYTES + _utf8(request_text) + _utf8(reply_text)
        if self.pending_bytes + size > self.max_pending_bytes:
            self.count_dropped(1)
            return False
        kept_id = storable_text(request_id)[:REQUEST_ID_LENGTH]
        self._pending.append((kept_id, created_at, request_text, reply_text))
        self.pending_bytes += size
        return True

    def take(self) -> list[KeptBody]:
        """The bodies waiting, now the caller's to write."""
        taken, self._pending = list(self._pending), deque()
        self.pending_bytes = 0
        return taken

    def count_dropped(self, count: int) -> None:
        """``count`` requests' bodies dropped (``dropped`` and ``on_dropped``)."""
        self.dropped += count
        if self._on_dropped is not None:
            self._on_dropped(count)

    @staticmethod
    def rows(bodies: list[KeptBody]) -> list[dict[str, Any]]:
        """``bodies`` as ``usage_bodies`` rows."""
        return [
            {"request_id": request_id, "created_at": at, "request": request, "response": reply}
            for request_id, at, request, reply in bodies
        ]


async def write_bodies(writer: AsyncEngine, bodies: BodyKeeper) -> None:
    """Insert the bodies waiting into ``usage_bodies`` on ``writer`` (the database's
    write engine), best effort: a failure drops them, logged and counted (the ledger's
    rows are already written)."""
    taken = bodies.take()
    try:
        on_sqlite = writer.dialect.name == "sqlite"
        statement = (sqlite if on_sqlite else postgresql).insert(USAGE_BODIES)
        async with writer.begin() as conn:
            await conn.execute(statement.on_conflict_do_nothing(), BodyKeeper.rows(taken))
    except Exception as exc:  # noqa: BLE001 - bodies are best effort; the rows are in
        bodies.count_dropped(len(taken))
        log.warning(
            "usage ledger: %d kept bodies were not written (dropped): %s: %s",
            len(taken),
            type(exc).__name__,
            exc,
        )
