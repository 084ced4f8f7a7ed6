"""``profile import`` of the gateway's own spans: a real gateway
traces its requests to a real OTLP/HTTP receiver on loopback; what it
received, written as OTLP/JSON lines as a collector's file exporter writes them, is
imported as one session per client session id, its requests as steps with their
models, tokens and times.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anthropic
import pytest
from click.testing import CliRunner
from google.protobuf import json_format

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.cli import cli
from llmbridge.core.errors import BackendError
from llmbridge.core.response import Usage
from tests.conftest import RunningServer, running_gateway
from tests.otlp_receiver import OtlpReceiver

USAGE = Usage(input_tokens=120, output_tokens=30, cache_read_input_tokens=100)


@pytest.fixture
def traced() -> Iterator[tuple[RunningServer, OtlpReceiver, ScriptedBackend]]:
    backend = ScriptedBackend("model", models=("scripted",), default=Script(usage=USAGE))
    with (
        OtlpReceiver() as receiver,
        running_gateway(
            {"model": backend},
            models=[{"name": "scripted", "backend": "model"}],
            telemetry={"otlp_endpoint": receiver.url},
        ) as gateway,
    ):
        yield gateway, receiver, backend


def _ask(gateway: RunningServer, session: str) -> None:
    client = anthropic.Anthropic(base_url=gateway.url, api_key="x", max_retries=0)
    with client:
        client.messages.create(
            model="scripted",
            max_tokens=50,
            messages=[{"role": "user", "content": "Hello"}],
            extra_headers={"X-Claude-Code-Session-Id": session},
        )


def test_the_gateways_spans_import_as_one_session_each(
    traced: tuple[RunningServer, OtlpReceiver, ScriptedBackend], tmp_path: Path
) -> None:
    gateway, receiver, backend = traced
    for session in ("session-a", "session-a", "session-b"):
        _ask(gateway, session)
    # More failures than the gateway's retries: the request fails.
    backend.enqueue(*[Script(fail_before=BackendError("the scripted backend is down"))] * 5)
    with pytest.raises(anthropic.APIStatusError):
        _ask(gateway, "session-b")
    receiver.wait_for(
        lambda spans: sum(s.attributes.get("session.id") is not None for s in spans) >= 4,
        "four request spans",
    )
    file = tmp_path / "spans.jsonl"
    file.write_text(
        "".join(json_format.MessageToJson(e, indent=None) + "\n" for e in receiver.exports)
    )

    out = tmp_path / "imported"
    result = CliRunner().invoke(cli, ["profile", "import", str(file), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    records = {
        r["scenario"]: r
        for r in (json.loads(line) for line in (out / "traces.jsonl").read_text().splitlines())
    }
    assert sorted(records) == ["session-a", "session-b"]
    a, b = records["session-a"], records["session-b"]
    assert a["provider"] == "llmbridge-gateway" and a["passed"] and not b["passed"]
    boundaries = [e for e in a["trace"]["events"] if e["type"] == "turn_boundary"]
    assert len(boundaries) == 2 and all(e["duration_ms"] >= 0 for e in boundaries)
    (prompt,) = a["prompts"]
    # The conventions' input count includes the cached tokens; the record's does not.
    assert (prompt["tokens"]["input"], prompt["tokens"]["cache_read"]) == (40, 200)
    assert prompt["tokens"]["output"] == 60
    errors = [e for e in b["trace"]["events"] if e["type"] == "error"]
    assert len(errors) == 1
