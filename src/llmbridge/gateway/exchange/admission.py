"""What a request's key may do, read before the request is served: the pieces of
admission the ``Exchange`` (exchange.py) and the model lists use.

- ``account_of``: the request's database key (the auth middleware put its
  ``KeyRecord`` in the scope, ``ACCOUNT``; ``None`` for a static key or with auth off);
- ``caller_key``: the key as the usage ledger and the span name it;
- ``visible_models``: the models its globs allow, so a model list shows only what
  would be served;
- ``worst_case_cost``: what a call could cost at most, the reservation against the
  key's budget (``RESERVE_OUTPUT_TOKENS`` of output for a request that sets no
  ``max_tokens``);
- ``refusal_headers``: ``Retry-After`` and the rate-limit headers of a refusal.

The limits themselves are checked, and settled when the request ends, in one
shared-state step each (accounts/limits.py), by the request's ``Exchange``, for every
route.
"""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.types import Scope

from llmbridge.accounts.keys import KeyRecord
from llmbridge.accounts.limits import KeyLimitError, limit_headers
from llmbridge.accounts.prices import PriceTable
from llmbridge.accounts.service import ACCOUNT
from llmbridge.core.errors import LLMBridgeError
from llmbridge.core.model_info import ModelInfo
from llmbridge.web.auth import KEY_IDENTITY
from llmbridge.web.render import Dialect

__all__ = [
    "RESERVE_OUTPUT_TOKENS",
    "account_of",
    "caller_key",
    "refusal_headers",
    "visible_models",
    "worst_case_cost",
]

RESERVE_OUTPUT_TOKENS = 4096
"""The output a budget reservation assumes for a request that sets no ``max_tokens``
(docs/DEPLOY.md, "Budgets")."""


def account_of(scope: Scope) -> KeyRecord | None:
    """The request's database key (``None``: a static key or auth off)."""
    record = scope.get(ACCOUNT)
    return record if isinstance(record, KeyRecord) else None


def caller_key(scope: Scope) -> tuple[str | None, str | None]:
    """The key a request came with, as the ledger names it: ``(id, name)``. A
    database key by its id and name, a static key as ``static:<identity prefix>``
    (it has no row), no auth as nothing."""
    account: Any = scope.get(ACCOUNT)
    if account is not None:
        return getattr(account, "id", None), getattr(account, "name", None)
    identity = scope.get(KEY_IDENTITY)
    if isinstance(identity, str):
        return None, f"static:{identity[:12]}"
    return None, None


def visible_models(request: Request, models: list[ModelInfo]) -> list[ModelInfo]:
    """``models`` a request's key may use (all of them without a database key, or for
    a key with no ``models`` globs): model lists show only what would be served."""
    record = account_of(request.scope)
    if record is None or record.models is None:
        return models
    return [info for info in models if record.allows(info.name)]


def worst_case_cost(
    record: KeyRecord,
    prices: PriceTable,
    model: str,
    prompt_tokens: int,
    max_output_tokens: int | None,
) -> float:
    """What a call to ``model`` could cost at most, reserved against ``record``'s
    budget (nothing for a key without one, or a model without a price)."""
    if record.budget_usd is None:
        return 0.0
    price = prices.price(model)
    if price is None:
        return 0.0
    output = RESERVE_OUTPUT_TOKENS if max_output_tokens is None else max_output_tokens
    output_price = max(price.output, price.reasoning or 0.0)
    return (prompt_tokens * price.input + max(output, 0) * output_price) * 1e-6


def refusal_headers(error: LLMBridgeError, dialect: Dialect) -> dict[str, str]:
    """``Retry-After`` and the rate-limit headers of a refusal in ``dialect`` (none
    for a 403)."""
    if isinstance(error, KeyLimitError):
        return limit_headers(dialect, error.requests, error.tokens, error.retry_after)
    return {}
