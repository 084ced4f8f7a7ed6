"""The console's HTTP plumbing: templates, the security headers of every answer,
forms, error pages, and the gate every page and fragment goes through.

- **Templates**: Jinja2 with autoescape on (every value a client chose, a model or key
  name, a session id, is escaped), loaded from the package (``templates/``).
- **Headers**: a strict Content-Security-Policy (``default-src 'self'``, no inline
  script or style, no framing, forms only to this origin), ``X-Frame-Options: DENY``,
  ``nosniff``, the referrer only within this origin (``same-origin``: with
  ``no-referrer`` Chromium sends ``Origin: null`` on the console's own forms, and the
  origin check refuses them), and ``Cache-Control: no-store`` (a page may hold a key
  just created).
- **Every answer is a page**: errors included (``error_page``): a path under ``/ui/``
  that does not exist, a method it does not take, a bug (gateway/app.py sends the
  console's paths here instead of the API's JSON error), a refused form, a fragment
  without a session.
- **The gate** (``console_page``): without a master key, a page saying how to set one;
  without a valid session (session.py, and not signed out: ``session_of``), a page is a
  303 to the sign-in page and a fragment (htmx's ``HX-Request``, or a ``/ui/.../rows``
  path) or a POST a 401. A POST must come from this very origin (``same_origin``:
  ``Sec-Fetch-Site``, and ``Origin``'s scheme, host and port against the request's
  own), be a form (``application/x-www-form-urlencoded`` or ``multipart/form-data``:
  ``text/plain``, which another site's page may also send without asking, is a 415)
  and, once signed in, carry the session's CSRF token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from email.parser import BytesParser
from email.policy import HTTP
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from llmbridge.core.errors import LLMBridgeError
from llmbridge.gateway.console.session import (
    COOKIE,
    SESSION_S,
    Session,
    csrf_matches,
    read,
    revoked_key,
)
from llmbridge.gateway.console.tool_calls import tool_call
from llmbridge.gateway.state import GatewayState, state_of
from llmbridge.web.bodies import read_body

__all__ = [
    "CSP",
    "PREFIX",
    "Handler",
    "console_page",
    "error_page",
    "form_of",
    "is_console_path",
    "render",
    "revoke_session",
    "same_origin",
    "secure_headers",
    "session_of",
]

PREFIX = "/ui"
CSP = (
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'; "
    "object-src 'none'"
)
FORM_LIMIT = 64 * 1024
"""The largest form the console reads (a key's name, limits and 256 globs fit)."""
FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
"""What a console POST may be: what its own forms send."""
_FORM_FIELDS = 50

TITLES = {
    400: "Bad request",
    401: "Sign in again",
    403: "Refused",
    404: "Not found",
    405: "Method not allowed",
    408: "Too slow",
    409: "Conflict",
    413: "Too large",
    415: "Not a form",
    429: "Too many tries",
    500: "Internal error",
    503: "Unavailable",
}
"""The heading of an error page, by status."""
_DEFAULT_PORTS = {"http": 80, "https": 443}

_templates = Environment(
    loader=PackageLoader("llmbridge.gateway.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)
_templates.globals["tool_call"] = tool_call  # an MCP tool call's row, read as one

Handler = Callable[[Request, GatewayState, Session], Awaitable[Response]]


def is_console_path(path: str) -> bool:
    return path == PREFIX or path.startswith(PREFIX + "/")


def secure_headers(response: Response) -> Response:
    headers = response.headers
    headers["content-security-policy"] = CSP
    headers["x-content-type-options"] = "nosniff"
    headers["referrer-policy"] = "same-origin"
    headers["x-frame-options"] = "DENY"
    headers.setdefault("cache-control", "no-store")
    return response


def render(
    request: Request,
    template: str,
    status_code: int = 200,
    session: Session | None = None,
    **context: Any,
) -> Response:
    """``template`` rendered with ``context``, the session's CSRF token, the path and
    whether the gateway serves MCP (for the navigation), behind the security headers."""
    gateway = getattr(request.app.state, "gateway", None)
    page = _templates.get_template(template).render(
        csrf=session.csrf if session is not None else None,
        signed_in=session is not None,
        path=request.url.path,
        serves_mcp=getattr(gateway, "mcp", None) is not None,
        **context,
    )
    return secure_headers(HTMLResponse(page, status_code=status_code))


def error_page(
    request: Request,
    status_code: int,
    message: str,
    session: Session | None = None,
    headers: dict[str, str] | None = None,
) -> Response:
    """The console's page for an error: its heading (``TITLES``) and ``message``."""
    response = render(
        request,
        "error.html",
        status_code,
        session,
        title=TITLES.get(status_code, "Error"),
        message=message,
    )
    response.headers.update(headers or {})
    return response


async def session_of(request: Request, state: GatewayState) -> Session | None:
    """The request's session: its cookie valid (session.py) and not signed out."""
    session = read(state.accounts.master_key, request.cookies.get(COOKIE))
    if session is None:
        return None
    if await state.models.state.used(revoked_key(session), SESSION_S) > 0:
        return None
    return session


async def revoke_session(state: GatewayState, session: Session) -> None:
    """End ``session`` on the server: its cookie is refused from now until it would
    have expired, in every worker and replica that shares the state (Redis)."""
    await state.models.state.add(revoked_key(session), 1, SESSION_S)


def _origin(scheme: str, host: str | None, port: int | None) -> tuple[str, str, int | None]:
    scheme = scheme.lower()
    return scheme, (host or "").lower(), port if port is not None else _DEFAULT_PORTS.get(scheme)


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this very origin: ``Sec-Fetch-Site`` when
    the browser sends it, and ``Origin``'s scheme, host and port against the request's
    own (an https page of the same host, or another port of it, is another origin); a
    request with neither (a script, curl) is let through to the CSRF token, which it
    cannot have."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None:
        return True
    try:
        parts = urlsplit(origin)
        theirs = _origin(parts.scheme, parts.hostname, parts.port)
        ours = _origin(request.url.scheme, request.url.hostname, request.url.port)
    except ValueError:  # a port that is not a number, an unclosed [
        return False
    if parts.username is not None or parts.path or parts.query:
        return False  # an Origin is scheme://host[:port], nothing else
    return theirs == ours


def _cross_site(request: Request) -> str:
    """Why a POST was refused as cross-site, with what to set behind a proxy."""
    origin = request.headers.get("origin")
    if origin is None:
        return "cross-site form refused (Sec-Fetch-Site)"
    ours = f"{request.url.scheme}://{request.url.netloc}"
    return (
        f"cross-site form refused: it comes from {origin!r}, not this console's {ours!r} "
        "(behind a TLS proxy, list the proxy in server.trusted_proxies so that its "
        "X-Forwarded-Proto is believed, and have it pass the Host header as the browser "
        "sent it)"
    )


def _multipart(content_type: str, body: bytes) -> dict[str, str]:
    """A ``multipart/form-data`` body's text fields (the last of a repeated one)."""
    header = f"Content-Type: {content_type}\r\n\r\n".encode("latin-1", "replace")
    message = BytesParser(policy=HTTP).parsebytes(header + body)
    fields: dict[str, str] = {}
    if not message.is_multipart():
        return fields
    for part in list(message.iter_parts())[:_FORM_FIELDS]:
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str):
            continue
        payload = part.get_payload(decode=True)
        raw = payload if isinstance(payload, bytes) else b""
        fields[name] = raw.decode("utf-8", errors="replace")
    return fields


async def form_of(request: Request) -> dict[str, str]:
    """A form's fields as a dict (the last of a repeated field), at most
    ``FORM_LIMIT`` bytes; ``LLMBridgeError`` 415 for a body that is not a form."""
    content_type = request.headers.get("content-type", "")
    kind = content_type.split(";", 1)[0].strip().lower()
    if kind not in FORM_TYPES:
        raise LLMBridgeError(
            f"a console form is sent as {' or '.join(FORM_TYPES)}, not "
            f"{kind or 'a body without a Content-Type'}",
            status_code=415,
        )
    body = bytes(await read_body(request, FORM_LIMIT))
    if kind == "multipart/form-data":
        return _multipart(content_type, body)
    text = body.decode("utf-8", errors="replace")
    return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=_FORM_FIELDS))


def _is_fragment(request: Request) -> bool:
    return request.headers.get("hx-request") == "true" or request.url.path.endswith("/rows")


def console_page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind the gate (module docstring)."""

    async def endpoint(request: Request) -> Response:
        state = state_of(request)
        if state.accounts.master_key is None:
            return render(request, "no_master_key.html", status_code=503)
        session = await session_of(request, state)
        if session is None:
            if _is_fragment(request) or request.method != "GET":
                message = "your session has ended (signed out, expired or a new master key)"
                return error_page(request, 401, f"{message}: sign in again")
            return secure_headers(RedirectResponse(f"{PREFIX}/sign-in", status_code=303))
        if request.method == "POST":
            if not same_origin(request):
                return error_page(request, 403, _cross_site(request), session)
            try:
                form = await form_of(request)
            except LLMBridgeError as exc:
                return error_page(request, exc.status_code, str(exc), session)
            if not csrf_matches(session, form.get("csrf")):
                return error_page(request, 403, "the form's token is not valid", session)
            request.state.form = form
        return await handler(request, state, session)

    return endpoint
