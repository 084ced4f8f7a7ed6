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
"""

from __future__ import annotations

from typing import Any

from starlette.routing import BaseRoute, Match, Route, Router
from starlette.types import Receive, Scope, Send

__all__ = ["IndexedRouter"]


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
        scope.update(child_scope)
        await route.handle(scope, receive, send)
