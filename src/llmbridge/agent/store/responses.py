"""``ResponseStore``: the Responses API's stored responses (``POST /v1/responses`` with
``store``), read and written through ``AgentStore``'s transactions.

A row holds the conversation a response answered (every input item, a continued
response's earlier turns included, so continuing needs one lookup, never a walk back
through the chain), the output items, the usage and the rest of the response object.
Responses are **private**, like sessions (``store.access.private_to``): a key sees only
its own, and another key's response is a ``NotFoundError`` exactly like a missing one,
so an id's existence never leaks. JSON is stored through ``values.storable`` (U+0000
and unpaired surrogates become U+FFFD on both databases).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from llmbridge.agent.store.access import private_to
from llmbridge.agent.store.models import ResponseRow
from llmbridge.agent.store.records import ResponseRecord
from llmbridge.agent.store.repository import AgentStore
from llmbridge.agent.store.values import storable, storable_text
from llmbridge.core.errors import NotFoundError

__all__ = ["ResponseStore", "not_found"]


def not_found(response_id: str, *, param: str | None = None) -> NotFoundError:
    """The error for a response that is not there or not the caller's (OpenAI's
    wording; ``param`` names the field that gave the id)."""
    prefix = "Previous response" if param == "previous_response_id" else "Response"
    return NotFoundError(f"{prefix} with id {response_id!r} not found.", param=param)


class ResponseStore:
    """Stored responses on ``store``'s database."""

    def __init__(self, store: AgentStore) -> None:
        self.store = store

    async def put(
        self,
        response_id: str,
        *,
        model: str,
        created_at: datetime,
        instructions: str | None,
        input: list[Any],
        output: list[Any],
        usage: dict[str, Any] | None,
        response: dict[str, Any],
        owner: str | None = None,
    ) -> ResponseRecord:
        """Store a response; an id in use raises ``ConflictError``."""
        row = ResponseRow(
            id=response_id,
            owner=owner,
            created_at=created_at,
            model=storable_text(model),
            instructions=storable_text(instructions) if instructions is not None else None,
            input=storable(input),
            output=storable(output),
            usage=storable(usage),
            response=storable(response),
        )
        async with self.store.writing(conflict=f"response id {response_id!r} is taken") as db:
            db.add(row)
        return _record(row)

    async def find(self, response_id: str, owner: str | None = None) -> ResponseRecord | None:
        """The response, or ``None`` when it is not there or not ``owner``'s."""
        query = select(ResponseRow).where(
            ResponseRow.id == response_id, private_to(ResponseRow.owner, owner)
        )
        async with self.store.reading() as db:
            row = (await db.execute(query)).scalar_one_or_none()
            return None if row is None else _record(row)

    async def get(
        self, response_id: str, owner: str | None = None, *, param: str | None = None
    ) -> ResponseRecord:
        """The response; ``NotFoundError`` (naming ``param``) when ``find`` has none."""
        found = await self.find(response_id, owner)
        if found is None:
            raise not_found(response_id, param=param)
        return found

    async def delete(self, response_id: str, owner: str | None = None) -> None:
        """Delete the response; ``NotFoundError`` when it is not there or not ``owner``'s."""
        query = delete(ResponseRow).where(
            ResponseRow.id == response_id, private_to(ResponseRow.owner, owner)
        )
        async with self.store.writing() as db:
            result = await db.execute(query)
        if not getattr(result, "rowcount", 0):
            raise not_found(response_id)


def _record(row: ResponseRow) -> ResponseRecord:
    return ResponseRecord(
        id=row.id,
        model=row.model,
        created_at=row.created_at,
        instructions=row.instructions,
        input=list(row.input),
        output=list(row.output),
        usage=row.usage,
        response=dict(row.response),
        owner=row.owner,
    )
