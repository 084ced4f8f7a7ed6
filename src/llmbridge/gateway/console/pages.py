"""The console's sign-in, keys, backends and MCP servers pages, its static files, and
``routes`` (every ``/ui/`` route, the request-log pages of log_pages.py included).

Signing in checks the master key in constant time, through the limit it shares with
the admin API (accounts/master_key.py): a peer address that sent 10 wrong master keys
in the last minute, to either, gets 429 until the window moves on, so the form is no
way to guess the key at speed. Signing out revokes the session on the server
(web.py ``revoke_session``), not only the cookie in the browser.

Keys are created and revoked through the same ``KeyStore`` calls as the admin API
(accounts/routes.py) after the same validation (``KeyIn``): the console adds no rule of
its own. A new key is shown once, on the page that answers the creating POST (never
stored, never in a URL, ``Cache-Control: no-store``).
"""

from __future__ import annotations

import time
from importlib.resources import files

from pydantic import ValidationError
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from llmbridge.accounts.master_key import master_key_matches, peer_of
from llmbridge.accounts.routes import KeyIn, key_view
from llmbridge.core.errors import InvalidRequestError, LLMBridgeError, ServiceUnavailableError
from llmbridge.gateway.console import log_pages
from llmbridge.gateway.console.mcp_status import mcp_servers
from llmbridge.gateway.console.session import COOKIE, SESSION_S, Session, issue
from llmbridge.gateway.console.status import gateway_status
from llmbridge.gateway.console.web import (
    PREFIX,
    console_page,
    error_page,
    form_of,
    render,
    revoke_session,
    same_origin,
    secure_headers,
    session_of,
)
from llmbridge.gateway.state import GatewayState, state_of

__all__ = ["routes"]

_STATIC_TYPES = {
    "console.css": "text/css; charset=utf-8",
    "console.js": "text/javascript; charset=utf-8",
    "htmx.min.js": "text/javascript; charset=utf-8",
    "htmx.LICENSE.txt": "text/plain; charset=utf-8",
}
_STATIC = {name: (files(__package__) / "static" / name).read_bytes() for name in _STATIC_TYPES}
"""Read once at import: a handful of small files, served from memory."""


async def static(request: Request) -> Response:
    name = request.path_params["name"]
    if name not in _STATIC:
        return error_page(request, 404, f"no file {request.url.path!r} in the console")
    response = Response(_STATIC[name], media_type=_STATIC_TYPES[name])
    response.headers["cache-control"] = "public, max-age=3600"
    return secure_headers(response)


async def to_console(request: Request) -> Response:
    return secure_headers(RedirectResponse(f"{PREFIX}/", status_code=303))


async def sign_in_form(request: Request) -> Response:
    state = state_of(request)
    if state.accounts.master_key is None:
        return render(request, "no_master_key.html", status_code=503)
    if await session_of(request, state) is not None:
        return secure_headers(RedirectResponse(f"{PREFIX}/", status_code=303))
    return render(request, "sign_in.html")


async def sign_in(request: Request) -> Response:
    """Check the master key from the form; a session cookie for the right one."""
    state = state_of(request)
    accounts = state.accounts
    if accounts.master_key is None:
        return render(request, "no_master_key.html", status_code=503)
    if not same_origin(request):
        return render(request, "sign_in.html", 403, error="cross-site sign-in refused")
    try:
        form = await form_of(request)
        matches = await master_key_matches(
            accounts, form.get("master_key", "").strip(), peer_of(request)
        )
    except LLMBridgeError as exc:  # 415 not a form, 413, 429 too many wrong keys
        response = render(request, "sign_in.html", exc.status_code, error=str(exc))
        if exc.status_code == 429:
            response.headers["retry-after"] = "60"
        return response
    if not matches:
        return render(request, "sign_in.html", 401, error="that is not the master key")
    response = RedirectResponse(f"{PREFIX}/", status_code=303)
    response.set_cookie(
        COOKIE,
        issue(accounts.master_key),
        max_age=SESSION_S,
        path=PREFIX,
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )
    return secure_headers(response)


async def _sign_out(request: Request, state: GatewayState, session: Session) -> Response:
    await revoke_session(state, session)  # a copy of the cookie opens nothing either
    response = RedirectResponse(f"{PREFIX}/sign-in", status_code=303)
    response.delete_cookie(COOKIE, path=PREFIX, httponly=True, samesite="strict")
    return secure_headers(response)


async def _keys(request: Request, state: GatewayState, session: Session) -> Response:
    return await _keys_page(request, state, session)


async def _keys_page(
    request: Request,
    state: GatewayState,
    session: Session,
    *,
    error: str | None = None,
    status_code: int = 200,
    form: dict[str, str] | None = None,
) -> Response:
    keys = state.accounts.keys
    if keys is None:
        reason = state.accounts.error or "not open"
        return render(
            request,
            "keys.html",
            503,
            session,
            keys=[],
            unavailable=f"the key database is unavailable ({reason})",
            form=form or {},
        )
    try:
        records = await keys.list(log_unavailable=False)
    except ServiceUnavailableError as exc:
        state.console_outage.failed(str(exc))
        return render(request, "unavailable.html", 503, session, message=str(exc))
    except LLMBridgeError as exc:
        return render(request, "keys.html", exc.status_code, session, keys=[], error=str(exc))
    state.console_outage.answered()
    return render(
        request,
        "keys.html",
        status_code,
        session,
        keys=[key_view(r) for r in records],
        error=error,
        form=form or {},
    )


def _key_in(form: dict[str, str]) -> KeyIn:
    """The admin API's ``KeyIn`` from the form's text fields: blank is unset, models
    and MCP tools are globs separated by commas or spaces."""
    body: dict[str, object] = {"name": form.get("name", "").strip()}
    for field in ("rpm", "tpm", "max_parallel"):
        text = form.get(field, "").strip()
        if text:
            try:
                body[field] = int(text)
            except ValueError:
                raise InvalidRequestError(f"{field}: a whole number", param=field) from None
    budget = form.get("budget_usd", "").strip()
    if budget:
        try:
            body["budget_usd"] = float(budget)
        except ValueError:
            raise InvalidRequestError(
                "budget_usd: a number of dollars", param="budget_usd"
            ) from None
    for field in ("models", "mcp_tools"):
        if form.get(field, "").strip():
            body[field] = form[field].replace(",", " ").split()
    try:
        return KeyIn.model_validate(body)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(part) for part in first["loc"]) or "form"
        raise InvalidRequestError(f"{where}: {first['msg']}", param=where) from None


async def _create_key(request: Request, state: GatewayState, session: Session) -> Response:
    form: dict[str, str] = request.state.form
    keys = state.accounts.keys
    if keys is None:
        return await _keys_page(request, state, session)
    try:
        body = _key_in(form)
        record, key = await keys.create(body.name, **body.model_dump(exclude={"name"}))
    except LLMBridgeError as exc:  # 400 naming the field, 409 for a name in use, 503
        return await _keys_page(
            request, state, session, error=str(exc), status_code=exc.status_code, form=form
        )
    return render(request, "key_created.html", 201, session, record=key_view(record), key=key)


async def _revoke_key(request: Request, state: GatewayState, session: Session) -> Response:
    form: dict[str, str] = request.state.form
    keys = state.accounts.keys
    if keys is None:
        return await _keys_page(request, state, session)
    try:
        await keys.revoke(form.get("name", ""))
    except LLMBridgeError as exc:
        return await _keys_page(
            request, state, session, error=str(exc), status_code=exc.status_code
        )
    return secure_headers(RedirectResponse(f"{PREFIX}/keys", status_code=303))


async def _backends(request: Request, state: GatewayState, session: Session) -> Response:
    status = await gateway_status(state, time.time())
    return render(request, "backends.html", session=session, status=status)


async def _mcp(request: Request, state: GatewayState, session: Session) -> Response:
    servers = mcp_servers(state)
    if servers is None:
        message = "this gateway serves no MCP servers (mcp.servers is empty: docs/MCP.md)"
        return error_page(request, 404, message, session)
    workers = state.workers is not None
    return render(request, "mcp.html", session=session, servers=servers, workers=workers)


routes = [
    Route(PREFIX, to_console, methods=["GET"]),
    Route(f"{PREFIX}/static/{{name}}", static, methods=["GET"]),
    Route(f"{PREFIX}/sign-in", sign_in_form, methods=["GET"]),
    Route(f"{PREFIX}/sign-in", sign_in, methods=["POST"]),
    Route(f"{PREFIX}/sign-out", console_page(_sign_out), methods=["POST"]),
    Route(f"{PREFIX}/keys", console_page(_keys), methods=["GET"]),
    Route(f"{PREFIX}/keys", console_page(_create_key), methods=["POST"]),
    Route(f"{PREFIX}/keys/revoke", console_page(_revoke_key), methods=["POST"]),
    Route(f"{PREFIX}/backends", console_page(_backends), methods=["GET"]),
    Route(f"{PREFIX}/mcp", console_page(_mcp), methods=["GET"]),
    *log_pages.routes,
]
