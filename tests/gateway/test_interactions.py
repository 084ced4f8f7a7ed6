"""Google's Interactions API through the official ``google-genai`` SDK
(``client.interactions``, 3.3.0) against the gateway on loopback, over the scripted
backend, which shows exactly what each interaction asked the model: create (streamed
and not), continue with ``previous_interaction_id`` from the store (private to the
key), get and delete, function calling with the client's ``function_result`` turn, both
prefixes (``/v1beta``: the Python SDK's; ``/v1``: the JS SDK's), Google's errors with
their status codes for bad input, unknown ids and auth, and the ledger and request log
rows every interaction leaves."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from google import genai
from google.genai import _interactions as interaction_errors
from google.genai import types

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ThinkingPart, ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.web.render import Dialect
from tests.accounts.request_log_reads import logged_rows
from tests.conftest import RunningServer, running_gateway
from tests.fuzz.shapes import assert_error_shape
from tests.waiting import wait_until

KEYS = ("AIza-key-one", "AIza-key-two")
WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("interactions") / "gateway.db"


@pytest.fixture(scope="module")
def gateway(scripted: ScriptedBackend, database: Path) -> Iterator[RunningServer]:
    with running_gateway(
        {"scripted": scripted},
        server={"api_keys": list(KEYS)},
        database={"url": str(database)},
    ) as server:
        yield server


def interactions_client(
    gateway: RunningServer, key: str = KEYS[0], api_version: str | None = None
) -> genai.Client:
    options = types.HttpOptions(base_url=gateway.url, api_version=api_version)
    return genai.Client(api_key=key, http_options=options)


@pytest.fixture
def client(gateway: RunningServer) -> Iterator[genai.Client]:
    client = interactions_client(gateway)
    yield client
    client.close()


def said(request: ChatRequest) -> list[tuple[str, str]]:
    return [(message.role, message.text) for message in request.messages]


# -- create, continue, get, delete ------------------------------------------------------


def test_create_continue_get_and_delete(
    client: genai.Client, scripted: ScriptedBackend, gateway: RunningServer
) -> None:
    scripted.enqueue(Script(text=["Hi", " there."]))
    first = client.interactions.create(
        model="scripted",
        input="Hello!",
        system_instruction="Be brief.",
        generation_config={
            "temperature": 0.5,
            "top_p": 0.9,
            "seed": 3,
            "max_output_tokens": 64,
            "stop_sequences": ["END"],
        },
    )
    assert first.id and first.id.startswith("int_")
    assert first.status == "completed"
    assert first.output_text == "Hi there."
    assert [step.type for step in first.steps or ()] == ["model_output"]
    usage = first.usage
    assert usage is not None and usage.total_input_tokens and usage.total_output_tokens
    assert usage.total_tokens == usage.total_input_tokens + usage.total_output_tokens
    seen = scripted.requests[-1]
    assert said(seen) == [("system", "Be brief."), ("user", "Hello!")]
    params = seen.params
    assert (params.temperature, params.top_p, params.seed) == (0.5, 0.9, 3)
    assert (params.max_tokens, params.stop) == (64, ("END",))
    assert not seen.stream

    scripted.enqueue(Script(text=["Fine."]))
    second = client.interactions.create(
        model="scripted",
        input=[{"type": "text", "text": "How are you?"}],
        previous_interaction_id=first.id,
    )
    assert second.previous_interaction_id == first.id
    assert second.output_text == "Fine."
    # The stored conversation, then the new input; the earlier system instruction
    # belongs to the earlier interaction.
    assert said(scripted.requests[-1]) == [
        ("user", "Hello!"),
        ("assistant", "Hi there."),
        ("user", "How are you?"),
    ]

    got = client.interactions.get(first.id)
    assert (got.id, got.status, got.output_text) == (first.id, "completed", "Hi there.")
    assert got.usage is not None
    assert (got.usage.total_input_tokens, got.usage.total_output_tokens) == (
        usage.total_input_tokens,
        usage.total_output_tokens,
    )
    assert got.input is None
    with_input = client.interactions.get(second.id, include_input=True)
    assert with_input.input is not None
    assert with_input.previous_interaction_id == first.id

    # delete answers 200 with {} (the SDKs raise on a 204)
    deleted = httpx.delete(
        f"{gateway.url}/v1beta/interactions/{first.id}", headers={"x-goog-api-key": KEYS[0]}
    )
    assert (deleted.status_code, deleted.json()) == (200, {})
    with pytest.raises(interaction_errors.NotFoundError) as caught:
        client.interactions.get(first.id)
    assert caught.value.status_code == 404
    client.interactions.delete(second.id)
    with pytest.raises(interaction_errors.NotFoundError):
        client.interactions.create(
            model="scripted", input="again", previous_interaction_id=second.id
        )


def test_a_stored_interaction_is_private_to_its_key(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    owner, other = interactions_client(gateway, KEYS[0]), interactions_client(gateway, KEYS[1])
    scripted.enqueue(Script(text=["mine"]))
    mine = owner.interactions.create(model="scripted", input="secret")
    assert mine.id is not None
    for attempt in (
        lambda: other.interactions.get(mine.id),
        lambda: other.interactions.delete(mine.id),
        lambda: other.interactions.create(
            model="scripted", input="hi", previous_interaction_id=mine.id
        ),
    ):
        with pytest.raises(interaction_errors.NotFoundError):
            attempt()
    assert owner.interactions.get(mine.id).output_text == "mine"


def test_store_false_keeps_nothing(client: genai.Client, scripted: ScriptedBackend) -> None:
    scripted.enqueue(Script(text=["gone"]))
    reply = client.interactions.create(model="scripted", input="hi", store=False)
    assert reply.output_text == "gone" and reply.id is not None
    with pytest.raises(interaction_errors.NotFoundError):
        client.interactions.get(reply.id)


def test_without_stored_interactions_previous_interaction_id_is_a_400(
    tmp_path: Path, scripted: ScriptedBackend
) -> None:
    """Neither the agent nor stored replies: the gateway is stateless, and opens no
    database for them."""
    database = tmp_path / "never.db"
    with running_gateway(
        {"scripted": scripted},
        database={"url": str(database)},
        agent={"enabled": False, "store_responses": "off"},
    ) as server:
        client = interactions_client(server, key="x")
        scripted.enqueue(Script(text=["stateless"]))
        reply = client.interactions.create(model="scripted", input="hi")
        assert reply.output_text == "stateless" and reply.id is not None
        with pytest.raises(interaction_errors.BadRequestError) as refused:
            client.interactions.create(
                model="scripted", input="again", previous_interaction_id=reply.id
            )
        assert "previous_interaction_id" in str(refused.value)
        with pytest.raises(interaction_errors.NotFoundError) as missing:
            client.interactions.get(reply.id)
        assert "agent.store_responses: off" in str(missing.value)
    assert not database.exists()


def test_a_chain_past_max_chain_turns_is_a_400_naming_previous_interaction_id(
    tmp_path: Path, scripted: ScriptedBackend
) -> None:
    with running_gateway(
        {"scripted": scripted},
        database={"url": str(tmp_path / "chain.db")},
        server={"limits": {"max_chain_turns": 2}},
    ) as server:
        client = interactions_client(server, key="x")
        scripted.enqueue(Script(text=["one"]), Script(text=["two"]))
        first = client.interactions.create(model="scripted", input="1")
        second = client.interactions.create(
            model="scripted", input="2", previous_interaction_id=first.id
        )
        asked = len(scripted.requests)
        reply = httpx.post(
            f"{server.url}/v1beta/interactions",
            json={"model": "scripted", "input": "3", "previous_interaction_id": second.id},
        )
        message = assert_error_shape(Dialect.GEMINI, 400, reply.content)
        assert "previous_interaction_id" in message and "max_chain_turns" in message
        assert len(scripted.requests) == asked  # refused before the model was called


# -- streaming --------------------------------------------------------------------------


def test_a_streamed_interaction_follows_the_event_grammar(
    client: genai.Client, scripted: ScriptedBackend, gateway: RunningServer
) -> None:
    scripted.enqueue(Script(thinking=["Think", "ing."], signature="c2lnbmVk", text=["A", "B", "C"]))
    events = list(
        client.interactions.create(
            model="scripted",
            input="Go.",
            generation_config={"thinking_level": "high"},
            stream=True,
        )
    )
    kinds = [event.event_type for event in events]
    assert kinds == [
        "interaction.created",
        "step.start",
        "step.delta",
        "step.delta",
        "step.delta",  # the thought's signature, whole
        "step.stop",
        "step.start",
        "step.delta",
        "step.delta",
        "step.delta",
        "step.stop",
        "interaction.completed",
    ]
    created, completed = events[0], events[-1]
    assert created.interaction.status == "in_progress"
    assert completed.interaction.id == created.interaction.id
    assert completed.interaction.status == "completed"
    assert [e.step.type for e in events if e.event_type == "step.start"] == [
        "thought",
        "model_output",
    ]
    assert [e.index for e in events if e.event_type.startswith("step.")] == [0] * 5 + [1] * 5
    deltas = [e.delta for e in events if e.event_type == "step.delta"]
    assert [d.type for d in deltas] == ["thought_summary"] * 2 + ["thought_signature"] + [
        "text"
    ] * 3
    assert "".join(d.text for d in deltas if d.type == "text") == "ABC"
    usage = completed.interaction.usage
    assert usage is not None and usage.total_output_tokens and usage.total_input_tokens
    assert scripted.requests[-1].stream
    assert scripted.requests[-1].thinking is not None
    assert scripted.requests[-1].thinking.effort == "high"

    # Stored before interaction.completed was sent: its steps, signature included.
    stored = client.interactions.get(completed.interaction.id)
    assert [s.type for s in stored.steps or ()] == ["thought", "model_output"]
    # ... and sent back, the model sees its own thinking and signature again.
    scripted.enqueue(Script(text=["again"]))
    client.interactions.create(
        model="scripted", input="More.", previous_interaction_id=completed.interaction.id
    )
    turn = scripted.requests[-1].messages[1]
    assert turn.role == "assistant"
    assert turn.parts[0] == ThinkingPart("Thinking.", signature="c2lnbmVk")

    # GET with stream=true replays it: each step whole, then the resource.
    replayed = list(client.interactions.get(completed.interaction.id, stream=True))
    assert [e.event_type for e in replayed] == [
        "interaction.created",
        "step.start",
        "step.stop",
        "step.start",
        "step.stop",
        "interaction.completed",
    ]
    assert [e.step.type for e in replayed if e.event_type == "step.start"] == [
        "thought",
        "model_output",
    ]

    # The wire: named events, each data's event_type, [DONE] last.
    scripted.enqueue(Script(text=["x"]))
    raw = httpx.post(
        f"{gateway.url}/v1beta/interactions",
        json={"model": "scripted", "input": "x", "stream": True, "store": False},
        headers={"x-goog-api-key": KEYS[0]},
    )
    assert raw.headers["content-type"].startswith("text/event-stream")
    blocks = [b for b in raw.text.split("\n\n") if b]
    assert blocks[0].startswith("event: interaction.created\ndata: {")
    assert '"event_type":"interaction.created"' in blocks[0]
    assert blocks[-1] == "data: [DONE]"


def test_a_failure_mid_stream_is_an_error_event(
    client: genai.Client, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["partial", " more"], fail_after=1, in_band=True))
    events = list(client.interactions.create(model="scripted", input="go", stream=True))
    assert events[-1].event_type == "error"
    assert events[-1].error is not None and events[-1].error.message
    assert events[-1].error.code == "unavailable"  # the backend's 502, as Google names it
    deltas = [e.delta.text for e in events if e.event_type == "step.delta"]
    assert deltas == ["partial"]


# -- function calling -------------------------------------------------------------------


def test_function_calling_with_a_function_result_turn(
    client: genai.Client, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=[], tool_calls=[("get_weather", {"city": "Paris"})]))
    first = client.interactions.create(
        model="scripted",
        input="Weather in Paris?",
        tools=[WEATHER],
        generation_config={"tool_choice": "any"},
    )
    assert first.status == "requires_action"
    calls = [step for step in first.steps or () if step.type == "function_call"]
    assert len(calls) == 1
    call = calls[0]
    assert (call.name, call.arguments) == ("get_weather", {"city": "Paris"})
    seen = scripted.requests[-1]
    assert [t.name for t in seen.tools] == ["get_weather"]
    assert seen.tools[0].input_schema == WEATHER["parameters"]
    # tool_choice "any" reached serving, which says it to a backend that cannot
    # enforce it (features/tool_choice.py).
    assert "You must answer by calling" in seen.messages[0].text

    scripted.enqueue(Script(text=["Sunny in Paris."]))
    second = client.interactions.create(
        model="scripted",
        previous_interaction_id=first.id,
        input=[{"type": "function_result", "call_id": call.id, "result": "sunny"}],
        tools=[WEATHER],
    )
    assert second.status == "completed" and second.output_text == "Sunny in Paris."
    messages = scripted.requests[-1].messages
    assert [m.role for m in messages] == ["user", "assistant", "tool"]
    assert messages[1].tool_calls[0].id == call.id
    assert messages[2].parts == (
        ToolResultPart(tool_call_id=call.id, content="sunny", name="get_weather"),
    )

    # Stateless: the whole conversation as steps, the result an object.
    scripted.enqueue(Script(text=["Still sunny."]))
    third = client.interactions.create(
        model="scripted",
        store=False,
        tools=[WEATHER],
        input=[
            {"type": "user_input", "content": [{"type": "text", "text": "Weather in Paris?"}]},
            {"type": "function_call", "id": "c1", "name": "get_weather", "arguments": {}},
            {"type": "function_result", "call_id": "c1", "result": {"sky": "clear"}},
        ],
    )
    assert third.output_text == "Still sunny."
    result = scripted.requests[-1].messages[-1].parts[0]
    assert isinstance(result, ToolResultPart)
    assert (result.content, result.name) == ('{"sky":"clear"}', "get_weather")


# -- both prefixes ----------------------------------------------------------------------


def test_the_v1beta_prefix_serves_the_same_api(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    """google-genai 3.3.0 defaults to ``/v1`` (the fixture's client); ``api_version=
    "v1beta"`` (or ``GOOGLE_GENAI_API_VERSION=beta``) sends the same calls to ``/v1beta``."""
    client = interactions_client(gateway, api_version="v1beta")
    scripted.enqueue(Script(text=["beta reply"]))
    reply = client.interactions.with_raw_response.create(model="scripted", input="hi")
    assert reply.http_response.request.url.path == "/v1beta/interactions"
    created = reply.parse()
    assert created.output_text == "beta reply" and created.id is not None
    assert client.interactions.get(created.id).output_text == "beta reply"
    # One store behind both prefixes.
    default = interactions_client(gateway)
    assert default.interactions.get(created.id).id == created.id
    client.interactions.delete(created.id)
    missing = httpx.get(
        f"{gateway.url}/v1/interactions/{created.id}", headers={"x-goog-api-key": KEYS[0]}
    )
    assert "not found" in assert_error_shape(Dialect.GEMINI, 404, missing.content)


# -- errors -------------------------------------------------------------------------------

BAD_BODIES: list[tuple[Any, int, str]] = [
    ("not an object", 400, ""),
    ({"input": "no model"}, 400, "model"),
    ({"model": "scripted"}, 400, "input"),
    ({"model": "scripted", "input": 42}, 400, "input"),
    ({"model": "scripted", "input": [{"type": "video_call"}]}, 400, "input.0.type"),
    (
        {"model": "scripted", "input": [{"type": "function_result", "result": "x"}]},
        400,
        "input.0.call_id",
    ),
    (
        {"model": "scripted", "input": [{"type": "audio", "data": "AAAA"}]},
        400,
        "input.0",
    ),
    ({"model": "scripted", "input": "hi", "tools": [{"type": "google_search"}]}, 400, "tools.0"),
    ({"agent": "deep-research-pro-preview-12-2025", "input": "hi"}, 400, "agent"),
    ({"model": "scripted", "input": "hi", "background": True}, 400, "background"),
    (
        {"model": "scripted", "input": "hi", "generation_config": {"thinking_level": "max"}},
        400,
        "thinking_level",
    ),
    ({"model": "scripted", "input": "hi", "stream": "yes"}, 400, "stream"),
    (
        {"model": "scripted", "input": "hi", "previous_interaction_id": "x" * 201},
        400,
        "previous_interaction_id",
    ),
    (
        {"model": "scripted", "input": "hi", "previous_interaction_id": "int_missing"},
        404,
        "int_missing",
    ),
]


@pytest.mark.parametrize("prefix", ["/v1beta", "/v1"])
@pytest.mark.parametrize(("body", "status", "named"), BAD_BODIES)
def test_bad_input_is_googles_error_with_its_status(
    gateway: RunningServer, prefix: str, body: Any, status: int, named: str
) -> None:
    reply = httpx.post(
        f"{gateway.url}{prefix}/interactions", json=body, headers={"x-goog-api-key": KEYS[0]}
    )
    message = assert_error_shape(Dialect.GEMINI, status, reply.content)
    assert named in message


def test_the_sdk_raises_googles_error_for_bad_input(client: genai.Client) -> None:
    with pytest.raises(interaction_errors.BadRequestError) as caught:
        client.interactions.create(model="scripted", input="hi", tools=[{"type": "url_context"}])
    assert caught.value.status_code == 400
    assert "url_context" in str(caught.value)


@pytest.mark.parametrize("prefix", ["/v1beta", "/v1"])
def test_auth_takes_googles_key_header_and_query_and_refuses_in_googles_shape(
    gateway: RunningServer, scripted: ScriptedBackend, prefix: str
) -> None:
    url = f"{gateway.url}{prefix}/interactions"
    body = {"model": "scripted", "input": "hi", "store": False}
    for headers in ({}, {"x-goog-api-key": "AIza-wrong"}):
        refused = httpx.post(url, json=body, headers=headers)
        assert_error_shape(Dialect.GEMINI, 401, refused.content)
    refused = httpx.get(f"{url}/int_x", params={"key": "AIza-wrong"})
    assert_error_shape(Dialect.GEMINI, 401, refused.content)
    scripted.enqueue(Script(text=["by query"]))
    by_query = httpx.post(url, json=body, params={"key": KEYS[1]})
    assert by_query.status_code == 200, by_query.text
    assert by_query.json()["steps"][0]["content"][0]["text"] == "by query"
    wrong = interactions_client(gateway, key="AIza-wrong")  # held: it closes when collected
    with pytest.raises(interaction_errors.AuthenticationError) as caught:
        wrong.interactions.create(model="scripted", input="hi")
    assert caught.value.status_code == 401


# -- the ledger and the request log ---------------------------------------------------------


def test_interactions_land_in_the_ledger_and_the_request_log(
    gateway: RunningServer, scripted: ScriptedBackend, database: Path
) -> None:
    client = interactions_client(gateway, KEYS[1])
    scripted.enqueue(Script(text=["logged"]))
    created = client.interactions.with_raw_response.create(model="scripted", input="log me")
    request_id = created.headers["x-request-id"]
    interaction = created.parse()
    assert interaction.id is not None
    streamed = httpx.post(
        f"{gateway.url}/v1/interactions",
        json={"model": "scripted", "input": "and me", "stream": True},
        headers={"x-goog-api-key": KEYS[1]},
    )
    stream_request_id = streamed.headers["x-request-id"]
    missing = httpx.get(
        f"{gateway.url}/v1beta/interactions/int_nope", headers={"x-goog-api-key": KEYS[1]}
    )
    assert missing.status_code == 404
    wanted = {request_id, stream_request_id, missing.headers["x-request-id"]}
    rows: dict[str, Any] = {}

    def found() -> dict[str, Any]:
        rows.update({r.request_id: r for r in logged_rows(str(database), 1)})
        return rows

    wait_until(lambda: wanted <= set(found()), "the interactions' rows in the request log")
    one, two = rows[request_id], rows[stream_request_id]
    refused = rows[missing.headers["x-request-id"]]
    for row in (one, two, refused):
        assert row.dialect == "interactions"
        assert row.endpoint is not None and row.endpoint.startswith("/v1beta/interactions")
    assert (one.status, one.model, one.streamed) == (200, "scripted", False)
    assert one.input_tokens and one.output_tokens
    assert interaction.usage is not None
    assert one.output_tokens == interaction.usage.total_output_tokens
    assert (two.status, two.streamed) == (200, True) and two.output_tokens
    assert refused.status == 404
