"""The console's edges over HTTP against a real gateway: every ``/ui/`` answer is an
HTML page behind the console's security headers, errors included; a filter value out
of range is a 400; a POST must come from this very origin (scheme, host and port) as a
form; signing out ends the session on the server; the master key's guesses are
limited per peer address, the console's sign-in and the admin API's Bearer check
together, and ``X-Forwarded-For`` / ``X-Forwarded-Proto`` count only from
``server.trusted_proxies``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmbridge.accounts import request_log
from llmbridge.accounts.master_key import MASTER_KEY_FAILURES
from llmbridge.gateway.console.session import COOKIE
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer
from tests.console.conftest import MASTER, console_gateway, csrf_of, sign_in
from tests.fuzz.shapes import assert_error_shape


@pytest.fixture
def client(gateway: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=30) as c:
        yield c


def _is_console_page(reply: httpx.Response) -> None:
    """An HTML page behind the console's headers."""
    headers = reply.headers
    assert headers["content-type"].startswith("text/html"), (reply.status_code, headers)
    assert "default-src 'self'" in headers["content-security-policy"]
    assert "frame-ancestors 'none'" in headers["content-security-policy"]
    assert headers["x-frame-options"] == "DENY"
    assert headers["x-content-type-options"] == "nosniff"
    assert headers["cache-control"] == "no-store"
    assert reply.text.lstrip().startswith("<!doctype html>"), reply.text[:200]
    assert "Traceback" not in reply.text


# -- every answer an HTML page -----------------------------------------------------


def test_every_ui_error_is_an_html_page_with_the_security_headers(
    client: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    for method, path, status in [
        ("GET", "/ui/nonexistent", 404),
        ("GET", "/ui/static/nonexistent.css", 404),
        ("PUT", "/ui/keys", 405),
        ("GET", "/ui/requests/rows", 401),  # a fragment without a session
        ("POST", "/ui/keys", 401),
    ]:
        reply = client.request(method, path)
        assert reply.status_code == status, (path, reply.status_code, reply.text)
        _is_console_page(reply)
    sign_in(client)
    missing = client.get("/ui/nonexistent/deeper")
    assert missing.status_code == 404 and "/ui/nonexistent/deeper" in missing.text
    _is_console_page(missing)

    # A bug in a page (a fault injected where the request log is read): the 500 is the
    # console's page too, naming no more than the kind of failure.
    async def broken(*args: object, **kwargs: object) -> object:
        raise RuntimeError("a bug with /secret/paths in its message")

    monkeypatch.setattr(request_log, "sessions", broken)
    failed = client.get("/ui/sessions")
    assert failed.status_code == 500
    _is_console_page(failed)
    assert "/secret/paths" not in failed.text
    # The API's own errors keep their dialect (401 here: auth is on, with no key).
    api = client.get("/v1/nonexistent")
    assert api.status_code == 401 and api.headers["content-type"] == "application/json"


def test_filter_values_out_of_range_are_a_400(client: httpx.Client) -> None:
    sign_in(client)
    for query in [
        "status=99999999999999999999999",
        "status=" + "9" * 5000,
        "status=99",
        "status=600",
        "status=-1",
        "status=nonsense",
        "key=" + "k" * 201,
        "model=nul%00byte",
    ]:
        for path in ("/ui/requests", "/ui/requests/rows"):
            reply = client.get(f"{path}?{query}")
            assert reply.status_code == 400, (path, query[:40], reply.status_code)
            _is_console_page(reply)
    for query in ("status=404", "status=ok", "status=error", "status=", "key=team-a"):
        assert client.get(f"/ui/requests?{query}").status_code == 200, query
    for path in ("/ui/requests/nul%00id", "/ui/sessions/" + "s" * 5000):
        reply = client.get(path)
        assert reply.status_code in (400, 404), (path[:40], reply.status_code)
        _is_console_page(reply)


# -- where a form comes from and how it is sent -----------------------------------


def test_the_origin_must_match_scheme_host_and_port(
    client: httpx.Client, gateway: RunningServer
) -> None:
    sign_in(client)
    token = csrf_of(client.get("/ui/keys"))
    port = gateway.port
    for origin in (
        f"https://127.0.0.1:{port}",  # the scheme differs: an https page of this host
        f"http://127.0.0.1:{port + 1}",  # another port of this host
        "http://127.0.0.1",  # port 80
        f"http://127.0.0.2:{port}",
        f"http://127.0.0.1:{port}@evil.example",
        "null",
    ):
        refused = client.post(
            "/ui/keys", data={"name": "cross", "csrf": token}, headers={"Origin": origin}
        )
        assert refused.status_code == 403, (origin, refused.status_code)
        _is_console_page(refused)
        signing_in = client.post(
            "/ui/sign-in", data={"master_key": MASTER}, headers={"Origin": origin}
        )
        assert signing_in.status_code == 403, origin
    assert "cross" not in client.get("/ui/keys").text
    same = client.post(
        "/ui/keys",
        data={"name": "same-origin", "csrf": token},
        headers={"Origin": f"http://127.0.0.1:{port}"},
    )
    assert same.status_code == 201


def test_a_form_must_be_urlencoded_or_multipart(client: httpx.Client) -> None:
    sign_in(client)
    token = csrf_of(client.get("/ui/keys"))
    body = f"name=plain-text&csrf={token}"
    for content_type in ("text/plain", "application/json", "", "application/x-www-form"):
        reply = client.post("/ui/keys", content=body, headers={"Content-Type": content_type})
        assert reply.status_code == 415, (content_type, reply.status_code)
        _is_console_page(reply)
    assert "plain-text" not in client.get("/ui/keys").text
    encoded = client.post(
        "/ui/keys",
        content=body.replace("plain-text", "encoded"),
        headers={"Content-Type": "application/x-www-form-urlencoded; charset=UTF-8"},
    )
    assert encoded.status_code == 201
    multipart = client.post("/ui/keys", files={"name": (None, "multipart"), "csrf": (None, token)})
    assert multipart.status_code == 201, multipart.text
    assert "multipart" in client.get("/ui/keys").text


# -- sessions ----------------------------------------------------------------------


def test_signing_out_revokes_that_session_on_the_server(gateway: RunningServer) -> None:
    with (
        httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=30) as first,
        httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=30) as other,
    ):
        sign_in(first)
        sign_in(other)
        copied = first.cookies[COOKIE]
        out = first.post("/ui/sign-out", data={"csrf": csrf_of(first.get("/ui/keys"))})
        assert out.status_code == 303
        with httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=30) as thief:
            thief.cookies.set(COOKIE, copied, path="/ui")
            page = thief.get("/ui/keys")
            assert page.status_code == 303 and page.headers["location"] == "/ui/sign-in"
            assert thief.get("/ui/requests/rows").status_code == 401
            assert thief.post("/ui/keys", data={"name": "stolen"}).status_code == 401
            # Signing out again with the copy does nothing: it is no session.
            assert thief.post("/ui/sign-out", data={"csrf": "x"}).status_code == 401
        assert other.get("/ui/keys").status_code == 200  # another session is untouched


# -- guessing the master key ---------------------------------------------------------


def test_master_key_guesses_share_one_limit_per_peer_whatever_it_forwards(
    tmp_path: Path,
) -> None:
    with console_gateway(tmp_path) as server:
        half = MASTER_KEY_FAILURES // 2
        for attempt in range(half):
            # A different X-Forwarded-For each time: the peer is 127.0.0.1 all the same.
            forwarded = {"X-Forwarded-For": f"203.0.113.{attempt}"}
            tried = httpx.post(
                server.url + "/ui/sign-in", data={"master_key": "wrong"}, headers=forwarded
            )
            assert tried.status_code == 401
        for attempt in range(half, MASTER_KEY_FAILURES):
            wrong = {"Authorization": "Bearer wrong", "X-Forwarded-For": f"198.51.100.{attempt}"}
            assert httpx.get(server.url + "/admin/keys", headers=wrong).status_code == 401
        # Past the limit, on both, even with the right key (a guess gets no answer).
        admin = httpx.get(server.url + "/admin/keys", headers={"Authorization": f"Bearer {MASTER}"})
        assert admin.status_code == 429, admin.text
        assert "wrong master keys" in assert_error_shape(Dialect.OPENAI, 429, admin.content)
        assert int(admin.headers["retry-after"]) > 0
        console = httpx.post(server.url + "/ui/sign-in", data={"master_key": MASTER})
        assert console.status_code == 429
        assert COOKIE not in console.headers.get("set-cookie", "")
        _is_console_page(console)


def test_forwarded_headers_count_only_from_trusted_proxies(tmp_path: Path) -> None:
    # By default nothing is trusted: X-Forwarded-Proto does not make the cookie Secure.
    with console_gateway(tmp_path / "default") as server:
        reply = httpx.post(
            server.url + "/ui/sign-in",
            data={"master_key": MASTER},
            headers={"X-Forwarded-Proto": "https"},
        )
        assert reply.status_code == 303 and "secure" not in reply.headers["set-cookie"].lower()
    # From a trusted proxy (127.0.0.1 here), each forwarded client counts on its own.
    trusted = {"trusted_proxies": ["127.0.0.1"]}
    with console_gateway(tmp_path / "proxied", server=trusted) as server:
        guesser = {"X-Forwarded-For": "203.0.113.7"}
        for _ in range(MASTER_KEY_FAILURES):
            tried = httpx.post(
                server.url + "/ui/sign-in", data={"master_key": "wrong"}, headers=guesser
            )
            assert tried.status_code == 401
        held = httpx.post(server.url + "/ui/sign-in", data={"master_key": MASTER}, headers=guesser)
        assert held.status_code == 429
        someone_else = httpx.post(
            server.url + "/ui/sign-in",
            data={"master_key": MASTER},
            headers={"X-Forwarded-For": "203.0.113.8", "X-Forwarded-Proto": "https"},
        )
        assert someone_else.status_code == 303
        assert "Secure" in someone_else.headers["set-cookie"]
