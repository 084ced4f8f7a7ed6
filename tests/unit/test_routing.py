"""``IndexedRouter`` (web/routing.py) picks, for every request, the route Starlette's
own scan of all routes would: checked over every route of the real gateway app (with
the agent API), for each of its methods, as a Gemini client and as any other."""

from __future__ import annotations

import re
from typing import Any

import pytest
from starlette.routing import BaseRoute, Match, Route

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import GatewayConfig
from llmbridge.web.routing import IndexedRouter

_PARAM = re.compile(r"{([^}:]+)(?::([^}]+))?}")


def _sample(param: re.Match[str]) -> str:
    if param.group(2) == "int":
        return "7"
    return "gemini-2.0-flash" if param.group(1) == "model" else "x1"


def _sample_path(route: Route) -> str:
    """``route``'s path with each parameter filled in (a model name, an id)."""
    return _PARAM.sub(_sample, route.path)


def _scope(method: str, path: str, *, gemini: bool) -> dict[str, Any]:
    headers = [(b"x-goog-api-key", b"k")] if gemini else [(b"authorization", b"Bearer k")]
    return {
        "type": "http",
        "method": method,
        "path": path,
        "root_path": "",
        "query_string": b"",
        "headers": headers,
    }


def _scanned(routes: list[BaseRoute], scope: dict[str, Any]) -> BaseRoute | None:
    """Starlette's rule: the first route in order that fully matches."""
    return next((r for r in routes if r.matches(scope)[0] is Match.FULL), None)


@pytest.fixture(scope="module")
def router(tmp_path_factory: pytest.TempPathFactory) -> IndexedRouter:
    database = tmp_path_factory.mktemp("routing") / "agent.db"
    config = GatewayConfig.model_validate(
        {
            "backends": {"scripted": {"type": "scripted"}},
            "default_backend": "scripted",
            "agent": {"enabled": True, "database": f"sqlite:///{database}"},
        }
    )
    app = create_app(config, backends={"scripted": ScriptedBackend("scripted")})
    assert isinstance(app.router, IndexedRouter)
    return app.router


def test_every_route_is_found_as_a_full_scan_finds_it(router: IndexedRouter) -> None:
    routes = list(router.routes)
    plain = [r for r in routes if isinstance(r, Route)]
    assert len(plain) > 70  # the whole gateway, not a stub
    checked = 0
    for route in plain:
        path = _sample_path(route)
        for method in sorted(route.methods or {"GET"}):
            for gemini in (False, True):
                scope = _scope(method, path, gemini=gemini)
                found = router.full_match(dict(scope))
                expected = _scanned(routes, scope)
                assert (found[0] if found else None) is expected, (method, path)
                checked += expected is not None
    assert checked > 2 * len(plain)


def test_no_full_match_is_left_to_starlette(router: IndexedRouter) -> None:
    # A 405 (a known path, another method) and a 404: Starlette's own answers.
    assert router.full_match(_scope("DELETE", "/v1/chat/completions", gemini=False)) is None
    assert router.full_match(_scope("GET", "/no/such/route", gemini=False)) is None
    # Under a proxy's root path the index steps aside.
    scope = _scope("POST", "/prefix/v1/chat/completions", gemini=False) | {"root_path": "/prefix"}
    assert router.full_match(scope) is None


def test_gemini_and_openai_share_a_path_by_client(router: IndexedRouter) -> None:
    as_openai = router.full_match(_scope("GET", "/v1/models", gemini=False))
    as_gemini = router.full_match(_scope("GET", "/v1/models", gemini=True))
    assert as_openai is not None and as_gemini is not None
    assert as_openai[0] is not as_gemini[0]
