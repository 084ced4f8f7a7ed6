"""The ``opencode`` backend's deadlines fit the model behind it (backends/opencode/
deadlines.py): a model on a local provider gets longer defaults, explicit settings win,
and a missed deadline's message says which one passed, after how long and how to raise
it, in every dialect the gateway speaks (official clients against a gateway over the
fake OpenCode server, opencode_fake.py; deadlines under a second)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import anthropic
import ollama
import openai
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from llmbridge.backends.opencode import OpenCodeBackend, OpenCodeTimeouts
from llmbridge.backends.opencode.deadlines import (
    LOCAL_IDLE_TIMEOUT,
    LOCAL_PROMPT_TIMEOUT,
    Deadlines,
    for_local_provider,
)
from llmbridge.backends.opencode.prompt import ModelRef
from llmbridge.core.hosts import is_loopback_url
from llmbridge.gateway.config import ServerConfig
from llmbridge.serving.build import build_backend
from llmbridge.serving.config import OpenCodeBackendConfig
from tests.backends.opencode_fake import (
    Event,
    FakeOpenCode,
    Prompt,
    delta,
    make_backend,
    opening,
)
from tests.conftest import (
    RunningServer,
    anthropic_client,
    ollama_client,
    openai_client,
    running_gateway,
)

HOST = ServerConfig(port=11435).serving_host()


def built(**settings: Any) -> OpenCodeBackend:
    config = OpenCodeBackendConfig.model_validate({"type": "opencode", **settings})
    backend = build_backend("oc", config, HOST)
    assert isinstance(backend, OpenCodeBackend)
    return backend


# -- which deadlines a prompt gets --------------------------------------------------------


def test_a_model_on_the_gateway_itself_gets_the_local_defaults() -> None:
    """The documented zero-setup configuration (docs/OPENCODE.md): OpenCode's model is
    the gateway's own embedded model, which evaluates OpenCode's prompt on this CPU."""
    backend = built(
        model="gw/smollm2",
        providers={
            "gw": {"url": "self", "models": {"smollm2": {"context": 8192}}},
            "lan": {"url": "http://10.0.0.5:8000/v1"},
        },
    )
    local = backend.timeouts_for(ModelRef("gw", "smollm2"))
    assert (local.prompt, local.idle) == (LOCAL_PROMPT_TIMEOUT, LOCAL_IDLE_TIMEOUT)
    assert (local.total, local.delete) == (None, 5)
    for remote in (ModelRef("lan", "big"), ModelRef("anthropic", "claude-sonnet-4-5")):
        assert backend.timeouts_for(remote) == OpenCodeTimeouts(prompt=20, idle=30)


@pytest.mark.parametrize(
    ("settings", "prompt", "idle"),
    [
        ({"prompt_timeout": 45}, 45, LOCAL_IDLE_TIMEOUT),
        ({"idle_timeout": 90}, LOCAL_PROMPT_TIMEOUT, 90),
        ({"completion_timeout": 90}, LOCAL_PROMPT_TIMEOUT, 90),  # the idle deadline's old name
        ({"prompt_timeout": 20, "idle_timeout": 30}, 20, 30),  # the defaults, given: kept
    ],
)
def test_explicit_settings_always_win(settings: dict[str, Any], prompt: float, idle: float) -> None:
    backend = built(model="gw/m", providers={"gw": {"url": "self"}}, **settings)
    timeouts = backend.timeouts_for(ModelRef("gw", "m"))
    assert (timeouts.prompt, timeouts.idle) == (prompt, idle)


def test_loopback_providers_are_local_wherever_they_are_defined() -> None:
    backend = built(
        providers={"llamacpp": {"url": "http://127.0.0.1:8080/v1"}},
        opencode_config={
            "provider": {
                "ollama": {"options": {"baseURL": "http://localhost:11434/v1"}},
                "cloud": {"options": {"baseURL": "https://api.example.com/v1"}},
            }
        },
    )
    assert backend.local_providers == {"llamacpp", "ollama"}


async def test_a_server_given_by_url_has_its_loopback_providers_found(
    fake: FakeOpenCode,
) -> None:
    fake.reset(
        providers=[
            {"id": "near", "options": {"baseURL": "http://[::1]:8000/v1"}, "models": {"m": {}}},
            {"id": "far", "options": {"baseURL": "https://example.com/v1"}, "models": {"m": {}}},
        ]
    )
    config = OpenCodeBackendConfig.model_validate({"type": "opencode", "url": fake.url})
    opencode = build_backend("oc", config, HOST)
    assert isinstance(opencode, OpenCodeBackend)
    await opencode.start()
    try:
        assert opencode.local_providers == {"near"}
        assert opencode.timeouts_for(ModelRef("near", "m")).prompt == LOCAL_PROMPT_TIMEOUT
        assert opencode.timeouts_for(ModelRef("far", "m")).prompt == 20
    finally:
        await opencode.aclose()


@pytest.mark.parametrize(
    ("url", "local"),
    [
        ("http://127.0.0.1:11435/v1", True),
        ("http://127.1.2.3/v1", True),
        ("http://localhost:11434", True),
        ("http://[::1]:8000/v1", True),
        ("http://10.0.0.5:8000/v1", False),
        ("https://api.anthropic.com", False),
        ("not a url", False),
    ],
)
def test_is_loopback_url(url: str, local: bool) -> None:
    assert is_loopback_url(url) is local


def test_a_local_default_is_named_in_the_message() -> None:
    timeouts = for_local_provider(OpenCodeTimeouts(), frozenset({"idle_timeout"}))
    deadlines = Deadlines(timeouts, sent=100.0)
    message = deadlines.message("oc", deadlines.prompt, 400.0, None)
    assert message == (
        "backend 'oc': OpenCode did not start its reply within 300 s. The `prompt_timeout` "
        "deadline (its default for a model on a local provider) passed 300.0 s after the "
        "prompt was sent; to wait longer, raise `prompt_timeout` "
        "(backends.oc.prompt_timeout)"
    )
    assert "default" not in deadlines.message("oc", deadlines.idle, 130.0, None)


# -- the message, in every dialect ---------------------------------------------------------

HOW_TO_RAISE = "raise `prompt_timeout` (backends.oc.prompt_timeout)"


@pytest.fixture(scope="module")
def gateway(fake_server: FakeOpenCode) -> Iterator[RunningServer]:  # type: ignore[override]
    opencode = make_backend(fake_server.url, prompt=0.3, idle=0.5)
    # No breaker: every test here fails its request on purpose.
    with running_gateway({"oc": opencode}, resilience={"breaker_failures": 0}) as server:
        yield server


def assert_says_the_prompt_deadline(message: str) -> None:
    assert "OpenCode did not start its reply within 0.3 s" in message
    assert "The `prompt_timeout` deadline passed " in message
    assert " s after the prompt was sent" in message
    assert HOW_TO_RAISE in message


def test_ollama(gateway: RunningServer, fake: FakeOpenCode) -> None:
    with pytest.raises(ollama.ResponseError) as caught:
        ollama_client(gateway.url).chat(model="m", messages=[{"role": "user", "content": "hi"}])
    assert caught.value.status_code == 504
    assert_says_the_prompt_deadline(caught.value.error)


def test_openai_chat(gateway: RunningServer, fake: FakeOpenCode) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        openai_client(gateway.url).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 504
    assert_says_the_prompt_deadline(caught.value.message)


def test_openai_responses(gateway: RunningServer, fake: FakeOpenCode) -> None:
    with pytest.raises(openai.APIStatusError) as caught:
        openai_client(gateway.url).responses.create(model="m", input="hi")
    assert caught.value.status_code == 504
    assert_says_the_prompt_deadline(caught.value.message)


def test_anthropic(gateway: RunningServer, fake: FakeOpenCode) -> None:
    with pytest.raises(anthropic.APIStatusError) as caught:
        anthropic_client(gateway.url).messages.create(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        )
    assert caught.value.status_code == 504
    assert_says_the_prompt_deadline(caught.value.message)


def test_gemini(gateway: RunningServer, fake: FakeOpenCode) -> None:
    client = genai.Client(api_key="x", http_options=genai_types.HttpOptions(base_url=gateway.url))
    try:
        with pytest.raises(genai_errors.APIError) as caught:
            client.models.generate_content(model="m", contents="hi")
    finally:
        client.close()
    assert caught.value.code == 504
    assert_says_the_prompt_deadline(caught.value.message or "")


def silent_after(text: str) -> Prompt:
    def events(sid: str) -> list[Event | str]:
        return [*opening(sid), delta(sid, text)]

    return Prompt(events=events)


def assert_says_the_idle_deadline(message: str) -> None:
    assert "OpenCode sent nothing more for 0.5 s while replying" in message
    assert "The `idle_timeout` deadline passed " in message
    assert "raise `idle_timeout` (backends.oc.idle_timeout)" in message


def test_a_stream_that_goes_silent_says_so_in_the_ollama_stream(
    gateway: RunningServer, fake: FakeOpenCode
) -> None:
    fake.prompts.append(silent_after("so far"))
    received: list[str] = []
    with pytest.raises(ollama.ResponseError) as caught:
        for chunk in ollama_client(gateway.url).chat(
            model="m", messages=[{"role": "user", "content": "hi"}], stream=True
        ):
            received.append(chunk.message.content or "")
    assert "".join(received) == "so far"
    assert_says_the_idle_deadline(caught.value.error)


def test_a_stream_that_goes_silent_says_so_in_the_anthropic_stream(
    gateway: RunningServer, fake: FakeOpenCode
) -> None:
    fake.prompts.append(silent_after("so far"))
    with (
        pytest.raises(anthropic.APIError) as caught,
        anthropic_client(gateway.url).messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hi"}]
        ) as stream,
    ):
        stream.until_done()
    assert_says_the_idle_deadline(caught.value.message)
