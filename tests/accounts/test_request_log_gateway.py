"""The request log through a real gateway: requests sent with the official
openai client show up in ``recent_requests`` with their tokens, cost, dialect, the
model served, the retries and fallbacks serving made, the ``x-llmbridge-*`` facts and
a failure's message; with ``ledger.keep_bodies`` their bodies are kept, bounded and
redacted; without it none are. On SQLite and PostgreSQL.

A scripted backend fails on demand (a retry, then a fallback) and gives exact usage.
Rows are written by the ledger's batch every second: each read is a bounded poll.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendUnavailableError
from llmbridge.core.response import Usage
from tests.accounts.request_log_reads import logged_detail, logged_rows
from tests.conftest import RunningServer, openai_client, running_gateway

STATIC = "sk-static-request-log-0123456789"
MASTER = "sk-master-request-log"
PRICES = {"guarded": {"input": 2.0, "output": 8.0}, "priced-*": {"input": 1.0, "output": 4.0}}
SESSION = "8b0ed646-b8ca-4827-8def-98db052d4ac2"


@pytest.fixture
def main() -> ScriptedBackend:
    return ScriptedBackend("main", models=("priced-model", "main-model"))


@pytest.fixture
def spare() -> ScriptedBackend:
    return ScriptedBackend("spare", models=("spare-model",))


def _gateway(main: ScriptedBackend, spare: ScriptedBackend, db_url: str, keep: bool) -> Any:
    return running_gateway(
        {"main": main, "spare": spare},
        server={"api_keys": [STATIC], "master_key": MASTER},
        agent={"database": db_url, "summaries": False},
        prices=PRICES,
        ledger={"keep_bodies": keep, "max_body_bytes": 1024},
        resilience={"retries": 1, "backoff_ms": 10, "breaker_failures": 0},
        models=[
            {"name": "priced-*", "backend": "main"},
            {
                "name": "guarded",
                "backend": "main",
                "model": "main-model",
                "fallbacks": [{"backend": "spare", "model": "spare-model"}],
            },
        ],
    )


@pytest.fixture
def keeping(main: ScriptedBackend, spare: ScriptedBackend, db_url: str) -> Iterator[RunningServer]:
    with _gateway(main, spare, db_url, keep=True) as server:
        yield server


def test_requests_show_up_with_what_serving_did_and_their_kept_bodies(
    keeping: RunningServer, main: ScriptedBackend, spare: ScriptedBackend, db_url: str
) -> None:
    client = openai_client(keeping.url, api_key=STATIC)
    # 1. A retry, then a fallback: the main backend fails twice before any output.
    down = BackendUnavailableError("main is down", backend="main")
    main.enqueue(Script(fail_before=down), Script(fail_before=down))
    spare.enqueue(
        Script(text=["from", " the spare"], usage=Usage(input_tokens=12, output_tokens=3))
    )
    first = client.chat.completions.with_raw_response.create(
        model="guarded",
        messages=[{"role": "user", "content": "hello"}],
        extra_headers={"X-Claude-Code-Session-Id": SESSION},
    )
    assert first.headers["x-llmbridge-fallback"] == "spare/spare-model"
    # 2. Streamed, with an image and secrets in it: kept, redacted and bounded.
    image = base64.b64encode(bytes(range(256)) * 8).decode()
    main.enqueue(
        Script(text=["a long answer. "] * 200, usage=Usage(input_tokens=40, output_tokens=200))
    )
    text = f"my key is {STATIC} and my other one sk-abcdefghijklmnopqrstuvwxyz"
    stream = client.chat.completions.create(
        model="priced-model",
        stream=True,
        messages=[
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": text},
                    {"type": "image_url", "image_url": {"url": f"data:image/png;base64,{image}"}},
                ],
            }
        ],
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    # 3. A failure: the model's backend fails and there is no fallback.
    main.enqueue(Script(fail_before=down), Script(fail_before=down))
    with pytest.raises(openai.APIStatusError) as failed:
        client.chat.completions.create(
            model="priced-model", messages=[{"role": "user", "content": "x"}]
        )
    assert failed.value.status_code == 503

    rows = logged_rows(db_url, 3)
    by_model = {(row.model, row.status): row for row in rows}
    served = by_model["guarded", 200]
    assert served.request_id == first.headers["x-request-id"]
    assert (served.dialect, served.endpoint) == ("openai", "/v1/chat/completions")
    assert (served.served_model, served.deployment) == ("spare-model", "spare")
    assert (served.retries, served.fallbacks) == (1, 1)
    assert served.facts == {"x-llmbridge-fallback": "spare/spare-model"}
    assert (served.input_tokens, served.output_tokens) == (12, 3)
    assert served.cost_usd == pytest.approx((12 * 2.0 + 3 * 8.0) / 1e6)
    assert served.session_id == SESSION and served.key_name is not None
    assert served.finish_reason == "end_turn" and served.error is None
    assert served.overhead_ms is not None and served.overhead_ms >= 0

    streamed = by_model["priced-model", 200]
    assert streamed.streamed and (streamed.input_tokens, streamed.output_tokens) == (40, 200)
    assert streamed.served_model == "priced-model" and streamed.retries == 0
    assert streamed.cost_usd == pytest.approx((40 * 1.0 + 200 * 4.0) / 1e6)

    error = by_model["priced-model", 503]
    assert error.error is not None and "main is down" in error.error
    assert error.retries is None  # no reply came: serving's counts are not known

    kept = logged_detail(db_url, streamed.request_id)
    assert kept is not None and kept.request_body and kept.response_body
    for body in (kept.request_body, kept.response_body):
        assert len(body.encode()) <= 1024 + 40  # the bound, and the cut marker
    assert STATIC not in kept.request_body and "sk-abcdefghijklmnop" not in kept.request_body
    assert "[redacted]" in kept.request_body
    assert image[:64] not in kept.request_body and "[image: " in kept.request_body
    assert "a long answer." in kept.response_body
    assert kept.response_body.endswith("...[cut at 1024 bytes]")  # 3,000 characters, cut
    plain = logged_detail(db_url, served.request_id)
    assert plain is not None and plain.response_body is not None
    assert "the spare" in plain.response_body


def test_bodies_are_not_kept_by_default(
    main: ScriptedBackend, spare: ScriptedBackend, db_url: str
) -> None:
    with _gateway(main, spare, db_url, keep=False) as server:
        main.enqueue(Script(text=["hi"], usage=Usage(input_tokens=2, output_tokens=1)))
        reply = httpx.post(
            server.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {STATIC}"},
            json={"model": "priced-model", "messages": [{"role": "user", "content": "yo"}]},
            timeout=30,
        )
        assert reply.status_code == 200, reply.text
        (row,) = logged_rows(db_url, 1)
        assert row.dialect == "openai" and row.input_tokens == 2
        detail = logged_detail(db_url, row.request_id)
        assert detail is not None
        assert (detail.request_body, detail.response_body) == (None, None)
