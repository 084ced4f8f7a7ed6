"""What a request's database key may see: ``visible_models``, the models its globs
allow (the auth middleware put the request's ``KeyRecord`` in the scope, ``ACCOUNT``;
``None`` for a static key or with auth off: every model then).

A key's limits on the request path are checked and settled by the request's
``Exchange`` (gateway/exchange.py), for every route.
"""

from __future__ import annotations

from starlette.requests import Request

from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.service import ACCOUNT
from llmbridge.core.model_info import ModelInfo

__all__ = ["account_of", "visible_models"]


def account_of(request: Request) -> KeyRecord | None:
    record = request.scope.get(ACCOUNT)
    return record if isinstance(record, KeyRecord) else None


def visible_models(request: Request, models: list[ModelInfo]) -> list[ModelInfo]:
    """``models`` a request's key may use (all of them without a database key, or for
    a key with no ``models`` globs): model lists show only what would be served."""
    record = account_of(request)
    if record is None or record.models is None:
        return models
    return [info for info in models if record.allows(info.name)]
