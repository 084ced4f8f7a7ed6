"""The admin HTTP API under ``/admin/``: keys, behind the master key.

- ``GET /admin/keys``: every key (``{"object": "list", "data": [...]}``), revoked ones
  included, never a key itself (its ``prefix`` only).
- ``POST /admin/keys`` ``{"name", "rpm"?, "tpm"?, "max_parallel"?, "budget_usd"?,
  "models"?, "mcp_tools"?}``: 201 with the new key's record and, once, the key itself (``"key"``);
  400 naming the field for a value no database would store alike or a person could
  misread (a name that is not printable, more than 256 globs or one over 200
  characters, a limit past 2^31 - 1, an empty glob: accounts/key_fields.py).
- ``DELETE /admin/keys/{name}``: revoke; 200 with the record (``revoked_at`` set).
- ``GET /admin/usage?group_by=key|model|day|session&since=ISO&until=ISO&session=ID``:
  the usage ledger summed, of one client session with ``session`` (accounts/usage.py).

Every call needs ``Authorization: Bearer <master key>`` (``--master-key``,
``server.master_key``, ``LLMBRIDGE_MASTER_KEY``), compared in constant time; wrong
ones count against the peer address with the console's sign-in (accounts/master_key.py:
10 a minute, then 429 with ``Retry-After``, the right key included). With no
master key configured, ``/admin/...`` answers 404 saying how to configure one (so a
gateway that never opted in shows no admin surface). Errors are OpenAI-shaped
(``{"error": {"message", "type", "param", "code"}}``): 400 naming the field, 401, 404,
409 for a name in use, 429 past the wrong master keys' limit, 503 when the key
database is down.

The gateway mounts ``routes`` and puts its ``accounts.service.Accounts`` on
``app.state.accounts``; nothing here imports the gateway.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.accounts.keys import MAX_LIMIT, MAX_NAME, KeyRecord
from llmbridge.accounts.master_key import master_key_matches, peer_of
from llmbridge.accounts.service import Accounts
from llmbridge.accounts.usage import usage_endpoint
from llmbridge.core.errors import (
    AuthenticationError,
    InvalidRequestError,
    LLMBridgeError,
    NotFoundError,
    ServiceUnavailableError,
)
from llmbridge.web.bodies import read_json
from llmbridge.web.render import Dialect, error_response, new_request_id

__all__ = ["ADMIN_DISABLED", "admin_endpoint", "key_view", "routes"]

ADMIN_DISABLED = (
    "the admin API is off: start the gateway with --master-key, set server.master_key "
    "in the configuration or LLMBRIDGE_MASTER_KEY, then send 'Authorization: Bearer "
    "<master key>'"
)


class KeyIn(BaseModel):
    """``POST /admin/keys``'s body."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: str = Field(min_length=1, max_length=MAX_NAME)
    """Checked again by ``KeyStore.create`` (printable), as every value is: the same
    400 on SQLite and PostgreSQL, from the CLI, this API and the console."""
    rpm: int | None = Field(None, ge=1, le=MAX_LIMIT)
    """Requests per minute."""
    tpm: int | None = Field(None, ge=1, le=MAX_LIMIT)
    """Tokens per minute."""
    max_parallel: int | None = Field(None, ge=1, le=MAX_LIMIT)
    """Requests in flight at once."""
    budget_usd: float | None = Field(None, ge=0, allow_inf_nan=False)
    """Spending limit, US dollars."""
    models: list[str] | None = None
    """Globs of the public model names the key may use (absent: every model; an empty
    list or glob is a 400, never "no model"; at most 256, each at most 200 characters:
    ``KeyStore.create`` checks them)."""
    mcp_tools: list[str] | None = None
    """Globs of the MCP tool names (``<server>__<tool>``) the key may list and call
    (absent: every tool; checked as ``models`` is)."""


def key_view(record: KeyRecord) -> dict[str, Any]:
    """A key as the admin API shows it (never the key itself)."""
    return {
        "id": record.id,
        "object": "api_key",
        "name": record.name,
        "prefix": record.prefix,
        "created_at": record.created_at.isoformat(),
        "revoked_at": record.revoked_at.isoformat() if record.revoked_at else None,
        "rpm": record.rpm,
        "tpm": record.tpm,
        "max_parallel": record.max_parallel,
        "budget_usd": record.budget_usd,
        "models": list(record.models) if record.models is not None else None,
        "mcp_tools": list(record.mcp_tools) if record.mcp_tools is not None else None,
        "spent_usd": record.spent_usd,
    }


def _json(body: object, status_code: int = 200) -> Response:
    return Response(orjson.dumps(body), status_code=status_code, media_type="application/json")


def _accounts(request: Request) -> Accounts:
    accounts: Accounts = request.app.state.accounts
    return accounts


def _parse(body: Any) -> KeyIn:
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    try:
        return KeyIn.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"] if error["type"] != "extra_forbidden" else "unknown field"
        raise InvalidRequestError(f"{where or 'body'}: {message}", param=where or None) from None


Handler = Callable[[Request, Accounts], Awaitable[Response]]


def admin_endpoint(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind the master key, its errors rendered OpenAI's way."""

    async def endpoint(request: Request) -> Response:
        accounts = _accounts(request)
        try:
            if accounts.master_key is None:
                raise NotFoundError(ADMIN_DISABLED)
            # Only the Authorization header: a master key in a URL would end up in logs.
            scheme, _, value = request.headers.get("authorization", "").partition(" ")
            if scheme.lower() != "bearer" or not value.strip():
                raise AuthenticationError("missing master key: send 'Authorization: Bearer <key>'")
            if not await master_key_matches(accounts, value.strip(), peer_of(request)):
                raise AuthenticationError("invalid master key")
            if accounts.keys is None:
                raise ServiceUnavailableError(
                    f"the key database is unavailable ({accounts.error or 'not open'})"
                )
            return await handler(request, accounts)
        except LLMBridgeError as exc:
            return error_response(Dialect.OPENAI, exc, new_request_id())

    return endpoint


async def _list(request: Request, accounts: Accounts) -> Response:
    assert accounts.keys is not None
    records = await accounts.keys.list()
    return _json({"object": "list", "data": [key_view(r) for r in records]})


async def _create(request: Request, accounts: Accounts) -> Response:
    assert accounts.keys is not None
    body = _parse(await read_json(request, accounts.body_limits))
    record, key = await accounts.keys.create(
        body.name,
        rpm=body.rpm,
        tpm=body.tpm,
        max_parallel=body.max_parallel,
        budget_usd=body.budget_usd,
        models=body.models,
        mcp_tools=body.mcp_tools,
    )
    return _json({**key_view(record), "key": key}, status_code=201)


async def _revoke(request: Request, accounts: Accounts) -> Response:
    assert accounts.keys is not None
    record = await accounts.keys.revoke(request.path_params["name"])
    return _json(key_view(record))


routes = [
    Route("/admin/keys", admin_endpoint(_list), methods=["GET"]),
    Route("/admin/keys", admin_endpoint(_create), methods=["POST"]),
    Route("/admin/keys/{name:path}", admin_endpoint(_revoke), methods=["DELETE"]),
    Route("/admin/usage", admin_endpoint(usage_endpoint), methods=["GET"]),
]
