"""``HotRoutes`` (web/routing.py): a POST to a hot route is served as Starlette's router
would serve it (the route's scope keys, its handler's response, the app's exception
handlers before the response starts, the catch-all left to Starlette's outermost
middleware), and everything else goes on to Starlette unchanged."""

from __future__ import annotations

from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route
from starlette.testclient import TestClient

from llmbridge.web.routing import HotRoutes, IndexedRouter

SEEN: list[dict[str, Any]] = []


class Refused(Exception):
    """An error the app has a handler for."""


async def chat(request: Request) -> Response:
    SEEN.append(
        {"route": request.scope["route"].path, "endpoint": request.scope["endpoint"] is chat}
    )
    body = await request.json()
    if body.get("refuse"):
        raise Refused("no")
    if body.get("bug"):
        raise ValueError("a bug")
    return JSONResponse({"echo": body})


async def other(request: Request) -> Response:
    return PlainTextResponse("other")


async def refused(request: Request, exc: Exception) -> Response:
    return PlainTextResponse(f"refused: {exc}", status_code=429)


async def crashed(request: Request, exc: Exception) -> Response:
    return PlainTextResponse("crashed", status_code=500)


def _app() -> Starlette:
    handlers: dict[Any, Any] = {Refused: refused, Exception: crashed}
    app = Starlette(exception_handlers=handlers)
    app.router = IndexedRouter(
        routes=[
            Route("/chat", chat, methods=["POST"]),
            Route("/other", other, methods=["POST"]),
            Route("/chat/{rest:path}", other, methods=["POST"]),
        ]
    )
    serves = {"/chat"}
    app.add_middleware(
        HotRoutes, router=app.router, handlers=handlers, serves=lambda r: r.path in serves
    )
    return app


@pytest.fixture
def client() -> TestClient:
    SEEN.clear()
    return TestClient(_app(), raise_server_exceptions=False)


def test_a_hot_route_is_served_with_the_scope_the_router_sets(client: TestClient) -> None:
    reply = client.post("/chat", json={"a": 1})
    assert (reply.status_code, reply.json()) == (200, {"echo": {"a": 1}})
    assert SEEN == [{"route": "/chat", "endpoint": True}]


def test_only_the_routes_the_app_names_are_hot() -> None:
    router = _app().router
    assert isinstance(router, IndexedRouter)
    assert set(router.hot_routes(lambda r: True)) == {"/chat", "/other"}  # no parameters
    assert set(router.hot_routes(lambda r: r.path == "/chat")) == {"/chat"}


def test_a_handled_error_is_rendered_by_its_handler(client: TestClient) -> None:
    reply = client.post("/chat", json={"refuse": True})
    assert (reply.status_code, reply.text) == (429, "refused: no")


def test_an_unhandled_error_is_left_to_the_outermost_middleware(client: TestClient) -> None:
    reply = client.post("/chat", json={"bug": True})
    assert (reply.status_code, reply.text) == (500, "crashed")


def test_other_methods_and_paths_go_on_to_starlette(client: TestClient) -> None:
    assert client.get("/chat").status_code == 405  # the route's own answer
    assert client.post("/chat/x").text == "other"
    assert client.post("/missing").status_code == 404
    assert SEEN == []
