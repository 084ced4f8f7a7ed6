"""Gemini clients' API keys: ``x-goog-api-key`` and ``?key=`` (web/auth.py), and the
``?key=`` value kept out of ``llmbridge serve``'s access log (cli/serve.py)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from google import genai
from google.genai import errors, types

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer, running_gateway
from tests.fuzz.shapes import assert_error_shape
from tests.waiting import serving

KEY = "gk-test-key-0123456789"


@pytest.fixture(scope="module")
def secured(scripted: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway({"scripted": scripted}, server={"api_keys": [KEY]}) as server:
        yield server


@contextmanager
def _client(url: str, api_key: str) -> Iterator[genai.Client]:
    # Kept referenced while in use: a collected Client closes its HTTP client.
    client = genai.Client(api_key=api_key, http_options=types.HttpOptions(base_url=url))
    try:
        yield client
    finally:
        client.close()


def test_the_sdk_key_header_is_accepted(secured: RunningServer, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["ok"]))
    with _client(secured.url, KEY) as client:
        reply = client.models.generate_content(model="scripted", contents="hi")
    assert reply.text == "ok"


def test_a_wrong_key_is_refused_in_googles_shape(secured: RunningServer) -> None:
    with _client(secured.url, "wrong") as client, pytest.raises(errors.ClientError) as caught:
        client.models.generate_content(model="scripted", contents="hi")
    assert caught.value.code == 401
    assert caught.value.status == "UNAUTHENTICATED"


def test_the_key_query_parameter_is_accepted(secured: RunningServer) -> None:
    url = secured.url + "/v1beta/models/scripted:countTokens"
    body = {"contents": [{"role": "user", "parts": [{"text": "one two"}]}]}
    accepted = httpx.post(url, params={"key": KEY}, json=body)
    assert accepted.status_code == 200 and accepted.json() == {"totalTokens": 2}
    refused = httpx.post(url, params={"key": "wrong"}, json=body)
    assert_error_shape(Dialect.GEMINI, 401, refused.content)
    missing = httpx.post(url, json=body)
    assert "x-goog-api-key" in assert_error_shape(Dialect.GEMINI, 401, missing.content)


def test_other_dialects_take_the_google_header_too(secured: RunningServer) -> None:
    """One key store, any header: an OpenAI request with ``x-goog-api-key`` passes."""
    listed = httpx.get(secured.url + "/api/tags", headers={"x-goog-api-key": KEY})
    assert listed.status_code == 200 and listed.json()["models"]


def test_a_refused_key_on_the_shared_model_list_answers_in_the_callers_shape(
    secured: RunningServer,
) -> None:
    """``GET /v1/models`` is OpenAI's, Anthropic's and Gemini's: the 401 follows the
    client's headers, as the list itself does."""
    with _client(secured.url, "wrong") as client, pytest.raises(errors.ClientError) as caught:
        client.models.list(config=types.ListModelsConfig(http_options={"api_version": "v1"}))
    assert caught.value.code == 401 and caught.value.status == "UNAUTHENTICATED"
    url = secured.url + "/v1/models"
    gemini = httpx.get(url, params={"key": "wrong"})
    assert_error_shape(Dialect.GEMINI, 401, gemini.content)
    anthropic = httpx.get(url, headers={"x-api-key": "wrong", "anthropic-version": "2023-06-01"})
    assert_error_shape(Dialect.ANTHROPIC, 401, anthropic.content)
    openai = httpx.get(url, headers={"authorization": "Bearer wrong"})
    assert_error_shape(Dialect.OPENAI, 401, openai.content)


def _free_port() -> int:
    sock = RunningServer.reserve()
    port: int = sock.getsockname()[1]
    sock.close()
    return port


def test_query_keys_stay_out_of_the_access_log(tmp_path: Path) -> None:
    """``llmbridge serve --access-log`` as users run it: the request line is logged, the
    key in its query string is not (uvicorn logs the path with its query)."""
    config = tmp_path / "llmbridge.yaml"
    config.write_text(
        "backends: {scripted: {type: scripted}}\n"
        "default_backend: scripted\n"
        f"server: {{api_keys: ['{KEY}']}}\n"
    )
    port = _free_port()
    command = [sys.executable, "-m", "llmbridge", "serve", "--config", str(config)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--access-log"]
    process = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=tmp_path
    )
    try:
        base = f"http://127.0.0.1:{port}"
        serving(base, process)
        listed = httpx.get(base + "/v1beta/models", params={"pageSize": 5, "key": KEY})
        assert listed.status_code == 200
        refused = httpx.get(base + "/v1beta/models", params={"key": KEY + "-not"})
        assert refused.status_code == 401
    finally:
        process.terminate()
        output, _ = process.communicate(timeout=30)
    lines = [line for line in output.splitlines() if "/v1beta/models" in line]
    assert len(lines) == 2, output
    assert "pageSize=5&key=REDACTED" in lines[0] and '" 200' in lines[0], lines
    assert "key=REDACTED" in lines[1] and '" 401' in lines[1], lines
    assert KEY not in output
