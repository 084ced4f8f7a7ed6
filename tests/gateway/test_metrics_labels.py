"""``/metrics`` stays bounded whatever model names clients send (400
requests with 4 KB names grew it from 0.5 MB to 63 MB, two seconds a scrape).

A model label is a name the configuration names, or one that a backend served, at
most ``MAX_PASSED_ON_LABELS`` of them; every other name counts under ``other``
(gateway/exchange/record.py ``metric_model``, gateway/metrics.py ``model_label``).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import httpx
import pytest

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.metrics import MAX_PASSED_ON_LABELS, OTHER_MODEL
from tests.conftest import RunningServer, running_gateway

CHAT = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend) -> Iterator[RunningServer]:
    # ``named`` is configured; every other name goes to the default backend as sent.
    with running_gateway(
        {"scripted": scripted}, models=[{"name": "named", "backend": "scripted"}]
    ) as server:
        yield server


def _model_labels(text: str) -> set[str]:
    return set(re.findall(r'llmbridge_requests_total\{[^}]*model="([^"]*)"', text))


def test_long_made_up_names_do_not_grow_the_metrics(gateway: RunningServer) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        client.post("/v1/chat/completions", json={"model": "named", "messages": CHAT})
        before = len(client.get("/metrics").content)
        for i in range(400):
            name = f"{i:04d}" + "x" * 4096
            reply = client.post("/v1/chat/completions", json={"model": name, "messages": CHAT})
            assert reply.status_code == 200
        text = client.get("/metrics").text
    assert "x" * 300 not in text
    assert len(text.encode()) - before < 20_000  # a few new series, not 400 of 4 KB
    assert {"named", OTHER_MODEL} <= _model_labels(text)


def test_names_passed_on_get_labels_up_to_a_bound(gateway: RunningServer) -> None:
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        for i in range(MAX_PASSED_ON_LABELS + 20):
            reply = client.post(
                "/v1/chat/completions", json={"model": f"served-{i}", "messages": CHAT}
            )
            assert reply.status_code == 200
        labels = _model_labels(client.get("/metrics").text)
    served = {label for label in labels if label.startswith("served-")}
    assert served  # a name a backend served is worth its own label...
    assert len(served) <= MAX_PASSED_ON_LABELS  # ...a bounded number of them
    assert "served-0" in served or len(served) == MAX_PASSED_ON_LABELS


def test_a_name_no_backend_serves_never_becomes_a_label(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    from llmbridge.backends.scripted import Script
    from llmbridge.core.errors import ModelNotFoundError

    scripted.enqueue(Script(fail_before=ModelNotFoundError("no-such-model-anywhere")))
    with httpx.Client(base_url=gateway.url, timeout=30) as client:
        reply = client.post(
            "/v1/chat/completions", json={"model": "no-such-model-anywhere", "messages": CHAT}
        )
        assert reply.status_code == 404
        labels = _model_labels(client.get("/metrics").text)
    assert "no-such-model-anywhere" not in labels
