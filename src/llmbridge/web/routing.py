"""Route lookup by path: ``IndexedRouter``.

Starlette's router tries each route's regular expression in order until one matches.
The gateway has 76 routes (five dialects, the agent and admin APIs), and OpenAI's
chat route sits behind every Ollama and Gemini one: that scan was about
3% of a request's CPU (profiled). ``IndexedRouter`` keeps, for each path a
route names exactly, the routes that could match it, in their order: those routes,
and every route with path parameters whose text before the first parameter begins the
path (and any mount). Scanning that short list finds the same first full match as
scanning them all, because a parameterless route matches only its own path, and a
route with parameters only paths that begin with its literal prefix (a route class may
narrow ``matches``, as Gemini's does, never widen it).
Anything else (no full match: a 404, a 405, a trailing-slash redirect; the lifespan)
is Starlette's own scan, unchanged.

``HotRoutes`` serves the POST routes that are the first candidate for their exact path
and that the app names (the gateway's: every route of the model API, each dialect's chat
and token count) without Starlette's exception middleware, router, route and request
wrapper, each of which made a ``Request``, a closure or a regular-expression match for
every request: about 3% of a small request's CPU (measured against the tree without it).
What it does instead is what they did for such a route: the route's scope keys set, the
route's handler called, the exception handlers the app was given (but the catch-all
``Exception``, which Starlette leaves to its outermost middleware) for what the handler
raises before its response starts.
"""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route, Router, WebSocketRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["HotRoutes", "IndexedRouter"]

Handler = Callable[[Request, Exception], Awaitable[Response]]


def _exact_path(route: BaseRoute) -> str | None:
    """The one path ``route`` matches, or ``None`` when it has parameters (or is not a
    plain route: a mount, a websocket route)."""
    if isinstance(route, Route) and not route.param_convertors:
        return route.path
    return None


def _could_match(route: BaseRoute, path: str) -> bool:
    """Whether ``route`` could fully match ``path``: a parameterless route only its own
    path, a route with parameters only paths that begin with its text before the first
    parameter; anything else (a mount) is always tried."""
    exact = _exact_path(route)
    if exact is not None:
        return exact == path
    if isinstance(route, Route):
        return path.startswith(route.path.partition("{")[0])
    return True


class IndexedRouter(Router):
    """A Starlette ``Router`` that looks up a request's candidate routes by its path
    (module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._indexed = -1
        """How many routes the index was built from (routes are only ever added)."""
        self._by_path: dict[str, tuple[BaseRoute, ...]] = {}
        self._parametrised: tuple[BaseRoute, ...] = ()

    def _index(self) -> None:
        """(Re)build the index from the routes as they are now."""
        parametrised = tuple(r for r in self.routes if _exact_path(r) is None)
        by_path: dict[str, tuple[BaseRoute, ...]] = {}
        for path in {p for r in self.routes if (p := _exact_path(r)) is not None}:
            by_path[path] = tuple(r for r in self.routes if _could_match(r, path))  # in order
        self._by_path, self._parametrised = by_path, parametrised
        self._indexed = len(self.routes)

    def full_match(self, scope: Scope) -> tuple[BaseRoute, Scope] | None:
        """The first route that fully matches the request ``scope`` and its child
        scope, looked up by path; ``None`` when none does, or for a scope the index
        does not resolve (not HTTP; served under a root path, a proxy's prefix)."""
        if scope["type"] != "http" or scope.get("root_path"):
            return None
        if self._indexed != len(self.routes):  # built on first use, again if routes were added
            self._index()
        for route in self._by_path.get(scope["path"], self._parametrised):
            match, child_scope = route.matches(scope)
            if match is Match.FULL:
                return route, child_scope
        return None

    async def app(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.full_match(scope)
        if found is None:  # a 404, a 405, a redirect, the lifespan: Starlette's scan
            await super().app(scope, receive, send)
            return
        route, child_scope = found
        scope.setdefault("router", self)
        scope["route"] = route  # as Starlette's scan sets it (metrics labels read it)
        scope.update(child_scope)
        await route.handle(scope, receive, send)

    def hot_routes(self, serves: Callable[[Route], bool]) -> dict[str, Route]:
        """The POST routes ``HotRoutes`` may serve, by path: each the first candidate
        for its exact path, so the first full match of any POST to that path; a plain
        ``Route`` (no subclass narrowing its match) of an async function that
        ``serves`` takes."""
        if self._indexed != len(self.routes):
            self._index()
        hot: dict[str, Route] = {}
        for path, candidates in self._by_path.items():
            # A WebSocket route matches no HTTP request.
            http = [c for c in candidates if not isinstance(c, WebSocketRoute)]
            first = http[0] if http else None
            if (
                type(first) is Route
                and first.methods
                and "POST" in first.methods
                and inspect.iscoroutinefunction(first.endpoint)
                and serves(first)
            ):
                hot[path] = first
        return hot


class HotRoutes:
    """The innermost middleware: a POST to a hot route's path served here (module
    docstring), anything else passed on to Starlette's exception middleware and router."""

    def __init__(
        self,
        app: ASGIApp,
        router: IndexedRouter,
        handlers: Mapping[Any, Handler],
        serves: Callable[[Route], bool],
    ) -> None:
        self.app = app
        self.router = router
        self._serves = serves
        self._routes: dict[str, Route] | None = None
        # Starlette's exception middleware renders these; the catch-all is its
        # outermost middleware's, which renders it and re-raises it to the server's log.
        self._handlers = {k: v for k, v in handlers.items() if k is not Exception and k != 500}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        routes = self._routes
        if routes is None:  # built on the first request: every route is added by then
            routes = self._routes = self.router.hot_routes(self._serves)
        route = None
        if scope["type"] == "http" and scope["method"] == "POST" and not scope.get("root_path"):
            route = routes.get(scope["path"])
        if route is None:
            await self.app(scope, receive, send)
            return
        scope.setdefault("router", self.router)
        scope["route"], scope["endpoint"], scope["path_params"] = route, route.endpoint, {}
        request = Request(scope, receive, send)
        started = False

        async def sender(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            response = await route.endpoint(request)
            await response(scope, receive, sender)
        except Exception as exc:
            handler = self._handler_for(exc)
            if handler is None:
                raise
            if started:
                raise RuntimeError("a handled exception after the response started") from exc
            await (await handler(request, exc))(scope, receive, sender)
            exc.__traceback__ = None  # a reused exception would gather tracebacks

    def _handler_for(self, exc: Exception) -> Handler | None:
        for cls in type(exc).__mro__:
            handler = self._handlers.get(cls)
            if handler is not None:
                return handler
        return None
