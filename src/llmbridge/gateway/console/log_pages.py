"""The console's pages over the request log: overview, requests, sessions."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.gateway.console.session import Session
from llmbridge.gateway.console.web import PREFIX, console_page, render
from llmbridge.gateway.state import GatewayState

__all__ = ["routes"]


async def _overview(request: Request, state: GatewayState, session: Session) -> Response:
    return render(request, "overview.html", session=session)


routes = [
    Route(f"{PREFIX}/", console_page(_overview), methods=["GET"]),
]
