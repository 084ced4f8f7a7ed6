"""The console's HTTP plumbing: templates, the security headers of every answer,
forms, and the gate every page and fragment goes through.

- **Templates**: Jinja2 with autoescape on (every value a client chose, a model or key
  name, a session id, is escaped), loaded from the package (``templates/``).
- **Headers**: a strict Content-Security-Policy (``default-src 'self'``, no inline
  script or style, no framing, forms only to this origin), ``nosniff``, the referrer
  only within this origin (``same-origin``: with ``no-referrer`` Chromium sends
  ``Origin: null`` on the console's own forms, and the origin check refuses them), and
  ``Cache-Control: no-store`` (a page may hold a key just created).
- **The gate** (``console_page``): without a master key, a page saying how to set one;
  without a valid session (session.py), a page is a 303 to the sign-in page and a
  fragment (htmx's ``HX-Request``, or a ``/ui/.../rows`` path) a 401. A POST must come
  from this origin (``Origin`` / ``Sec-Fetch-Site``) and, once signed in, carry the
  session's CSRF token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import parse_qsl

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response

from llmbridge.core.errors import LLMBridgeError
from llmbridge.gateway.console.session import COOKIE, Session, csrf_matches, read
from llmbridge.gateway.state import GatewayState, state_of
from llmbridge.web.bodies import read_body

__all__ = [
    "CSP",
    "PREFIX",
    "Handler",
    "console_page",
    "form_of",
    "render",
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
"""The largest form the console reads (a key's name, limits and globs fit many times)."""

_templates = Environment(
    loader=PackageLoader("llmbridge.gateway.console", "templates"),
    autoescape=select_autoescape(default=True, default_for_string=True),
    trim_blocks=True,
    lstrip_blocks=True,
)

Handler = Callable[[Request, GatewayState, Session], Awaitable[Response]]


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
    """``template`` rendered with ``context``, the session's CSRF token and the path
    (for the navigation), behind the security headers."""
    page = _templates.get_template(template).render(
        csrf=session.csrf if session is not None else None,
        signed_in=session is not None,
        path=request.url.path,
        **context,
    )
    return secure_headers(HTMLResponse(page, status_code=status_code))


def session_of(request: Request, state: GatewayState) -> Session | None:
    return read(state.accounts.master_key, request.cookies.get(COOKIE))


def same_origin(request: Request) -> bool:
    """Whether a POST comes from a page of this origin: ``Sec-Fetch-Site`` when the
    browser sends it, else ``Origin`` against ``Host``; a request with neither (a
    script, curl) is let through to the CSRF token, which it cannot have."""
    site = request.headers.get("sec-fetch-site")
    if site is not None and site not in ("same-origin", "none"):
        return False
    origin = request.headers.get("origin")
    if origin is None or origin == "null":
        return origin is None
    host = request.headers.get("host", "")
    return origin.split("://", 1)[-1] == host


async def form_of(request: Request) -> dict[str, str]:
    """An ``application/x-www-form-urlencoded`` body as a dict (the last of a repeated
    field); at most ``FORM_LIMIT`` bytes."""
    body = await read_body(request, FORM_LIMIT)
    text = bytes(body).decode("utf-8", errors="replace")
    return dict(parse_qsl(text, keep_blank_values=True, max_num_fields=50))


def _is_fragment(request: Request) -> bool:
    return request.headers.get("hx-request") == "true" or request.url.path.endswith("/rows")


def console_page(handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """``handler`` behind the gate (module docstring)."""

    async def endpoint(request: Request) -> Response:
        state = state_of(request)
        if state.accounts.master_key is None:
            return render(request, "no_master_key.html", status_code=503)
        session = session_of(request, state)
        if session is None:
            if _is_fragment(request) or request.method != "GET":
                return secure_headers(
                    Response("sign in again", status_code=401, media_type="text/plain")
                )
            return secure_headers(RedirectResponse(f"{PREFIX}/sign-in", status_code=303))
        if request.method == "POST":
            if not same_origin(request):
                return render(request, "error.html", 403, session, message="cross-site form")
            try:
                form = await form_of(request)
            except LLMBridgeError as exc:
                return render(request, "error.html", exc.status_code, session, message=str(exc))
            if not csrf_matches(session, form.get("csrf")):
                return render(
                    request, "error.html", 403, session, message="the form's token is not valid"
                )
            request.state.form = form
        return await handler(request, state, session)

    return endpoint
