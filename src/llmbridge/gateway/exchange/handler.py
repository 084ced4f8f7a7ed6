"""A route handler that goes through the request's ``Exchange``: ``exchanged``.

``exchanged(endpoint, dialect)`` makes a route handler of a function that takes the
request and its ``Exchange`` (exchange.py). It opens the exchange, and finishes it with
the response's status (or, for a stream, leaves that to the stream's close); it renders
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
                await exchange.finish(499)
                return Response(status_code=499)
            except ClientDisconnected:  # the client left before the reply was complete
                await exchange.finish(499)
                return Response(status_code=499)
            except LLMBridgeError as exc:
                exchange.failed(exc)
                headers = {"x-request-id": exchange.request_id, **exchange.refusal_headers(exc)}
                failed = error_response(caller, exc, exchange.request_id, headers=headers)
                exchange.mark_overhead(failed)
                await exchange.finish()
                return failed
            except BaseException:
                await asyncio.shield(exchange.finish(500))
                raise
            exchange.replied(response)  # before finish: the ledger row has its headers
            if not (isinstance(response, StreamingBody) and response.on_close is not None):
                await exchange.finish(response.status_code)  # a stream's ``on_close`` does
            return response

        setattr(endpoint_fn, EXCHANGED, True)
        endpoint_fn.__name__ = getattr(handler, "__name__", "endpoint")
        endpoint_fn.__doc__ = handler.__doc__
        return endpoint_fn

    return wrap
