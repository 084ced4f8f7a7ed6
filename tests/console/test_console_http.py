"""The console over HTTP against a real gateway (gateway/console/): what it refuses
(no session, a forged, altered, expired or other-key cookie, a wrong master key, a POST
without its CSRF token or from another site), the page without a master key, the
cookie's attributes, and that the master key is in no page, header or log line.
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmbridge.accounts.master_key import MASTER_KEY_FAILURES
from llmbridge.gateway.console.session import COOKIE, issue
from tests.conftest import RunningServer
from tests.console.conftest import MASTER, console_gateway, csrf_of, sign_in
from tests.waiting import scaled, serving, wait_until

PAGES = ("/ui/", "/ui/requests", "/ui/sessions", "/ui/keys", "/ui/backends")


@pytest.fixture
def client(gateway: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, follow_redirects=False, timeout=30) as c:
        yield c


def _refused(client: httpx.Client) -> None:
    """Every page redirects to the sign-in page, every fragment and POST is a 401."""
    for page in PAGES:
        reply = client.get(page)
        assert reply.status_code == 303, (page, reply.status_code)
        assert reply.headers["location"] == "/ui/sign-in"
    rows = client.get("/ui/requests/rows")
    assert rows.status_code == 401
    fragment = client.get("/ui/requests", headers={"HX-Request": "true"})
    assert fragment.status_code == 401
    created = client.post("/ui/keys", data={"name": "intruder", "csrf": "x"})
    assert created.status_code == 401


def test_without_a_session_pages_redirect_and_fragments_are_401(client: httpx.Client) -> None:
    _refused(client)


@pytest.mark.parametrize(
    "cookie",
    [
        "forged",
        "djE6MTo5OTk5OTk5OTk5OmFiYw.c2lnbmF0dXJl",  # a well-formed payload, a made-up signature
        issue("another master key"),
        issue(MASTER, now=time.time() - 13 * 3600),  # signed, but expired an hour ago
    ],
    ids=["garbage", "forged-signature", "other-master-key", "expired"],
)
def test_a_bad_session_cookie_is_refused(client: httpx.Client, cookie: str) -> None:
    client.cookies.set(COOKIE, cookie, path="/ui")
    _refused(client)


def test_an_altered_cookie_is_refused(client: httpx.Client) -> None:
    payload, _, signature = issue(MASTER).partition(".")
    longer = issue(MASTER, lifetime_s=10 * 365 * 86400).partition(".")[0]
    client.cookies.set(COOKIE, f"{longer}.{signature}", path="/ui")  # extended, old signature
    _refused(client)
    assert payload != longer


def test_a_wrong_master_key_signs_nobody_in(client: httpx.Client) -> None:
    for wrong in ("", "wrong", MASTER + "x", MASTER[:-1]):
        reply = sign_in(client, wrong)
        assert reply.status_code == 401
        assert COOKIE not in reply.headers.get("set-cookie", "")
        assert "not the master key" in reply.text
    _refused(client)


def test_signing_in_sets_a_strict_expiring_cookie_and_signing_out_ends_it(
    client: httpx.Client,
) -> None:
    reply = sign_in(client)
    assert reply.status_code == 303
    assert reply.headers["location"] == "/ui/"
    cookie = reply.headers["set-cookie"]
    attributes = {part.strip().split("=")[0].lower() for part in cookie.split(";")}
    assert {"httponly", "max-age", "path", "samesite"} <= attributes
    assert "Path=/ui" in cookie and "SameSite=strict" in cookie
    assert "secure" not in attributes  # plain http: the browser would drop a Secure cookie
    assert MASTER not in cookie
    for page in PAGES:
        shown = client.get(page)
        assert shown.status_code == 200, page
        assert shown.headers["cache-control"] == "no-store"
        assert "default-src 'self'" in shown.headers["content-security-policy"]
        assert "unsafe-inline" not in shown.headers["content-security-policy"]
    out = client.post("/ui/sign-out", data={"csrf": csrf_of(client.get("/ui/keys"))})
    assert out.status_code == 303
    assert "Max-Age=0" in out.headers["set-cookie"]
    _refused(client)


def test_the_cookie_is_secure_over_https(tmp_path: Path) -> None:
    # A TLS proxy in front, on 127.0.0.1, listed in server.trusted_proxies: its
    # X-Forwarded-Proto is believed (tests/console/test_console_hardening.py: only then).
    with console_gateway(tmp_path, server={"trusted_proxies": ["127.0.0.1"]}) as server:
        reply = httpx.post(
            server.url + "/ui/sign-in",
            data={"master_key": MASTER},
            headers={"X-Forwarded-Proto": "https"},
        )
    assert reply.status_code == 303
    assert "Secure" in reply.headers["set-cookie"]


def test_a_post_needs_the_session_token_and_this_origin(client: httpx.Client) -> None:
    sign_in(client)
    token = csrf_of(client.get("/ui/keys"))
    wrong = token[:-1] + ("1" if token.endswith("0") else "0")  # one character changed
    for data in ({"name": "no-token"}, {"name": "wrong-token", "csrf": wrong}):
        assert client.post("/ui/keys", data=data).status_code == 403
    elsewhere = client.post(
        "/ui/keys",
        data={"name": "cross-site", "csrf": token},
        headers={"Origin": "https://evil.example", "Sec-Fetch-Site": "cross-site"},
    )
    assert elsewhere.status_code == 403
    listed = client.get("/ui/keys").text
    assert all(name not in listed for name in ("no-token", "wrong-token", "cross-site"))
    # Another session's token is no good either.
    with httpx.Client(base_url=str(client.base_url), follow_redirects=False) as other:
        sign_in(other)
        assert (
            client.post(
                "/ui/keys", data={"name": "x", "csrf": csrf_of(other.get("/ui/keys"))}
            ).status_code
            == 403
        )
    created = client.post("/ui/keys", data={"name": "with-token", "csrf": token})
    assert created.status_code == 201


def test_a_key_is_created_with_the_admin_apis_checks_and_shown_once(
    client: httpx.Client, gateway: RunningServer
) -> None:
    sign_in(client)
    token = csrf_of(client.get("/ui/keys"))
    bad = client.post("/ui/keys", data={"name": "limits", "rpm": "0", "csrf": token})
    assert bad.status_code == 400
    assert "rpm" in bad.text
    made = client.post(
        "/ui/keys",
        data={
            "name": "once",
            "rpm": "60",
            "budget_usd": "2.5",
            "models": "scripted, gpt-*",
            "csrf": token,
        },
    )
    assert made.status_code == 201
    key = made.text.split('id="new-key" class="secret">')[1].split("<")[0]
    assert key.startswith("llmb-")
    again = client.post("/ui/keys", data={"name": "once", "csrf": token})
    assert again.status_code == 409  # the name is in use: the store's own check
    listed = client.get("/ui/keys").text
    assert "once" in listed and key not in listed and key[:12] in listed
    admin = httpx.get(
        gateway.url + "/admin/keys", headers={"Authorization": f"Bearer {MASTER}"}
    ).json()["data"]
    record = next(k for k in admin if k["name"] == "once")
    assert record["rpm"] == 60 and record["budget_usd"] == 2.5
    assert record["models"] == ["scripted", "gpt-*"]


def test_without_a_master_key_the_console_says_how_to_set_one(tmp_path: Path) -> None:
    with console_gateway(tmp_path, master=None) as server:
        for page in ("/ui/", "/ui/sign-in", "/ui/keys"):
            reply = httpx.get(server.url + page, follow_redirects=True)
            assert reply.status_code == 503
            assert "--master-key" in reply.text and "LLMBRIDGE_MASTER_KEY" in reply.text
        tried = httpx.post(server.url + "/ui/sign-in", data={"master_key": "anything"})
        assert tried.status_code == 503
        assert COOKIE not in tried.headers.get("set-cookie", "")


def _cookie_after_signing_in(url: str) -> str:
    with httpx.Client(base_url=url, follow_redirects=False) as client:
        sign_in(client)
        return client.cookies[COOKIE]


def _client_with(url: str, cookie: str) -> httpx.Client:
    client = httpx.Client(base_url=url, follow_redirects=False, timeout=30)
    client.cookies.set(COOKIE, cookie, path="/ui")
    return client


def test_a_new_master_key_ends_every_session(tmp_path: Path) -> None:
    with console_gateway(tmp_path) as first:
        cookie = _cookie_after_signing_in(first.url)
    with (
        console_gateway(tmp_path, master="a-new-master-key") as second,
        _client_with(second.url, cookie) as client,
    ):
        _refused(client)
    with (  # the same master key again: the session holds
        console_gateway(tmp_path) as third,
        _client_with(third.url, cookie) as client,
    ):
        assert client.get("/ui/keys").status_code == 200


def test_serve_logs_no_key(tmp_path: Path) -> None:
    """``llmbridge serve --access-log --master-key``: the master key, right or wrong,
    is in no line of the output, access log included. (A session signed by one process
    is good in another with the same master key: the third gateway of
    ``test_a_new_master_key_ends_every_session``, as for ``--workers N``.)"""
    config = tmp_path / "llmbridge.yaml"
    config.write_text(
        "backends: {scripted: {type: scripted}}\n"
        "default_backend: scripted\n"
        f"agent: {{database: '{tmp_path / 'llmbridge.db'}'}}\n"
    )
    sock = RunningServer.reserve()
    port = sock.getsockname()[1]
    sock.close()
    log = tmp_path / "serve.log"
    command = [sys.executable, "-m", "llmbridge", "serve", "--config", str(config)]
    command += ["--port", str(port), "--access-log", "--master-key", MASTER]
    with log.open("wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, cwd=tmp_path)
    url = f"http://127.0.0.1:{port}"
    try:
        serving(url, process, log.read_text)
        with httpx.Client(base_url=url, follow_redirects=False, timeout=30) as client:
            assert sign_in(client, "a wrong key").status_code == 401
            assert sign_in(client).status_code == 303
            for page in PAGES:
                reply = client.get(page)
                assert reply.status_code == 200, page
                assert MASTER not in reply.text
            # No trusted proxy is configured: a different X-Forwarded-For per guess is
            # the same peer all the same (uvicorn is told to believe no one).
            for attempt in range(MASTER_KEY_FAILURES - 1):
                forwarded = {"X-Forwarded-For": f"203.0.113.{attempt}"}
                wrong = {"master_key": "a wrong key"}
                assert client.post("/ui/sign-in", data=wrong, headers=forwarded).status_code == 401
            assert sign_in(client, "a wrong key").status_code == 429
    finally:
        process.terminate()
        process.wait(timeout=scaled(60))
    output = log.read_text()
    assert "/ui/sign-in" in output  # the access log is on
    assert MASTER not in output and "a wrong key" not in output


def _first_request_id(client: httpx.Client) -> str | None:
    found = re.search(r'href="/ui/requests/([^"]+)"', client.get("/ui/requests/rows").text)
    return found.group(1) if found else None


def test_a_requests_detail_shows_its_kept_bodies(tmp_path: Path) -> None:
    """With ``ledger.keep_bodies``, a request's page shows what it asked and got."""
    with (
        console_gateway(tmp_path, ledger={"keep_bodies": True}) as server,
        httpx.Client(base_url=server.url, follow_redirects=False, timeout=30) as client,
    ):
        sign_in(client)
        token = csrf_of(client.get("/ui/keys"))
        made = client.post("/ui/keys", data={"name": "bodies", "csrf": token})
        key = made.text.split('id="new-key" class="secret">')[1].split("<")[0]
        asked = httpx.post(
            server.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": "scripted", "messages": [{"role": "user", "content": "a kept prompt"}]},
            timeout=30,
        )
        assert asked.status_code == 200
        wait_until(lambda: _first_request_id(client) is not None, "the request in the log")
        request_id = _first_request_id(client)
        page = client.get(f"/ui/requests/{request_id}")
        assert page.status_code == 200
        wait_until(
            lambda: "a kept prompt" in client.get(f"/ui/requests/{request_id}").text,
            "the kept request body on the detail page",
        )
        assert key not in client.get(f"/ui/requests/{request_id}").text  # redacted


def test_without_a_ledger_the_log_pages_say_so(tmp_path: Path) -> None:
    with (
        console_gateway(tmp_path, server={"ledger": False}) as server,
        httpx.Client(base_url=server.url, follow_redirects=False, timeout=30) as client,
    ):
        sign_in(client)
        for page in ("/ui/", "/ui/requests", "/ui/sessions"):
            shown = client.get(page)
            assert shown.status_code == 200
            assert "the usage ledger is off" in shown.text
        assert client.get("/ui/requests/rows").status_code == 200


def test_an_address_guessing_the_master_key_is_held_back(tmp_path: Path) -> None:
    with (
        console_gateway(tmp_path) as server,
        httpx.Client(base_url=server.url, follow_redirects=False, timeout=30) as client,
    ):
        for attempt in range(MASTER_KEY_FAILURES):
            assert sign_in(client, f"guess-{attempt}").status_code == 401
        held = sign_in(client)  # even the right key, until the minute has passed
        assert held.status_code == 429
        assert COOKIE not in held.headers.get("set-cookie", "")
