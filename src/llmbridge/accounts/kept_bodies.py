"""Keeping requests' and replies' bodies for the request log, when an
operator turns it on (``ledger.keep_bodies``; off by default): bounded, redacted, in
the ``usage_bodies`` table (store/models.py ``UsageBodyRow``), deleted after
``ledger.body_retention_days`` (accounts/rollups.py ``delete_bodies_batch``).

What is kept is the request as the gateway read it (the neutral ``ChatRequest``: the
messages, tools and parameters whatever the dialect) and the reply it gave (the neutral
``ChatResponse``, or the parts a stream had finished when it stopped), each as JSON.

- **Off the request path.** A request only hands its two objects over
  (``BodyKeeper.keep``: a reference appended to a list); they are rendered in a worker
  thread when the ledger writes its batch (accounts/ledger.py), so a large body costs
  the event loop nothing. With keeping off the ledger has no ``BodyKeeper`` and a
  request does not even build the reply it would have kept.
- **Redacted** before it is cut: an image's base64 (an ``ImagePart``'s ``data``, a
  ``data:`` URL) becomes ``[image: N base64 characters]``; the value of any field
  named like a credential (``authorization``, ``api_key``, ``x-api-key``, ``token``,
  ``secret``, ``password``...) becomes ``[redacted]``; any text matching a key's shape
  (llmbridge's ``llmb-...``, ``sk-...``, Google's ``AIza...``, ``Bearer ...``) and any
  of the gateway's own configured keys (``secrets``) is replaced by ``[redacted]``
  wherever it appears, in a message's text too.
- **Bounded**: each body is cut to ``max_bytes`` (16 KiB by default) of UTF-8, and
  ends with ``...[cut: N bytes in all]`` when it was (a cut body is no longer JSON).
- **Best effort**: at most ``max_pending`` bodies wait for the next write (the oldest
  are dropped past it, while the database is down); a write that fails is logged
  and its bodies are dropped. The usage rows never wait on them.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import Table
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.ext.asyncio import AsyncEngine

from llmbridge.store.models import UsageBodyRow
from llmbridge.store.values import storable_text

__all__ = [
    "DEFAULT_BODY_RETENTION_DAYS",
    "DEFAULT_MAX_BODY_BYTES",
    "BodyKeeper",
    "KeptBody",
    "redacted",
    "render_body",
    "write_bodies",
]

log = logging.getLogger("llmbridge.accounts")

DEFAULT_MAX_BODY_BYTES = 16 * 1024
"""Each kept body's bound (``ledger.max_body_bytes``)."""
DEFAULT_BODY_RETENTION_DAYS = 7
"""Days a kept body stays (``ledger.body_retention_days``)."""

USAGE_BODIES: Table = UsageBodyRow.__table__  # type: ignore[assignment]

REDACTED = "[redacted]"
REQUEST_ID_LENGTH = 64
"""``usage_bodies.request_id``'s length, as ``usage.request_id``'s."""

_KEY_SHAPES = re.compile(
    r"llmb-[A-Za-z0-9_\-]{16,}"  # llmbridge's own keys (accounts/keys.py)
    r"|sk-[A-Za-z0-9_\-]{16,}"  # OpenAI's and Anthropic's (sk-ant-...)
    r"|AIza[0-9A-Za-z_\-]{30,}"  # Google's API keys
    r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{8,}=*"
)
"""Text shaped like an API key or a bearer credential, wherever it appears."""

_SECRET_FIELDS = re.compile(
    r"^(authorization|proxy-authorization|x-api-key|x-goog-api-key|api[-_]?key|apikey"
    r"|access[-_]?token|refresh[-_]?token|token|secret|client[-_]?secret|password"
    r"|cookie|set-cookie)$",
    re.IGNORECASE,
)
"""Names of fields whose value is a credential, whatever it looks like."""

_DATA_URL = re.compile(r"^data:([\w.+\-]+/[\w.+\-]+)?(;[\w\-]+=[^;,]*)*;base64,", re.IGNORECASE)

KeptBody = tuple[str, datetime, object, object]
"""``(request_id, created_at, request, reply)`` as a request hands it over."""


def _image(value: str) -> str:
    return f"[image: {len(value)} base64 characters]"


def redacted(value: Any, secrets: tuple[str, ...] = ()) -> Any:
    """``value`` (JSON data: dicts, lists, text, numbers) with images' base64 and
    credentials replaced (module docstring)."""
    if isinstance(value, str):
        if _DATA_URL.match(value):
            return _image(value)
        text = _KEY_SHAPES.sub(REDACTED, value)
        for secret in secrets:
            if secret and secret in text:
                text = text.replace(secret, REDACTED)
        return text
    if isinstance(value, list):
        return [redacted(item, secrets) for item in value]
    if isinstance(value, dict):
        image = value.get("kind") == "image" or value.get("type") in ("image", "image_url")
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


def render_body(value: object, max_bytes: int, secrets: tuple[str, ...] = ()) -> str | None:
    """``value`` (a neutral request or reply, or JSON data) as redacted JSON text cut to
    ``max_bytes`` of UTF-8 with a marker; ``None`` for ``None``."""
    if value is None:
        return None
    try:
        data = orjson.loads(orjson.dumps(value, default=str))
    except (TypeError, orjson.JSONEncodeError) as exc:
        return f"[not kept: {type(exc).__name__}]"
    raw = orjson.dumps(redacted(data, secrets))
    if len(raw) <= max_bytes:
        return storable_text(raw.decode())
    # Cut on a character boundary: a split UTF-8 sequence is dropped, not mangled.
    head = raw[:max_bytes].decode("utf-8", errors="ignore")
    return storable_text(f"{head}...[cut: {len(raw)} bytes in all]")


class BodyKeeper:
    """The bodies waiting for the ledger's next write (module docstring)."""

    def __init__(
        self,
        *,
        max_bytes: int = DEFAULT_MAX_BODY_BYTES,
        secrets: Iterable[str] = (),
        max_pending: int = 1000,
    ) -> None:
        self.max_bytes = max_bytes
        self.secrets = tuple(sorted({s for s in secrets if s}, key=len, reverse=True))
        """The gateway's own keys (static keys, the master key): redacted wherever they
        appear, the longest first (one may contain another)."""
        self.max_pending = max_pending
        self._pending: list[KeptBody] = []
        self.dropped = 0
        """Bodies dropped: the pending list was full, or their write failed."""

    @property
    def pending(self) -> int:
        return len(self._pending)

    def keep(self, request_id: str, created_at: datetime, request: object, reply: object) -> None:
        """Hand a request's bodies over (references only: rendered at the next write)."""
        if len(self._pending) >= self.max_pending:
            del self._pending[0]
            self.dropped += 1
        self._pending.append((request_id, created_at, request, reply))

    def take(self) -> list[KeptBody]:
        """The bodies waiting, now the caller's to write."""
        taken, self._pending = self._pending, []
        return taken

    def render(self, bodies: list[KeptBody]) -> list[dict[str, Any]]:
        """``bodies`` as ``usage_bodies`` rows (in a worker thread: this is the cost)."""
        return [
            {
                "request_id": storable_text(request_id)[:REQUEST_ID_LENGTH],
                "created_at": created_at,
                "request": render_body(request, self.max_bytes, self.secrets),
                "response": render_body(reply, self.max_bytes, self.secrets),
            }
            for request_id, created_at, request, reply in bodies
        ]


async def write_bodies(writer: AsyncEngine, bodies: BodyKeeper) -> None:
    """Render the bodies waiting (in a worker thread) and insert them into
    ``usage_bodies`` on ``writer`` (the database's write engine), best effort: a
    failure drops them, logged (the ledger's rows are already written)."""
    taken = bodies.take()
    try:
        rows = await asyncio.to_thread(bodies.render, taken)
        on_sqlite = writer.dialect.name == "sqlite"
        statement = (sqlite if on_sqlite else postgresql).insert(USAGE_BODIES)
        async with writer.begin() as conn:
            await conn.execute(statement.on_conflict_do_nothing(), rows)
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # noqa: BLE001 - bodies are best effort; the rows are in
        bodies.dropped += len(taken)
        log.warning(
            "usage ledger: %d kept bodies were not written (dropped): %s: %s",
            len(taken),
            type(exc).__name__,
            exc,
        )
