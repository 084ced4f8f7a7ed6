"""The gateway's shutdown waits a bounded time on the trace exporter, whatever the
collector does: one that hangs (a real OTLP/HTTP receiver on loopback that reads each
post and answers none, tests/otlp_receiver.py) or one that refuses connections (a
loopback port nothing listens on).

The exporter is told to wait 10 minutes per export (``OTEL_EXPORTER_OTLP_TIMEOUT``,
which the SDK reads and retries within), so only the gateway's own deadline can end
the shutdown early; before, the SDK's batch processor waited 30 s for its thread
whatever the exporter's timeout. The shutdown is a real one: the uvicorn server is
asked to stop and its thread ends once the lifespan's shutdown has run. That is waited
for with a generous hang guard, not timed; what the test asserts besides is the
deadline the gateway gives the SDK and that it said in its log that the spans still
queued were dropped.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import pytest

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from llmbridge.gateway.telemetry import SHUTDOWN_TIMEOUT_S
from tests.conftest import RunningServer, openai_client
from tests.otlp_receiver import OtlpReceiver
from tests.servers import free_port
from tests.waiting import scaled, wait_until

SHUTDOWN_GUARD_S = 8.0
"""Scaled (at least 24 s): far above the 2 s deadline, below the SDK's own 30 s."""


def _traced_app(endpoint: str) -> Any:
    config = GatewayConfig.model_validate(
        {
            "backends": {"local": {"type": "scripted"}},
            "default_backend": "local",
            "telemetry": {"otlp_endpoint": endpoint},
        }
    )
    return create_app(config, backends={"local": ScriptedBackend("local", models=("scripted",))})


def _stopped(gateway: RunningServer, within_s: float) -> bool:
    """Ask ``gateway`` to stop; whether its thread (its lifespan's shutdown included)
    ended within ``within_s``."""
    gateway.server.stop()
    thread = gateway._thread
    thread.join(within_s)
    return not thread.is_alive()


@pytest.mark.parametrize("collector", ["hangs", "refuses"])
def test_shutdown_waits_at_most_its_deadline_on_the_trace_exporter(
    collector: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    assert SHUTDOWN_TIMEOUT_S == 2.0
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")  # the batch processor sends soon
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "600")
    caplog.set_level(logging.WARNING, logger="llmbridge.telemetry")
    with contextlib.ExitStack() as stack:
        receiver: OtlpReceiver | None = None
        if collector == "hangs":
            receiver = stack.enter_context(OtlpReceiver(hang=True))
            endpoint = receiver.url
        else:
            endpoint = f"http://127.0.0.1:{free_port()}"  # nothing listens there
        app = _traced_app(endpoint)
        gateway = stack.enter_context(RunningServer(app, http=http_protocol(app)))
        tracing = app.state.gateway.tracing
        assert tracing is not None and tracing.shutdown_timeout_s == SHUTDOWN_TIMEOUT_S
        client = openai_client(gateway.url)
        ask = {"model": "scripted", "messages": [{"role": "user", "content": "hi"}]}
        assert client.chat.completions.create(**ask).choices[0].message.content
        if receiver is not None:
            # The exporter's first post is in the collector's hands, unanswered.
            wait_until(lambda: receiver.held >= 1, "the collector holding the first post")
        # More spans queued behind it, for the shutdown to send.
        assert client.chat.completions.create(**ask).choices[0].message.content
        assert _stopped(gateway, scaled(SHUTDOWN_GUARD_S)), "the shutdown did not finish"
    said = [r.getMessage() for r in caplog.records if r.name == "llmbridge.telemetry"]
    assert any("dropped" in line and "2 s" in line for line in said), said
