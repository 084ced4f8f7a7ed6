"""A route handler that goes through the request's ``Exchange``: ``exchanged``.

``exchanged(endpoint, dialect)`` makes a route handler of a function that takes the
request and its ``Exchange`` (exchange.py). It opens the exchange, and finishes it with
the response's status (or, for a stream, leaves that to the stream's close): the key's
admission settled before the response goes, the ledger row, the metrics and the span
left for after it is sent (web/after_response.py), so the client does not wait on
them. It renders
an ``LLMBridgeError`` in the caller's dialect with its ``Retry-After`` and rate-limit
headers, answers a client that left with 499, and marks the handler (``EXCHANGED``) so
``tests/gateway/test_every_route_exchanged.py`` can prove no route is left out.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response

from llmbridge.core.errors import LLMBridgeError
from llmbridge.gateway.exchange.exchange import Exchange
from llmbridge.gateway.state import state_of
from llmbridge.web.after_response import leave_for_after_response
from llmbridge.web.render import Dialect, error_response
from llmbridge.web.streaming import ClientDisconnected, StreamingBody

__all__ = ["EXCHANGED", "Endpoint", "ExchangeHandler", "exchanged", "log_left_mid_body"]

log = logging.getLogger("llmbridge.gateway")

ExchangeHandler = Callable[[Request, Exchange], Awaitable[Response]]
Endpoint = Callable[[Request], Awaitable[Response]]

EXCHANGED = "__llmbridge_exchanged__"
"""The attribute ``exchanged`` sets on the route handlers it makes."""


def log_left_mid_body(request: Request) -> None:
    """One line for a client that left while sending its body (499), where a
    traceback of 80 lines used to be."""
    client = f"{request.client.host}:{request.client.port}" if request.client else "a client"
    log.info(
        "%s disconnected while sending the body of %s %s (499)",
        client,
        request.method,
        request.url.path,
    )


async def _finish(exchange: Exchange, status: int | None = None) -> None:
    """``exchange.finish``, its records left for after the response is sent where the
    app runs such work (module docstring): settled now, so the key's next request sees
    its slot and spend back."""
    if await exchange.settle(status) and not leave_for_after_response(exchange.write_records):
        exchange.write_records()


def exchanged(
    endpoint: str, dialect: Dialect | Callable[[Request], Dialect]
) -> Callable[[ExchangeHandler], Endpoint]:
    """A route handler of ``handler(request, exchange)`` (module docstring).
    ``dialect``: the caller's, or a function of the request that picks it (a path
    shared by two APIs)."""

    def wrap(handler: ExchangeHandler) -> Endpoint:
        async def endpoint_fn(request: Request) -> Response:
            caller = dialect if isinstance(dialect, Dialect) else dialect(request)
            exchange = Exchange(state_of(request), request.scope, endpoint=endpoint, dialect=caller)
            try:
                response = await handler(request, exchange)
            except ClientDisconnect:  # starlette's: the client left while sending its body
                log_left_mid_body(request)
                await _finish(exchange, 499)
                return Response(status_code=499)
            except ClientDisconnected:  # the client left before the reply was complete
                await _finish(exchange, 499)
                return Response(status_code=499)
            except LLMBridgeError as exc:
                exchange.failed(exc)
                headers = {"x-request-id": exchange.request_id, **exchange.refusal_headers(exc)}
                failed = error_response(caller, exc, exchange.request_id, headers=headers)
                exchange.mark_overhead(failed)
                await _finish(exchange)
                return failed
            except BaseException:
                await asyncio.shield(exchange.finish(500))
                raise
            exchange.replied(response)  # before finish: the ledger row has its headers
            if isinstance(response, StreamingBody) and response.on_close is not None:
                return response  # the stream's ``on_close`` finishes the exchange
            await _finish(exchange, response.status_code)
            return response

        setattr(endpoint_fn, EXCHANGED, True)
        endpoint_fn.__name__ = getattr(handler, "__name__", "endpoint")
        endpoint_fn.__doc__ = handler.__doc__
        return endpoint_fn

    return wrap
