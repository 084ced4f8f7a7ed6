"""Kept bodies (accounts/kept_bodies.py): redacted (images' base64, credential
fields, key-shaped text, the gateway's own keys), bounded with a marker, written by the
real ledger with its rows, and deleted after their own retention by the ledger's
cleanup, on SQLite and PostgreSQL.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import orjson
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
    head, marker = text.split("...[cut ")
    assert len(head.encode()) <= 1001 and head.endswith("é")
    assert marker == "at 1001 bytes]"
    assert render_body({"short": 1}, 1001) == '{"short":1}'
    assert render_body(None, 10) is None


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
    assert detail.response_body is not None and detail.response_body.endswith(
        "...[cut at 200 bytes]"
    )
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


def test_pending_bodies_are_bounded_in_bytes_and_a_request_past_it_is_dropped() -> None:
    dropped: list[int] = []
    keeper = BodyKeeper(max_bytes=1000, max_pending_bytes=3 * 1300, on_dropped=dropped.append)
    kept = [keeper.keep(f"r{n}", datetime.now(UTC), {"n": "x" * 5000}, None) for n in range(5)]
    # Each request's body cut to 1,000 bytes when queued: three fit, the others do not.
    assert kept == [True, True, True, False, False]
    assert keeper.pending == 3 and keeper.dropped == 2 and dropped == [1, 1]
    assert keeper.pending_bytes <= 3 * 1300
    rows = BodyKeeper.rows(keeper.take())
    assert [row["request_id"] for row in rows] == ["r0", "r1", "r2"]
    assert all(len(row["request"].encode()) <= 1000 + 40 for row in rows)
    assert keeper.pending == 0 and keeper.pending_bytes == 0
    assert keeper.keep("r5", datetime.now(UTC), {"n": 5}, None)  # room again


def test_the_cut_is_made_before_the_whole_body_is_walked_and_hides_cut_keys() -> None:
    key = "llmb-" + "K" * 43
    # 20,000 messages: the cut keeps the first few, and never visits the rest.
    chat = ChatRequest(
        model="m",
        messages=tuple(
            Message(role="user", parts=(TextPart(f"message {n} " + "y" * 100),))
            for n in range(20_000)
        ),
    )
    text = render_body(chat, 2000)
    assert text is not None and text.endswith("...[cut at 2000 bytes]")
    assert len(text.encode()) <= 2000 + 40
    assert "message 0 " in text and "message 100 " not in text
    # A key that the cut splits in two shows neither half: the text beyond the cut is
    # searched with it, and dropped.
    for at in range(1950, 2010, 7):
        body = {"text": "z" * at + key + "z" * 5000}
        cut = render_body(body, 2000)
        assert cut is not None and "KKKKKKKK" not in cut, at
    # A text whose cut leaves a whole key inside still has it redacted.
    whole = render_body({"text": key + " " + "z" * 5000}, 2000)
    assert whole is not None and whole.startswith('{"text":"[redacted] zzz')
