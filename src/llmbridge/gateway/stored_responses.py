"""``ResponseStore``: the Responses API's stored responses (``POST /v1/responses`` with
``store``) and the Interactions API's stored interactions, the repository of the
``responses`` table on the product's ``Database`` (store/database.py), which the gateway
opens once and hands to it. Each API (``StoredApi``: ``RESPONSES``, ``INTERACTIONS``)
has its own rows (``responses.api``) and its own words for a missing one; a store reads
only its API's (``ResponseStore.for_api``), so an interaction's id is not a response's.

A row holds the conversation a response answered (every input item, a continued
response's earlier turns included, so continuing needs one lookup, never a walk back
through the chain), the output items, the usage and the rest of the response object.
Responses are **private**, like sessions (``agent.store.access.private_to``): a key sees only
its own, and another key's response is a ``NotFoundError`` exactly like a missing one,
so an id's existence never leaks. JSON is stored through ``values.storable`` (U+0000
and unpaired surrogates become U+FFFD on both databases).

Because each row repeats the conversation before it, a ``previous_response_id`` chain
takes room that grows with the square of its turns. Each row therefore carries its
chain's running totals (``Chain``: turns, the conversation's bytes, the bytes the whole
chain stores), and ``chain`` reads just those three integers, so a continuation past
``server.limits.max_chain_bytes`` or ``max_chain_turns`` (``Chain.check_continued``) is
refused before the conversation is loaded, and before anything is stored.

Whether a gateway has them at all is ``stored_responses_on``: they are opened at its
start, on its database, whether the agent serves or not.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from sqlalchemy import delete, select

from llmbridge.agent.config import AgentConfig
from llmbridge.agent.store.access import private_to
from llmbridge.core.errors import NotFoundError
from llmbridge.core.request_limits import RequestLimits, chain_error
from llmbridge.store.database import Database
from llmbridge.store.tables import ResponseRow
from llmbridge.store.values import storable, storable_text

__all__ = [
    "INTERACTIONS",
    "RESPONSES",
    "Chain",
    "ResponseRecord",
    "ResponseStore",
    "StoredApi",
    "not_found",
    "stored_responses_on",
]


@dataclass(frozen=True, slots=True)
class StoredApi:
    """An API whose replies are stored here: the rows' ``api``, and its words."""

    name: str
    """``responses.api`` of its rows."""
    noun: str
    """What one is called in an error (``Response``, ``Interaction``)."""
    previous_field: str
    """The request field that continues one (``previous_response_id``)."""


RESPONSES = StoredApi("responses", "Response", "previous_response_id")
"""OpenAI's Responses API (``POST /v1/responses``)."""
INTERACTIONS = StoredApi("interactions", "Interaction", "previous_interaction_id")
"""Google's Interactions API (``POST /{v1beta|v1}/interactions``)."""


def stored_responses_on(agent: AgentConfig) -> bool:
    """Whether the gateway keeps stored Responses (and opens its database for them):
    unless ``agent.store_responses`` is ``off``; and, with it off, while the agent
    serves, as before the two were apart, so that responses stored earlier can still
    be read and continued. With neither, ``previous_response_id`` is the dialect's 400
    and nothing is opened for them."""
    return agent.store_responses != "off" or agent.enabled


def not_found(
    response_id: str, *, param: str | None = None, api: StoredApi = RESPONSES
) -> NotFoundError:
    """The error for a response that is not there or not the caller's (OpenAI's
    wording; ``param`` names the field that gave the id)."""
    noun = api.noun
    if param == api.previous_field:
        # A continued reply that is gone; the Responses API's has OpenAI's code, on
        # which Codex sends the whole conversation again.
        code = "previous_response_not_found" if api == RESPONSES else None
        return NotFoundError(
            f"Previous {noun.lower()} with id {response_id!r} not found.",
            param=param,
            code=code,
        )
    return NotFoundError(f"{noun} with id {response_id!r} not found.", param=param)


@dataclass(frozen=True, slots=True)
class ResponseRecord:
    """A stored Responses API response (``ResponseStore``)."""

    id: str
    model: str
    created_at: datetime
    instructions: str | None
    input: list[Any]
    """The conversation it answered: every input item, earlier turns' included."""
    output: list[Any]
    usage: dict[str, Any] | None
    response: dict[str, Any]
    """The rest of the response object (status, the echoed request fields)."""
    owner: str | None = None

    def response_object(self) -> dict[str, Any]:
        """The response object as its create request answered it."""
        return {**self.response, "output": self.output, "usage": self.usage}


@dataclass(frozen=True, slots=True)
class Chain:
    """The totals of the ``previous_response_id`` chain that ends with a stored response
    (``Chain()``: no chain, before a first response). Bytes are those of compact JSON,
    as the request and the reply were written."""

    turns: int = 0
    """Stored responses in the chain."""
    conversation_bytes: int = 0
    """The last response's conversation (its input items and output items): what a
    continuation loads, and what the next response repeats."""
    chain_bytes: int = 0
    """What every response of the chain stores, added up."""

    def check_continued(
        self, input_bytes: int, limits: RequestLimits, field: str = RESPONSES.previous_field
    ) -> None:
        """Refuse, naming ``field`` (``previous_response_id``), a continuation that would
        take the chain past ``limits``: its ``turns + 1``-th response, or one whose store
        would hold at least the conversation so far and the new ``input_bytes``."""
        turns = self.turns + 1
        if turns > limits.max_chain_turns:
            raise chain_error(
                field,
                turns,
                limits.max_chain_turns,
                "max_chain_turns",
                "stored responses",
            )
        at_least = self.chain_bytes + self.conversation_bytes + input_bytes
        if at_least > limits.max_chain_bytes:
            raise chain_error(
                field,
                at_least,
                limits.max_chain_bytes,
                "max_chain_bytes",
                "bytes",
            )

    def then(self, input_bytes: int, output_bytes: int, other_bytes: int) -> Chain:
        """The chain once a response is stored after this one: ``input_bytes`` of new
        input items, ``output_bytes`` of output items and ``other_bytes`` of the rest
        of its row (the echoed request fields, usage, instructions)."""
        conversation = self.conversation_bytes + input_bytes + output_bytes
        return Chain(
            turns=self.turns + 1,
            conversation_bytes=conversation,
            chain_bytes=self.chain_bytes + conversation + other_bytes,
        )


class ResponseStore:
    """Stored responses (or another ``StoredApi``'s replies) on ``database``."""

    def __init__(self, database: Database, api: StoredApi = RESPONSES) -> None:
        self.database = database
        self.api = api

    def for_api(self, api: StoredApi) -> ResponseStore:
        """The store of ``api``'s replies, on the same database."""
        return self if api == self.api else ResponseStore(self.database, api)

    def _where(self, response_id: str, owner: str | None) -> tuple[Any, ...]:
        """The row with ``response_id``, of this API, visible to ``owner``."""
        return (
            ResponseRow.id == response_id,
            ResponseRow.api == self.api.name,
            private_to(ResponseRow.owner, owner),
        )

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
        chain: Chain | None = None,
    ) -> ResponseRecord:
        """Store a response, the last of ``chain`` (its totals with this response
        counted; by default a chain of one that holds nothing); an id in use raises
        ``ConflictError``."""
        chain = chain or Chain(turns=1)
        row = ResponseRow(
            id=response_id,
            api=self.api.name,
            owner=owner,
            created_at=created_at,
            model=storable_text(model),
            instructions=storable_text(instructions) if instructions is not None else None,
            input=storable(input),
            output=storable(output),
            usage=storable(usage),
            response=storable(response),
            chain_turns=chain.turns,
            conversation_bytes=chain.conversation_bytes,
            chain_bytes=chain.chain_bytes,
        )
        async with self.database.writing(conflict=f"response id {response_id!r} is taken") as db:
            db.add(row)
        return _record(row)

    async def find(self, response_id: str, owner: str | None = None) -> ResponseRecord | None:
        """The response, or ``None`` when it is not there or not ``owner``'s."""
        query = select(ResponseRow).where(*self._where(response_id, owner))
        async with self.database.reading() as db:
            row = (await db.execute(query)).scalar_one_or_none()
            return None if row is None else _record(row)

    async def chain(
        self, response_id: str, owner: str | None = None, *, param: str | None = None
    ) -> Chain:
        """The totals of the chain ending with the response (three integers, not the
        conversation); ``NotFoundError`` (naming ``param``) as ``get``."""
        query = select(
            ResponseRow.chain_turns, ResponseRow.conversation_bytes, ResponseRow.chain_bytes
        ).where(*self._where(response_id, owner))
        async with self.database.reading() as db:
            found = (await db.execute(query)).one_or_none()
        if found is None:
            raise not_found(response_id, param=param, api=self.api)
        turns, conversation_bytes, chain_bytes = found
        return Chain(int(turns), int(conversation_bytes), int(chain_bytes))

    async def get(
        self, response_id: str, owner: str | None = None, *, param: str | None = None
    ) -> ResponseRecord:
        """The response; ``NotFoundError`` (naming ``param``) when ``find`` has none."""
        found = await self.find(response_id, owner)
        if found is None:
            raise not_found(response_id, param=param, api=self.api)
        return found

    async def delete(self, response_id: str, owner: str | None = None) -> None:
        """Delete the response; ``NotFoundError`` when it is not there or not ``owner``'s."""
        query = delete(ResponseRow).where(*self._where(response_id, owner))
        async with self.database.writing() as db:
            result = await db.execute(query)
        if not getattr(result, "rowcount", 0):
            raise not_found(response_id, api=self.api)


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
