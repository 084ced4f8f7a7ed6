"""Schemathesis against the gateway's own OpenAPI description.

The description is fetched from the running gateway (``GET /openapi.json`` on a
loopback uvicorn over the scripted backend) and every operation in it is fuzzed with
schemathesis' generated requests, schema-valid (``positive``) and schema-breaking
(``negative``), through Hypothesis with a fixed derandomised seed, so CI sees the same
requests every run. Each reply must pass:

- ``not_a_server_error``: no 5xx (the scripted backend never fails here);
- ``dialect_errors`` (ours): every error is the route's dialect's error JSON and no
  body holds a traceback;
- schemathesis' ``status_code_conformance``, ``content_type_conformance`` and
  ``response_schema_conformance``: the reply matches the description;
- ``negative_data_rejection``: a request that breaks the schema is a 4xx, so the
  description is no looser than the decoders.

The document itself must be valid OpenAPI 3.1, be exactly what ``openapi.py`` builds,
and be served only with the API key when keys are configured.

Operations are parametrised by hand (``test_operation[POST /api/chat-negative]``)
rather than with ``schema.parametrize()``: with pytest 9.2, schemathesis 4.32's
plugin gives every generated item the same node id and its lazy
``from_fixture`` loader fails on ``request.node._nodeid``.

Run alone: ``.venv/bin/pytest -q tests/fuzz/test_schemathesis.py -p no:cacheprovider``.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import schemathesis
import schemathesis.generation.jsonschema.strategy as jsonschema_strategy
from hypothesis import HealthCheck, given, settings
from schemathesis import GenerationMode
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    negative_data_rejection,
    response_schema_conformance,
    status_code_conformance,
)

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.openapi import OPENAPI_PATH, openapi_document
from llmbridge.gateway.routes import (
    anthropic,
    completions,
    gemini,
    interactions,
    ollama,
    openai,
    responses,
    system,
)
from llmbridge.web.auth import OPEN_PATHS
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer, running_gateway
from tests.fuzz.schemathesis_hooks import dialect_errors
from tests.fuzz.shapes import assert_error_shape
from tests.waiting import scaled

MAX_EXAMPLES = int(os.environ.get("FUZZ_MAX_EXAMPLES", "80"))
"""Per operation and mode (fewer for some Gemini operations, below): about 2.5 minutes
for the file on 2 cores. ``FUZZ_MAX_EXAMPLES=500`` searches harder."""

ROOT = Path(__file__).resolve().parents[2]

CONFIG = schemathesis.Config.from_dict({"generation": {"database": "none"}})

OPERATIONS = [
    (method.upper(), path)
    for path, methods in openapi_document()["paths"].items()
    for method in methods
]


GEMINI_V1_ALIAS = "/v1/models/{model}:"
"""Gemini's ``/v1`` routes are its ``/v1beta`` ones under a second prefix (the same
handlers, routes/gemini.py): fuzzed with a quarter of the examples, which still proves
each is served and described, while the ``/v1beta`` ones carry the full search."""

SHARED_DECODER_SHARE = {
    ":streamGenerateContent": 4,
    ":countTokens": 2,
    ":batchEmbedContents": 2,
}
"""Gemini methods whose body goes through a decoder another fuzzed method already
searches in full, with what divides their examples (Gemini's schemas are the slowest to
generate: these operations took most of this file's time). ``streamGenerateContent``
is ``generateContent``'s handler with ``stream=True`` (routes/gemini.generate_content,
dialects/gemini/request.decode_chat_request): what is its own (``alt``, the streamed
reply's description) still gets 20 examples. ``countTokens`` sends its ``contents`` or
``generateContentRequest`` through the same ``_Decoder.chat_request``;
``batchEmbedContents`` validates each of its ``requests`` as ``embedContent``'s body
(``EmbedContentRequest``, ``_embed_text``); their own envelope keeps half the search."""


def _examples(path: str) -> int:
    share = next((n for method, n in SHARED_DECODER_SHARE.items() if path.endswith(method)), 1)
    if path.startswith(GEMINI_V1_ALIAS):
        share *= 4
    # At least 5 (an alias of a shared method still sends a handful), never above the rest.
    return max(min(5, MAX_EXAMPLES), MAX_EXAMPLES // share)


EXTRA_KEYS = 1
"""Unknown keys a generated body gets per open object (``additionalProperties`` not
``false``), where schemathesis 4.32.5 adds up to 5 (its private ``_EXTRA_KEYS``), each
with an arbitrary JSON value: most of a body's size and about a third of its generation
time (80 ``generateContent`` bodies: 19.8 s of CPU with 5, 12.5 s with 1). One such key
at every open object still checks what the others would (a decoder ignores or carries a
key it does not know, whatever its name and value). Negative cases too (their
tests' CPU fell about a quarter): a negative body is a valid body with one breaking
mutation, either of the schema (``mutated``: it negates keywords the description names,
and no schema here has ``minProperties``/``maxProperties``, the only keywords the count
of unknown keys could break) or of one value (``_with_value_channel``: a constrained
value of the drawn body, where a typed map, ``additionalProperties: {...}``, still gets
its key to break). The unknown keys are schema-valid filler around that mutation, so
fewer of them take no kind of breaking case from ``negative_data_rejection``."""


def _takes_input(method: str, path: str) -> bool:
    """Whether a request can break the schema (a body or a path parameter)."""
    return method == "POST" or "{" in path


CASES = [
    pytest.param(method, path, mode, id=f"{method} {path}-{mode.value}")
    for method, path in OPERATIONS
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode is GenerationMode.POSITIVE or _takes_input(method, path)
]


CHECKS: list[schemathesis.CheckFunction] = [
    not_a_server_error,
    dialect_errors,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


@pytest.fixture(scope="module")
def api_schema(gateway: RunningServer) -> Iterator[schemathesis.BaseSchema]:
    yield schemathesis.openapi.from_url(gateway.url + "/openapi.json", config=CONFIG)


def test_served_description_is_the_built_one(api_schema: schemathesis.BaseSchema) -> None:
    api_schema.validate()  # against the OpenAPI 3.1 meta-schema
    assert api_schema.raw_schema == openapi_document()


def test_every_route_is_described() -> None:
    """Adding a route means describing it (HEAD: only where a route lists it itself)."""
    served = {
        (method, route.path.replace(":path}", "}"))
        for module in (
            system,
            ollama,
            openai,
            responses,
            completions,
            anthropic,
            gemini,
            interactions,
        )
        for route in module.routes
        # A WebSocket (the Responses API's) is no HTTP operation: its frames are POSTs.
        for method in getattr(route, "methods", None) or ()
    }
    described = set(OPERATIONS)
    assert described <= served
    assert {op for op in served if op[0] != "HEAD"} == {op for op in described if op[0] != "HEAD"}


def test_description_needs_the_api_key(scripted: ScriptedBackend) -> None:
    """Like every route but / and /health (auth.OPEN_PATHS), and said so in it."""
    with running_gateway({"scripted": scripted}, server={"api_keys": ["k"]}) as server:
        refused = httpx.get(server.url + OPENAPI_PATH)
        assert_error_shape(Dialect.OPENAI, 401, refused.content)
        served = httpx.get(server.url + OPENAPI_PATH, headers={"x-api-key": "k"})
        assert served.status_code == 200 and served.json() == openapi_document()
        for path in OPEN_PATHS:
            assert httpx.get(server.url + path).status_code == 200
            assert served.json()["paths"][path]["get"]["security"] == []


@pytest.mark.parametrize(("method", "path", "mode"), CASES)
def test_operation(
    api_schema: schemathesis.BaseSchema,
    gateway: RunningServer,
    monkeypatch: pytest.MonkeyPatch,
    method: str,
    path: str,
    mode: GenerationMode,
) -> None:
    # Read when the strategy is built and on some draws: set for the whole test.
    # raising=True (the default): a schemathesis without it fails here, not silently.
    monkeypatch.setattr(jsonschema_strategy, "_EXTRA_KEYS", EXTRA_KEYS)
    operation = api_schema[path][method]
    checks = [*CHECKS, negative_data_rejection] if mode is GenerationMode.NEGATIVE else CHECKS

    @settings(
        max_examples=_examples(path),
        derandomize=True,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(case=operation.as_strategy(generation_mode=mode))
    def fuzz(case: schemathesis.Case[Any]) -> None:
        response = case.call(base_url=gateway.url, timeout=10)
        case.validate_response(response, checks=checks)

    fuzz()


CLI_CHECKS = (
    "not_a_server_error,dialect_errors,status_code_conformance,content_type_conformance,"
    "response_schema_conformance,negative_data_rejection,unsupported_method"
)


def test_coverage_phase(gateway: RunningServer) -> None:
    """Schemathesis' coverage phase: for every operation but Gemini's ``/v1`` aliases,
    the boundary values, type violations, missing fields and wrong methods its schema
    implies (about 25 s on 2 cores), through the CLI as docs/RELIABILITY.md runs it."""
    command = [
        sys.executable,
        "-m",
        "schemathesis.cli",
        "run",
        gateway.url + OPENAPI_PATH,
        "--phases=coverage",
        # Gemini's /v1 aliases: the /v1beta handlers and schemas (GEMINI_V1_ALIAS),
        # whose boundary values the /v1beta operations already send.
        "--exclude-path-regex=^/v1/models/[{]model[}]:",
        f"--checks={CLI_CHECKS}",
        "--seed=8",
        "--continue-on-failure",
        "--no-color",
    ]
    env = {**os.environ, "SCHEMATHESIS_HOOKS": "tests.fuzz.schemathesis_hooks"}
    # A bound on a hang only (tests/waiting.py): the phase takes about 45 s on a quiet
    # 2-core machine, and a flat 300 s ran out beside four other suites' load.
    result = subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=scaled(900), check=False
    )
    assert result.returncode == 0, result.stdout[-30_000:] + result.stderr[-5_000:]
    assert "No issues found" in result.stdout or " passed" in result.stdout, result.stdout
