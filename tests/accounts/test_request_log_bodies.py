"""Kept bodies (accounts/kept_bodies.py): redacted (images' base64, credential
fields, key-shaped text, the gateway's own keys), bounded with a marker, written by the
real ledger with its rows, and deleted after their own retention by the ledger's
cleanup, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta

import orjson
import pytest
from sqlalchemy import func, select

from llmbridge.accounts.kept_bodies import BodyKeeper, redacted, render_body
from llmbridge.accounts.ledger import UsageLedger, UsageRecord
from llmbridge.accounts.request_log import request_detail
from llmbridge.accounts.rollups import USAGE_BODIES
from llmbridge.core.messages import ImagePart, Message, TextPart
from llmbridge.core.request import ChatRequest
from llmbridge.store import Database

OWN_KEY = "gateway-static-key-that-looks-like-nothing"


def test_images_credentials_and_keys_are_redacted() -> None:
    chat = ChatRequest(
        model="m",
        messages=(
            Message(
                role="user",
                parts=(
                    TextPart(f"use llmb-{'A' * 43} or Bearer abc.def-ghi or {OWN_KEY}"),
                    ImagePart(data="iVBORw0KGgo" * 100, media_type="image/png"),
                    ImagePart(url="data:image/jpeg;base64,/9j/4AAQSkZJRg" + "A" * 500),
                ),
            ),
        ),
        provider_details={
            "openai": {"headers": {"Authorization": "Bearer x", "x-api-key": "k"}},
            "gemini": {"api_key": "AIza" + "b" * 35, "note": "AIza" + "c" * 35},
        },
    )
    text = render_body(chat, 1 << 20, (OWN_KEY,))
    assert text is not None
    body = orjson.loads(text)
    for secret in ("llmb-AAAA", "abc.def-ghi", OWN_KEY, "AIzabbbb", "AIzacccc", "iVBORw0KGgo"):
        assert secret not in text
    parts = body["messages"][0]["parts"]
    assert parts[0]["text"] == "use [redacted] or [redacted] or [redacted]"
    assert parts[1]["data"] == "[image: 1100 base64 characters]"
    assert parts[1]["media_type"] == "image/png"  # only the bytes go
    assert parts[2]["url"].startswith("[image: ")
    headers = body["provider_details"]["openai"]["headers"]
    assert headers == {"Authorization": "[redacted]", "x-api-key": "[redacted]"}
    assert body["provider_details"]["gemini"]["api_key"] == "[redacted]"
    assert body["model"] == "m"
    # JSON data as a client sent it (an OpenAI image part) is redacted the same way.
    wire = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    assert redacted(wire)["image_url"]["url"] == "[image: 26 base64 characters]"


def test_a_body_is_cut_to_its_bound_on_a_character_boundary() -> None:
    value = {"text": "é" * 5000}  # two bytes each
    text = render_body(value, 1001)
    assert text is not None
    head, marker = text.split("...[cut: ")
    assert len(head.encode()) <= 1001 and head.endswith("é")
    assert marker == f"{len(orjson.dumps(value))} bytes in all]"
    assert render_body({"short": 1}, 1001) == '{"short":1}'
    assert render_body(None, 10) is None


@pytest.fixture
async def database(db_url: str) -> AsyncIterator[Database]:
    handle = await Database.open(db_url)
    try:
        yield handle
    finally:
        await handle.close()


async def _bodies(database: Database) -> int:
    async with database.engine.connect() as conn:
        query = select(func.count()).select_from(USAGE_BODIES)
        return int((await conn.execute(query)).scalar_one())


async def test_the_ledger_writes_kept_bodies_and_deletes_them_after_their_retention(
    database: Database,
) -> None:
    now = datetime.now(UTC)
    keeper = BodyKeeper(max_bytes=200, secrets=[OWN_KEY])
    ledger = UsageLedger(
        database, flush_interval_s=3600, bodies=keeper, body_retention_days=3, retention_days=None
    )
    old = UsageRecord("old", "m", 200, created_at=now - timedelta(days=10))
    new = UsageRecord("new", "m", 200, created_at=now)
    for record in (old, new):
        ledger.record(record)
        ledger.keep_bodies(record, {"prompt": f"key {OWN_KEY}"}, {"answer": "x" * 1000})
    assert await ledger.flush()
    assert await _bodies(database) == 2
    detail = await request_detail(database.engine, "new")
    assert detail is not None and detail.request_body == '{"prompt":"key [redacted]"}'
    assert detail.response_body is not None and detail.response_body.endswith("bytes in all]")
    assert len(detail.response_body) < 250
    # The cleanup: the body past its retention goes; the rows stay (kept for ever).
    assert await ledger.cleanup() == 0
    assert ledger.bodies_deleted == 1
    assert await _bodies(database) == 1
    assert await request_detail(database.engine, "old") is not None
    await ledger.aclose()


async def test_without_a_keeper_nothing_is_kept(database: Database) -> None:
    ledger = UsageLedger(database, flush_interval_s=3600)
    record = UsageRecord("r", "m", 200)
    ledger.record(record)
    ledger.keep_bodies(record, {"a": 1}, {"b": 2})  # a no-op
    assert await ledger.flush()
    assert await _bodies(database) == 0
    await ledger.aclose()


async def test_pending_bodies_are_bounded() -> None:
    keeper = BodyKeeper(max_pending=2)
    for n in range(5):
        keeper.keep(f"r{n}", datetime.now(UTC), {"n": n}, None)
    assert keeper.pending == 2 and keeper.dropped == 3
    assert [row["request_id"] for row in keeper.render(keeper.take())] == ["r3", "r4"]
    assert keeper.pending == 0
