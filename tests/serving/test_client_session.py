"""The client's session (serving/deployments.py ``client_session``): the
session headers the agent CLIs send, read before the body's fields, keep a session on
one deployment of a route with ``affinity``.

The headers are the ones the pinned CLIs sent to a recording gateway (Claude Code
2.1.330: ``x-claude-code-session-id``; Codex 0.169.0: ``session-id`` beside
``thread-id``; Gemini CLI 0.61.0 with an API key: none, so ``x-llmbridge-session-id``
through ``GEMINI_CLI_CUSTOM_HEADERS``); tests/accounts/test_session_usage.py runs the
CLIs themselves. Over HTTP the requests carry the header alone (no
``prompt_cache_key``, no ``metadata``): before the headers were read, the route's
round robin moved each session between the servers.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from google import genai
from google.genai import types as genai_types
from starlette.datastructures import Headers

from llmbridge.dialects.anthropic.request import decode_chat_request as anthropic_request
from llmbridge.dialects.openai.request import decode_chat_request as openai_request
from llmbridge.dialects.responses.request import decode_chat_request as responses_request
from llmbridge.serving.deployments import SESSION_HEADERS, client_session, raw_client_session
from tests.conftest import anthropic_client, openai_client
from tests.gateway.test_deployments_http import _cluster, _sessions_on_each_server

CAPTURED = Path(__file__).resolve().parents[1] / "fixtures" / "requests"
CLAUDE_SESSION = "47857c73-bbaa-4e6b-a649-2dc7b3052e97"  # in the captured metadata.user_id


def _load(name: str) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((CAPTURED / name).read_text(encoding="utf-8"))
    return loaded


def _headers(**values: str) -> Headers:
    """Headers as a request carries them (starlette's, looked up ignoring case)."""
    return Headers(headers={name.replace("_", "-"): v for name, v in values.items()})


def test_each_clients_header_names_the_session_before_the_body() -> None:
    claude = anthropic_request(_load("claude_code_2_1_330_messages.json")).provider_details
    codex_body = _load("codex_0_169_0_responses.json")
    codex = responses_request(codex_body).provider_details
    # The body alone: what the route's affinity read before (deployments.session_key).
    assert client_session(Headers(), claude) == CLAUDE_SESSION
    assert client_session(Headers(), codex) == codex_body["prompt_cache_key"]
    # Claude Code's header, as 2.1.330 sends it (capitals and all), wins over the body.
    sent = Headers(headers={"X-Claude-Code-Session-Id": "8b0ed646-b8ca-4827"})
    assert client_session(sent, claude) == "8b0ed646-b8ca-4827"
    # Codex 0.169.0's session-id, and the session_id of the releases before it.
    assert client_session(_headers(session_id="01a22050-e6ce"), codex) == "01a22050-e6ce"
    assert client_session(Headers(raw=[(b"session_id", b"old-codex")]), None) == "old-codex"
    # The gateway's own header comes first: whoever adds it means it.
    both = Headers(
        headers={"x-llmbridge-session-id": "mine", "x-claude-code-session-id": "claude's"}
    )
    assert client_session(both, claude) == "mine"
    assert SESSION_HEADERS[0] == "x-llmbridge-session-id"


def test_what_is_not_a_session_is_not_read() -> None:
    plain = openai_request({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    assert client_session(Headers(), plain.provider_details) is None
    # Gemini CLI's installation id is the same in every session: not a session.
    installation = Headers(headers={"x-gemini-api-privileged-user-id": "5893d1ad-ab1f"})
    assert client_session(installation, None) is None
    # An empty or blank header is no session; the body's is read instead.
    keyed = openai_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "k"}
    )
    blank = Headers(headers={"x-claude-code-session-id": "  ", "session-id": ""})
    assert client_session(blank, keyed.provider_details) == "k"
    # Surrounding blanks are not part of the id.
    assert client_session(Headers(headers={"session-id": " s-1 "}), None) == "s-1"


def test_the_ledgers_one_pass_reading_agrees_with_the_mapping_one() -> None:
    """``raw_client_session`` (what the exchange records) reads an ASGI scope's raw
    headers in one pass: the same answer as ``client_session`` in every case, the
    order of the headers in the request making no difference."""
    keyed = openai_request(
        {"model": "m", "messages": [{"role": "user", "content": "hi"}], "prompt_cache_key": "k"}
    ).provider_details
    cases: list[list[tuple[str, str]]] = [
        [],
        [("host", "x"), ("session-id", "codex")],
        [("session-id", "codex"), ("x-claude-code-session-id", "claude")],
        [("x-claude-code-session-id", "claude"), ("x-llmbridge-session-id", "mine")],
        [("session_id", "old"), ("session-id", "new")],
        [("x-llmbridge-session-id", " "), ("session_id", "old")],
        [("x-gemini-api-privileged-user-id", "installation")],
    ]
    for pairs in cases:
        for order in (pairs, pairs[::-1]):
            raw = [(name.encode(), value.encode()) for name, value in order]
            for details in (None, keyed):
                expected = client_session(Headers(raw=raw), details)
                assert raw_client_session(raw, details) == expected, (order, details)


# -- over HTTP: two servers, round robin, affinity without a configured header -----------

ROUTE = {"strategy": "round-robin", "affinity": True}


def test_each_clis_session_header_keeps_its_session_on_one_server() -> None:
    sessions = _sessions_on_each_server(ROUTE)
    with _cluster(ROUTE) as (_servers, front):
        anthropic = anthropic_client(front.url)
        openai = openai_client(front.url)
        for server, session in sessions.items():
            expected = f"served by {server}"
            gemini = genai.Client(
                api_key="x",
                http_options=genai_types.HttpOptions(
                    base_url=front.url, headers={"x-llmbridge-session-id": session}
                ),
            )
            for _ in range(3):  # round robin alone would alternate
                message = anthropic.messages.create(
                    model="m",
                    max_tokens=32,
                    messages=[{"role": "user", "content": "hi"}],
                    extra_headers={"X-Claude-Code-Session-Id": session},
                )
                assert message.content[0].text == expected
                response = openai.responses.create(
                    model="m", input="hi", extra_headers={"session-id": session}
                )
                assert response.output_text == expected
                answer = gemini.models.generate_content(model="m", contents="hi")
                assert answer.text == expected
            gemini.close()
