"""The request log read from a test, as a gateway's ledger wrote it: its newest rows
once there are enough, and one request's detail (kept bodies included), each through a
fresh engine on the database's URL (the gateway under test holds its own)."""

from __future__ import annotations

import asyncio

from llmbridge.accounts.request_log import RequestDetail, RequestRow, recent_requests
from llmbridge.accounts.request_log import request_detail as detail_of
from llmbridge.store import make_engine
from tests.waiting import wait_until


def logged_rows(db_url: str, count: int) -> list[RequestRow]:
    """The newest rows once there are ``count`` (a bounded wait: the ledger writes
    every second)."""
    found: list[RequestRow] = []

    async def read() -> list[RequestRow]:
        engine = make_engine(db_url)
        try:
            return (await recent_requests(engine)).rows
        finally:
            await engine.dispose()

    def written() -> bool:
        found[:] = asyncio.run(read())
        return len(found) >= count

    wait_until(written, f"{count} rows in the request log")
    return found


def logged_detail(db_url: str, request_id: str) -> RequestDetail | None:
    """``request_id``'s detail as the request log has it now (``None``: not written)."""

    async def read() -> RequestDetail | None:
        engine = make_engine(db_url)
        try:
            return await detail_of(engine, request_id)
        finally:
            await engine.dispose()

    return asyncio.run(read())
