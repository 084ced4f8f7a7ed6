"""Every request a trace: the gateway's spans, as a real OTLP/HTTP
receiver on loopback gets them from the gateway's own SDK exporter.

The traced gateway serves three kinds of backend: ``local`` (scripted, in process),
``inner`` (the OpenAI-compatible backend over HTTP, whose server is a second, untraced
gateway on loopback: its attempt spans name a real ``server.address``) and
``toolless`` (scripted, without native tools: tool emulation's decision and answer
calls). Requests go through the official clients; the receiver decodes the protobuf
with ``opentelemetry-proto`` (tests/otlp_receiver.py). Spans are exported by the SDK's
batch processor; ``OTEL_BSP_SCHEDULE_DELAY`` makes it send within 50 ms, and the tests
wait for what they expect with a bounded wait.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest

from llmbridge.backends.openai_compat import OpenAICompatBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import BackendError
from llmbridge.core.response import Usage
from llmbridge.gateway.config import load_config
from llmbridge.gateway.exchange.exchange import OVERHEAD_HEADER
from llmbridge.gateway.telemetry import traces_url
from tests.conftest import RunningServer, anthropic_client, openai_client, running_gateway
from tests.otlp_receiver import CLIENT, ERROR, INTERNAL, SERVER, OtlpReceiver, ReceivedSpan

KEY = "sk-trace-test-key"
SERVICE = "llmbridge-under-test"
TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


@pytest.fixture(scope="module")
def receiver() -> Iterator[OtlpReceiver]:
    with OtlpReceiver() as running:
        yield running


@pytest.fixture(scope="module")
def upstream() -> ScriptedBackend:
    return ScriptedBackend("upstream", models=("upstream-model",))


@pytest.fixture(scope="module")
def local() -> ScriptedBackend:
    return ScriptedBackend("local", models=("scripted",))


@pytest.fixture(scope="module")
def toolless() -> ScriptedBackend:
    return ScriptedBackend("toolless", models=("tiny",), capabilities=frozenset({"completion"}))


@pytest.fixture(autouse=True)
def _fresh_queues(
    upstream: ScriptedBackend, local: ScriptedBackend, toolless: ScriptedBackend
) -> None:
    for backend in (upstream, local, toolless):
        backend.queue.clear()


@pytest.fixture(scope="module")
def inner(upstream: ScriptedBackend) -> Iterator[RunningServer]:
    """The untraced gateway the ``inner`` backend calls over HTTP (no retries of its own:
    a scripted failure is one 503)."""
    with running_gateway({"upstream": upstream}, resilience={"retries": 0}) as server:
        yield server


@pytest.fixture(scope="module")
def traced(
    receiver: OtlpReceiver,
    inner: RunningServer,
    local: ScriptedBackend,
    toolless: ScriptedBackend,
) -> Iterator[RunningServer]:
    backends = {
        "local": local,
        "inner": OpenAICompatBackend("inner", f"{inner.url}/v1"),
        "toolless": toolless,
    }
    models = [
        {"name": "remote", "backend": "inner", "model": "upstream-model"},
        {
            "name": "flaky",
            "backend": "inner",
            "model": "upstream-model",
            "fallbacks": [{"backend": "local", "model": "scripted"}],
        },
        {"name": "tiny", "backend": "toolless"},
    ]
    saved = os.environ.get("OTEL_BSP_SCHEDULE_DELAY")
    os.environ["OTEL_BSP_SCHEDULE_DELAY"] = "50"  # the SDK's batch processor: send soon
    try:
        with running_gateway(
            backends,
            models=models,
            server={"api_keys": [KEY]},
            resilience={"retries": 1, "backoff_ms": 10, "breaker_failures": 0},
            telemetry={"otlp_endpoint": receiver.url, "service_name": SERVICE},
        ) as server:
            yield server
    finally:
        if saved is None:
            os.environ.pop("OTEL_BSP_SCHEDULE_DELAY", None)
        else:
            os.environ["OTEL_BSP_SCHEDULE_DELAY"] = saved


def _only(spans: list[ReceivedSpan]) -> ReceivedSpan:
    assert len(spans) == 1, [s.name for s in spans]
    return spans[0]


def test_a_chat_is_a_server_span_with_genai_attributes_and_a_backend_child(
    traced: RunningServer, receiver: OtlpReceiver, local: ScriptedBackend
) -> None:
    local.enqueue(Script(text=["Hi", " there"], usage=Usage(input_tokens=11, output_tokens=3)))
    client = openai_client(traced.url, api_key=KEY)
    raw = client.chat.completions.with_raw_response.create(
        model="scripted",
        messages=[{"role": "user", "content": "hello"}],
        max_tokens=50,
        temperature=0.5,
        extra_body={"prompt_cache_key": "codex-conversation-1"},
    )
    assert raw.parse().choices[0].message.content == "Hi there"
    root, spans = receiver.trace_of(raw.headers["x-request-id"], 2)
    assert root.parent_id is None and root.kind == SERVER
    assert root.name == "chat scripted"
    assert root.resource["service.name"] == SERVICE
    attributes = root.attributes
    assert {k: attributes.get(k) for k in _GENAI} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "scripted",
        "gen_ai.system": "scripted",
        "gen_ai.request.model": "scripted",
        "gen_ai.response.model": "scripted",
        "gen_ai.usage.input_tokens": 11,
        "gen_ai.usage.output_tokens": 3,
        "gen_ai.response.finish_reasons": ["end_turn"],
        "gen_ai.request.max_tokens": 50,
        "gen_ai.request.temperature": 0.5,
        "http.response.status_code": 200,
        "http.route": "/v1/chat/completions",
        "llmbridge.dialect": "openai",
        "llmbridge.deployment": "local",
        "llmbridge.streamed": False,
    }
    # The client's session (prompt_cache_key, as Codex sends it), and the key by name.
    assert attributes["session.id"] == attributes["gen_ai.conversation.id"]
    assert attributes["session.id"] == "codex-conversation-1"
    assert attributes["llmbridge.key.name"].startswith("static:")
    assert all(KEY not in str(value) for s in spans for value in s.attributes.values())
    assert "error.type" not in attributes
    # The header's figure is the span's: Exchange.overhead_ms.
    header = float(raw.headers[OVERHEAD_HEADER])  # written to the microsecond
    assert attributes["llmbridge.overhead_ms"] == pytest.approx(header, abs=0.001)
    attempt = _only(root.children(spans))
    assert attempt.kind == CLIENT and attempt.name == "chat scripted"
    assert attempt.attributes["llmbridge.deployment"] == "local"
    assert attempt.attributes["llmbridge.attempt"] == 1
    assert attempt.attributes["llmbridge.retry"] is False
    assert attempt.attributes["gen_ai.usage.output_tokens"] == 3
    assert root.start_ns <= attempt.start_ns and attempt.end_ns <= root.end_ns


_GENAI = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.system",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.response.finish_reasons",
    "gen_ai.request.max_tokens",
    "gen_ai.request.temperature",
    "http.response.status_code",
    "http.route",
    "llmbridge.dialect",
    "llmbridge.deployment",
    "llmbridge.streamed",
)


def test_a_backend_over_http_is_named_by_its_server_address_and_port(
    traced: RunningServer, inner: RunningServer, receiver: OtlpReceiver
) -> None:
    client = openai_client(traced.url, api_key=KEY)
    with client.chat.completions.with_streaming_response.create(
        model="remote", messages=[{"role": "user", "content": "hello"}], stream=True
    ) as raw:
        request_id = raw.headers["x-request-id"]
        assert float(raw.headers[OVERHEAD_HEADER]) >= 0
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices
        )
    assert text == "Hello from llmbridge."
    root, spans = receiver.trace_of(request_id, 2)
    assert root.attributes["llmbridge.streamed"] is True
    assert root.attributes["gen_ai.request.model"] == "remote"
    assert root.attributes["gen_ai.response.model"] == "upstream-model"
    assert root.attributes["gen_ai.provider.name"] == "openai"
    attempt = _only(root.children(spans))
    assert attempt.kind == CLIENT and attempt.name == "chat upstream-model"
    assert attempt.attributes["server.address"] == "127.0.0.1"
    assert attempt.attributes["server.port"] == inner.port
    assert attempt.attributes["llmbridge.deployment"] == "inner"


def test_retries_and_a_fallback_are_child_spans_each_with_its_deployment(
    traced: RunningServer,
    receiver: OtlpReceiver,
    upstream: ScriptedBackend,
    local: ScriptedBackend,
) -> None:
    busy = BackendError("busy upstream", status_code=503)
    upstream.enqueue(Script(fail_before=busy), Script(fail_before=busy))
    local.enqueue(Script(text=["from the fallback"]))
    client = openai_client(traced.url, api_key=KEY)
    raw = client.chat.completions.with_raw_response.create(
        model="flaky", messages=[{"role": "user", "content": "hello"}]
    )
    assert raw.parse().choices[0].message.content == "from the fallback"
    assert raw.headers["x-llmbridge-fallback"] == "local/scripted"
    root, spans = receiver.trace_of(raw.headers["x-request-id"], 4)
    tries = root.children(spans)
    assert [
        (
            s.attributes["llmbridge.deployment"],
            s.attributes["llmbridge.attempt"],
            s.attributes["llmbridge.retry"],
            s.attributes["llmbridge.fallback"],
            s.status == ERROR,
        )
        for s in tries
    ] == [
        ("inner", 1, False, False, True),
        ("inner", 2, True, False, True),
        ("local", 3, False, True, False),
    ]
    assert all(s.kind == CLIENT for s in tries)
    assert tries[0].attributes["error.type"] == "BackendHTTPError"
    assert tries[0].attributes["http.response.status_code"] == 503
    assert root.attributes["llmbridge.deployment"] == "local"
    assert root.attributes["http.response.status_code"] == 200


def test_a_streamed_tool_emulation_is_decision_and_answer_spans_under_its_attempt(
    traced: RunningServer, receiver: OtlpReceiver, toolless: ScriptedBackend
) -> None:
    # The decision is unreadable, so the fallback's plain answer is generated: two
    # model calls, each a span, children of the backend attempt they ran in.
    toolless.enqueue(Script(text=["no json here"]), Script(text=["Plain", " answer."]))
    client = openai_client(traced.url, api_key=KEY)
    with client.chat.completions.with_streaming_response.create(
        model="tiny",
        messages=[{"role": "user", "content": "Tell me a joke"}],
        tools=[TOOL],
        stream=True,
    ) as raw:
        assert raw.headers["x-llmbridge-tools"] == "emulated"
        request_id = raw.headers["x-request-id"]
        text = "".join(
            chunk.choices[0].delta.content or "" for chunk in raw.parse() if chunk.choices
        )
    assert text == "Plain answer."
    root, spans = receiver.trace_of(request_id, 4)
    assert root.name == "chat tiny" and root.attributes["llmbridge.streamed"] is True
    attempt = _only(root.children(spans))
    assert attempt.kind == CLIENT and attempt.attributes["llmbridge.deployment"] == "toolless"
    steps = attempt.children(spans)
    assert [(s.name, s.kind, s.attributes["llmbridge.tool_emulation.step"]) for s in steps] == [
        ("tool_emulation decision", INTERNAL, "decision"),
        ("tool_emulation answer", INTERNAL, "answer"),
    ]
    assert all(s.attributes["gen_ai.request.model"] == "tiny" for s in steps)
    assert all(s.attributes["gen_ai.usage.output_tokens"] >= 1 for s in steps)
    assert steps[0].end_ns <= steps[1].start_ns  # the answer comes after the decision


def test_a_claude_code_session_header_is_the_session_id(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    client = anthropic_client(traced.url, api_key=KEY)
    with client.messages.with_streaming_response.create(
        model="scripted",
        max_tokens=64,
        messages=[{"role": "user", "content": "hello"}],
        stream=True,
        extra_headers={"X-Claude-Code-Session-Id": "claude-session-42"},
    ) as raw:
        request_id = raw.headers["x-request-id"]
        assert float(raw.headers[OVERHEAD_HEADER]) >= 0
        events = [event.type for event in raw.parse()]
    assert events[-1] == "message_stop"
    root, _ = receiver.trace_of(request_id, 2)
    assert root.attributes["session.id"] == "claude-session-42"
    assert root.attributes["gen_ai.conversation.id"] == "claude-session-42"
    assert root.attributes["llmbridge.dialect"] == "anthropic"
    assert root.attributes["gen_ai.request.max_tokens"] == 64


def test_a_refused_request_is_a_span_with_its_error(
    traced: RunningServer, receiver: OtlpReceiver
) -> None:
    import openai

    client = openai_client(traced.url, api_key=KEY)
    with pytest.raises(openai.BadRequestError) as caught:
        client.chat.completions.create(model="scripted", messages=[])
    response = caught.value.response
    assert float(response.headers[OVERHEAD_HEADER]) >= 0
    root, _ = receiver.trace_of(response.headers["x-request-id"], 1)
    assert root.attributes["http.response.status_code"] == 400
    assert root.attributes["error.type"]


def test_off_by_default_no_exporter_is_made_and_nothing_is_sent() -> None:
    with OtlpReceiver() as quiet:
        backend = ScriptedBackend("local", models=("scripted",))
        with running_gateway({"local": backend}) as server:
            app: Any = server.server.config.app
            assert app.state.gateway.tracing is None
            raw = openai_client(server.url).chat.completions.with_raw_response.create(
                model="scripted", messages=[{"role": "user", "content": "hello"}]
            )
            assert float(raw.headers[OVERHEAD_HEADER]) >= 0
        # The gateway has stopped: a tracer would have flushed its spans by now.
        assert quiet.posts == 0 and quiet.spans == []


def test_off_the_tracing_sdk_is_never_imported() -> None:
    """In a fresh interpreter: a gateway without ``telemetry`` serves a request, and
    neither gateway/telemetry.py nor the SDK's tracing and exporter were loaded for it.
    (redis-py 8 imports the SDK's *metrics* package itself when the SDK is installed,
    for its own optional instrumentation: that is not ours to count.)"""
    script = """
import json, sys
from starlette.testclient import TestClient
from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import GatewayConfig

config = GatewayConfig.model_validate(
    {"backends": {"s": {"type": "scripted"}}, "default_backend": "s", "agent": {"enabled": False}}
)
app = create_app(config, backends={"s": ScriptedBackend("s")})
with TestClient(app) as client:
    reply = client.post(
        "/v1/chat/completions",
        json={"model": "s", "messages": [{"role": "user", "content": "hi"}]},
    )
    assert reply.status_code == 200, reply.text
    assert "x-llmbridge-overhead-ms" in reply.headers
ours = ("llmbridge.gateway.telemetry", "opentelemetry.sdk.trace", "opentelemetry.exporter")
print(json.dumps(sorted(name for name in sys.modules if name.startswith(ours))))
"""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LLMBRIDGE_"))}
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, env=env, check=False
    )
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []


def test_the_endpoint_and_service_name_come_from_the_file_or_the_otel_variables() -> None:
    environ = {
        "OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318",
        "OTEL_SERVICE_NAME": "from-env",
    }
    from_env = load_config(None, environ=environ).telemetry
    assert (from_env.otlp_endpoint, from_env.service_name) == ("http://collector:4318", "from-env")
    assert load_config(None, environ={}).telemetry.otlp_endpoint is None  # off by default


def test_the_file_wins_over_the_otel_variables(tmp_path: Any) -> None:
    path = tmp_path / "llmbridge.yaml"
    path.write_text("telemetry: {otlp_endpoint: 'http://file:4318/v1/traces'}\n")
    environ = {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://env:4318", "OTEL_SERVICE_NAME": "svc"}
    telemetry = load_config(path, environ=environ).telemetry
    assert telemetry.otlp_endpoint == "http://file:4318/v1/traces"
    assert telemetry.service_name == "svc"
    assert traces_url(telemetry.otlp_endpoint) == "http://file:4318/v1/traces"
    assert traces_url("http://env:4318/") == "http://env:4318/v1/traces"


def test_each_worker_of_serve_workers_traces_with_its_own_provider(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``llmbridge serve --workers 2`` with ``OTEL_EXPORTER_OTLP_ENDPOINT``: each worker
    opens its own tracer, so spans come from both, each process its own
    ``service.instance.id``."""
    import httpx

    from tests.gateway.test_workers import serving_workers

    with OtlpReceiver() as workers_receiver:
        monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", workers_receiver.url)
        monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "50")
        with serving_workers(tmp_path) as served:
            pids = {w["pid"] for w in served.health()["workers"]}

            def instances(spans: list[ReceivedSpan]) -> set[str]:
                return {s.resource["service.instance.id"] for s in spans}

            def both_traced(spans: list[ReceivedSpan]) -> bool:
                if len(instances(spans)) >= 2:
                    return True
                # New connections until the kernel has handed one to each worker.
                with httpx.Client(limits=httpx.Limits(max_keepalive_connections=0)) as http:
                    for _ in range(4):
                        body = {
                            "model": "scripted",
                            "messages": [{"role": "user", "content": "hi"}],
                        }
                        reply = http.post(served.url + "/v1/chat/completions", json=body)
                        assert reply.status_code == 200
                return False

            spans = workers_receiver.wait_for(both_traced, "spans from both workers")
            traced_pids = {int(i.rsplit(":", 1)[1]) for i in instances(spans)}
            assert traced_pids == pids
