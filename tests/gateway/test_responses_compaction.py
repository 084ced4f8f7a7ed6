"""Compaction on ``/v1/responses``, as Codex asks for it and the openai SDK does.

Codex 0.171.0 compacts remotely by ending a request with ``compaction_trigger``
(``tests/fixtures/requests/codex_0_171_0_websocket_frames.json``, whose frames are the
bodies here); the SDK's ``responses.compact`` posts to ``/v1/responses/compact``. On a
backend that cannot compact (the scripted one) the gateway asks the model for a summary
and seals it in the item; through an ``openai_responses`` backend (gateway A over
gateway B's ``/v1/responses``) the trigger is forwarded and B's own item comes back,
carried: either way the item, sent back, is understood. Also here: another backend's
reasoning and compaction left out and said so (``x-llmbridge-dropped-items``), and the
client's ``prompt_cache_key`` reaching the Responses backend.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from llmbridge.backends.openai_responses import OpenAIResponsesBackend
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.messages import ThinkingPart
from llmbridge.dialects.responses.summary import SUMMARY_INTRO, open_summary
from llmbridge.features.compaction import SUMMARY_PROMPT
from tests.conftest import RunningServer, openai_client, running_gateway
from tests.waiting import scaled

FRAMES: list[dict[str, Any]] = json.loads(
    (
        Path(__file__).parents[1] / "fixtures" / "requests" / "codex_0_171_0_websocket_frames.json"
    ).read_text()
)["frames"]
EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
SHELL_CALL = {
    "type": "function_call",
    "call_id": "call_1",
    "name": "exec_command",
    "arguments": json.dumps({"cmd": "echo hi"}),
}
"""The call Codex's history held before its trigger (the capture's server made it)."""


def codex_body(index: int, model: str) -> dict[str, Any]:
    """Codex's frame ``index`` as the body it sends over HTTP: the whole conversation
    (Codex sends ``previous_response_id`` only on a socket)."""
    frame = copy.deepcopy(FRAMES[index])
    frame.pop("type")
    frame.pop("previous_response_id", None)
    frame["model"] = model
    if index == 2:  # the turn's input, the call it made, then the output and the trigger
        frame["input"] = [*copy.deepcopy(FRAMES[1]["input"]), SHELL_CALL, *frame["input"]]
    return frame


def sse_events(reply: httpx.Response) -> list[dict[str, Any]]:
    events = [
        json.loads(line[len("data: ") :])
        for line in reply.text.splitlines()
        if line.startswith("data: ")
    ]
    for event in events:
        EVENTS.validate_python(event)  # each one as the openai SDK reads it
    return events


def last_texts(backend: ScriptedBackend) -> list[tuple[str, str]]:
    return [(m.role, m.text) for m in backend.requests[-1].messages]


# -- a backend that cannot compact: a summary --------------------------------------------


def test_codex_trigger_is_answered_with_one_compaction_item(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["The user said hi; ", "echo hi ran."]))
    reply = httpx.post(gateway.url + "/v1/responses", json=codex_body(2, "scripted"), timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-llmbridge-compaction"] == "summary"
    events = sse_events(reply)
    assert [e["type"] for e in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    (item,) = events[-1]["response"]["output"]
    assert item["type"] == "compaction" and item["id"].startswith("cmp_")
    summary = open_summary(item["encrypted_content"])
    assert summary == "The user said hi; echo hi ran."
    # The model was asked for the summary after the whole conversation, tools kept
    # but not to be called.
    asked = scripted.requests[-1]
    assert asked.messages[-1].text == SUMMARY_PROMPT
    assert asked.messages[-2].role == "tool"
    choice = asked.tool_choice
    assert not asked.tools or (choice is not None and choice.mode == "none")

    # Codex's next request carries the item after the kept user messages.
    after = codex_body(3, "scripted")
    after["input"][-1] = item
    scripted.enqueue(Script(text=["Carrying on."]))
    next_reply = httpx.post(gateway.url + "/v1/responses", json=after, timeout=30)
    assert next_reply.status_code == 200, next_reply.text
    assert last_texts(scripted)[-1] == ("user", SUMMARY_INTRO + summary)
    assert "x-llmbridge-dropped-items" not in next_reply.headers


def test_sdk_compact_returns_the_user_messages_then_the_item(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    scripted.enqueue(Script(text=["Wanted a haiku; got one."]))
    client = openai_client(gateway.url)
    conversation: list[Any] = [
        {"role": "user", "content": "Write a haiku."},
        {"role": "assistant", "content": "Old pond, a frog jumps."},
        {"role": "user", "content": "Thanks."},
    ]
    raw = client.responses.with_raw_response.compact(
        model="scripted", input=conversation, instructions="Be kind."
    )
    assert raw.headers["x-llmbridge-compaction"] == "summary"
    compacted = raw.parse()
    assert compacted.object == "response.compaction"
    output = raw.http_response.json()["output"]
    # The user messages as whole items (what Codex parses), then the one item.
    assert output[:-1] == [
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": text}]}
        for text in ("Write a haiku.", "Thanks.")
    ]
    item = compacted.output[-1]
    assert item.type == "compaction"
    assert open_summary(item.encrypted_content) == "Wanted a haiku; got one."
    assert compacted.usage.total_tokens > 0
    asked = scripted.requests[-1]
    assert [(m.role, m.text) for m in asked.messages] == [
        ("system", "Be kind."),
        ("user", "Write a haiku."),
        ("assistant", "Old pond, a frog jumps."),
        ("user", "Thanks."),
        ("user", SUMMARY_PROMPT),
    ]
    # The compacted output is the next request's history, as Codex uses it.
    scripted.enqueue(Script(text=["You are welcome."]))
    client.responses.create(
        model="scripted",
        input=[*output, {"role": "user", "content": "More?"}],
    )
    assert last_texts(scripted)[-2:] == [
        ("user", SUMMARY_INTRO + "Wanted a haiku; got one."),
        ("user", "More?"),
    ]


def test_a_compact_body_whose_stream_is_not_a_boolean_is_a_400(gateway: RunningServer) -> None:
    # The fuzzer's body: a stream of {} was taken as "answered whole" and served.
    body = {"model": "scripted", "input": "", "stream": {}}
    reply = httpx.post(gateway.url + "/v1/responses/compact", json=body, timeout=scaled(30))
    assert reply.status_code == 400 and "stream" in reply.json()["error"]["message"]


def test_compact_of_a_continued_response_compacts_the_whole_chain(
    gateway: RunningServer, scripted: ScriptedBackend
) -> None:
    client = openai_client(gateway.url)
    scripted.enqueue(Script(text=["Paris."]))
    first = client.responses.create(model="scripted", input="Capital of France?")
    scripted.enqueue(Script(text=["Asked about France."]))
    compacted = client.responses.compact(model="scripted", previous_response_id=first.id)
    assert [(m.role, m.text) for m in scripted.requests[-1].messages] == [
        ("user", "Capital of France?"),
        ("assistant", "Paris."),
        ("user", SUMMARY_PROMPT),
    ]
    assert open_summary(compacted.output[-1].encrypted_content) == "Asked about France."


# -- a backend that compacts: forwarded --------------------------------------------------


@pytest.fixture(scope="module")
def upstream() -> ScriptedBackend:
    return ScriptedBackend("b", models=("gpt-up",))


@pytest.fixture(scope="module")
def local() -> ScriptedBackend:
    return ScriptedBackend("local", models=("local-model",))


@pytest.fixture(scope="module")
def chained(upstream: ScriptedBackend, local: ScriptedBackend) -> Iterator[RunningServer]:
    """Gateway A: ``gpt-up`` on an openai_responses backend over gateway B (whose
    scripted backend cannot compact), ``local-model`` on a scripted backend of its own."""
    with running_gateway({"b": upstream}) as b:
        resp = OpenAIResponsesBackend("resp", b.url)
        models = [
            {"name": "gpt-up", "backend": "resp", "thinking": True},
            {"name": "local-model", "backend": "local"},
        ]
        with running_gateway({"resp": resp, "local": local}, models=models) as a:
            yield a


@pytest.fixture(autouse=True)
def _clear(upstream: ScriptedBackend, local: ScriptedBackend) -> None:
    upstream.queue.clear()
    local.queue.clear()


def test_the_trigger_is_forwarded_to_a_responses_backend_and_its_item_carried_back(
    chained: RunningServer, upstream: ScriptedBackend
) -> None:
    upstream.enqueue(Script(text=["B summarised it."]))
    reply = httpx.post(chained.url + "/v1/responses", json=codex_body(2, "gpt-up"), timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.headers["x-llmbridge-compaction"] == "native"
    # B got the trigger itself (and, unable to compact, asked its model for a summary).
    assert upstream.requests[-1].messages[-1].text == SUMMARY_PROMPT
    (item,) = sse_events(reply)[-1]["response"]["output"]
    assert item["type"] == "compaction"
    assert open_summary(item["encrypted_content"]) is None  # B's item, sealed by A
    # Sent back to A, it reaches B exactly as B made it: B reads its own summary.
    after = codex_body(3, "gpt-up")
    after["input"][-1] = item
    upstream.enqueue(Script(text=["Go on."]))
    assert httpx.post(chained.url + "/v1/responses", json=after, timeout=30).status_code == 200
    assert last_texts(upstream)[-1] == ("user", SUMMARY_INTRO + "B summarised it.")


def test_sdk_compact_through_a_responses_backend(
    chained: RunningServer, upstream: ScriptedBackend
) -> None:
    upstream.enqueue(Script(text=["Short."]))
    raw = openai_client(chained.url).responses.with_raw_response.compact(
        model="gpt-up", input=[{"role": "user", "content": "A long story."}]
    )
    assert raw.headers["x-llmbridge-compaction"] == "native"
    assert upstream.requests[-1].messages[-1].text == SUMMARY_PROMPT
    kept, item = raw.http_response.json()["output"]
    assert kept["content"] == [{"type": "input_text", "text": "A long story."}]
    assert item["type"] == "compaction" and open_summary(item["encrypted_content"]) is None


def test_another_backends_items_are_left_out_and_said_so(
    chained: RunningServer, upstream: ScriptedBackend, local: ScriptedBackend
) -> None:
    """B's reasoning and compaction, sent with a request for another backend, are not
    sent to it; the header counts them, the foreign compaction item with them."""
    upstream.enqueue(Script(thinking=["weigh it"], signature="sig-b", text=["Yes."]))
    client = openai_client(chained.url)
    first = client.responses.create(
        model="gpt-up",
        input="Is it?",
        reasoning={"effort": "high"},
        include=["reasoning.encrypted_content"],
    )
    upstream.enqueue(Script(text=["Short."]))
    compacted = client.responses.with_raw_response.compact(model="gpt-up", input="All of it.")
    reasoning = first.output[0].model_dump(exclude_none=True)
    assert reasoning["type"] == "reasoning" and reasoning["encrypted_content"]
    history = [
        {"role": "user", "content": "Is it?"},
        reasoning,
        compacted.http_response.json()["output"][-1],
        {"type": "compaction", "encrypted_content": "gAAAA-a-server-elsewhere"},
        {"role": "user", "content": "And now?"},
    ]
    local.enqueue(Script(text=["Now."]))
    raw = client.responses.with_raw_response.create(model="local-model", input=history)
    assert raw.headers["x-llmbridge-dropped-items"] == "reasoning=1,compaction=2"
    sent = local.requests[-1]
    assert not any(isinstance(p, ThinkingPart) for m in sent.messages for p in m.parts)
    assert [(m.role, m.text) for m in sent.messages] == [
        ("user", "Is it?"),
        ("user", "And now?"),
    ]
    # The same history back to B: its reasoning and its compaction reach it, exactly.
    upstream.enqueue(Script(text=["Still."]))
    raw = client.responses.with_raw_response.create(model="gpt-up", input=history)
    assert raw.headers["x-llmbridge-dropped-items"] == "compaction=1"
    parts = [p for m in upstream.requests[-1].messages for p in m.parts]
    assert [(p.text, p.signature) for p in parts if isinstance(p, ThinkingPart)] == [
        ("weigh it", "sig-b")
    ]


def test_prompt_cache_key_reaches_the_responses_backend(
    chained: RunningServer, upstream: ScriptedBackend
) -> None:
    upstream.enqueue(Script(text=["ok"]))
    openai.OpenAI(base_url=chained.url + "/v1", api_key="unused").responses.create(
        model="gpt-up", input="hi", prompt_cache_key=FRAMES[1]["prompt_cache_key"]
    )
    assert upstream.requests[-1].cache_key == FRAMES[1]["prompt_cache_key"]
