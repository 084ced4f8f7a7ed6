"""Claude Code 2.1.330 against the gateway, without the CLI: the exact request it sends
(``tests/fixtures/requests/claude_code_2_1_330_messages.json``) through the official
``anthropic`` client, its ``HEAD /api/hello`` probe, and ``GET /v1/models`` in the
Models API's shape (the ``anthropic-version`` header), also through the official client.
The CLI itself runs in tests/e2e/test_claude_code.py."""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import httpx
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from tests.conftest import RunningServer, anthropic_client, openai_client, running_gateway

REQUESTS = Path(__file__).parents[1] / "fixtures" / "requests"
CAPTURED = REQUESTS / "claude_code_2_1_330_messages.json"
CURRENT = REQUESTS / "claude_code_2_1_332_messages.json"
"""Claude Code 2.1.332's first request of ``claude -p "say hi"``, whole (its default
tools, the environment in a system turn); what changed since 2.1.330 is wording."""
CURRENT_BETAS = [  # what Claude Code 2.1.332 sent in anthropic-beta with that request
    "claude-code-20250219",
    "interleaved-thinking-2025-05-14",
    "context-management-2025-06-27",
    "per-turn-control-2026-07-01",
    "mid-conversation-tool-changes-2026-07-01",
    "thinking-token-count-2026-05-13",
    "advanced-tool-use-2025-11-20",
    "effort-2025-11-24",
]
BETAS = [  # what Claude Code 2.1.330 sent in anthropic-beta with the captured request
    "advanced-tool-use-2025-11-20",
    "mid-conversation-tool-changes-2026-07-01",
    "per-turn-control-2026-07-01",
]
DEFERRED = {
    "name": "mcp__notes__search",
    "description": "Search the user's notes",
    "input_schema": {"type": "object", "properties": {"q": {"type": "string"}}},
    "defer_loading": True,
}
SEARCH_TOOL = {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"}


def captured() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(CAPTURED.read_text(encoding="utf-8"))
    return loaded


@pytest.fixture(scope="module")
def thinker() -> ScriptedBackend:
    return ScriptedBackend("thinker", models=("qwen3:8b", "qwen3:0.6b", "llama3.2"))


@pytest.fixture(scope="module")
def server(thinker: ScriptedBackend) -> Iterator[RunningServer]:
    with running_gateway(
        {"thinker": thinker},
        models=[{"name": "claude-*", "backend": "thinker", "model": "qwen3:8b"}],
        server={"api_keys": ["sk-test"]},
    ) as running:
        yield running


@pytest.fixture
def client(server: RunningServer, thinker: ScriptedBackend) -> anthropic.Anthropic:
    thinker.queue.clear()
    return anthropic_client(server.url, "sk-test")


# -- the captured request ------------------------------------------------------------


def test_the_captured_request_is_served_through_the_official_client(
    client: anthropic.Anthropic, thinker: ScriptedBackend
) -> None:
    thinker.enqueue(Script(thinking=["reasoning nobody asked to see"], text=["Hi", " there"]))
    events = list(client.beta.messages.create(betas=BETAS, **captured()))

    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    text = "".join(
        e.delta.text
        for e in events
        if e.type == "content_block_delta" and e.delta.type == "text_delta"
    )
    assert text == "Hi there"
    blocks = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert blocks == ["thinking", "text"]
    # display: "omitted": the thinking block comes without its text.
    deltas = [e.delta.type for e in events if e.type == "content_block_delta"]
    assert "thinking_delta" not in deltas

    sent = thinker.requests[-1]
    assert sent.model == "qwen3:8b"
    assert [m.role for m in sent.messages] == ["system", "user"]  # the empty system turn is gone
    assert sent.messages[-1].text == "say hi"
    assert sent.thinking is not None and sent.thinking.enabled
    assert sent.thinking.effort == "medium"  # output_config.effort
    assert [t.name for t in sent.tools] == ["Bash", "Edit", "Read"]


def test_the_current_releases_whole_request_is_served(
    client: anthropic.Anthropic, thinker: ScriptedBackend
) -> None:
    """2.1.332's request as it came, with its betas: the environment's system turn (text
    and ``output_config``) in its place, the prompt last, its deferred placeholder tool
    kept out of the backend's tools."""
    body: dict[str, Any] = json.loads(CURRENT.read_text(encoding="utf-8"))
    thinker.enqueue(Script(text=["Hi"]))
    events = list(client.beta.messages.create(betas=CURRENT_BETAS, **body))

    kinds = [event.type for event in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    sent = thinker.requests[-1]
    assert [m.role for m in sent.messages] == ["system", "user", "system"]
    assert sent.messages[1].text.endswith("say hi")
    assert sent.messages[2].text.startswith("# Environment")
    assert sent.thinking is not None and sent.thinking.effort == "medium"
    offered = {t["name"] for t in body["tools"]}
    deferred = {t["name"] for t in body["tools"] if t.get("defer_loading")}
    assert deferred == {"DeferredToolPlaceholder"}
    assert {t.name for t in sent.tools} == offered - deferred


def test_deferred_tools_never_reach_a_backend_without_tool_search(
    client: anthropic.Anthropic, thinker: ScriptedBackend
) -> None:
    body = copy.deepcopy(captured())
    body["tools"] = [SEARCH_TOOL, *body["tools"], DEFERRED]
    body["stream"] = False
    body["max_tokens"] = 4096  # the SDK streams anything larger
    thinker.enqueue(Script(text=["ok"]))
    reply = client.beta.messages.create(betas=BETAS, **body)
    assert [block.type for block in reply.content] == ["text"]
    sent = thinker.requests[-1]
    assert [t.name for t in sent.tools] == ["Bash", "Edit", "Read"]
    prompt = "\n".join(m.text for m in sent.messages)
    assert "mcp__notes__search" not in prompt and "tool_search" not in prompt


# -- the probe and the model list ----------------------------------------------------


def test_hello_probe_answers_200_without_a_key(server: RunningServer) -> None:
    probe = httpx.head(server.url + "/api/hello")
    assert probe.status_code == 200 and probe.content == b""
    assert httpx.get(server.url + "/api/hello").status_code == 200
    # Like HEAD /: only the probes are open.
    assert httpx.get(server.url + "/v1/models").status_code == 401


def _anthropic_ids(names: list[str]) -> list[str]:
    """The Anthropic list's ids for OpenAI's ``names``: each, then its discovery twin
    when the name says neither claude nor anthropic (dialects/anthropic/model_list.py)."""
    ids = []
    for name in names:
        ids.append(name)
        if "claude" not in name.lower() and "anthropic" not in name.lower():
            ids.append("anthropic/" + name)
    return ids


def test_models_in_the_anthropic_shape(client: anthropic.Anthropic, server: RunningServer) -> None:
    plain = [m.id for m in openai_client(server.url, "sk-test").models.list()]
    assert len(plain) >= 3
    names = _anthropic_ids(plain)

    page = client.models.list(limit=2)
    assert [m.id for m in page.data] == names[:2]
    assert page.has_more is True and page.first_id == names[0] and page.last_id == names[1]
    model = page.data[0]
    assert model.type == "model" and model.display_name == names[0]
    assert model.lifecycle == "active" and model.created_at.year >= 1970
    # The SDK pages on through after_id: every model, once, in the gateway's order.
    assert [m.id for m in client.models.list(limit=2)] == names
    before = client.models.list(before_id=names[2], limit=1)
    assert [m.id for m in before.data] == [names[1]] and before.has_more is True

    one = client.models.retrieve(names[1])
    assert (one.type, one.id) == ("model", names[1])
    served = client.models.retrieve("claude-opus-5-5")  # not listed, but servable
    assert served.id == "claude-opus-5-5"


# -- Claude Code's gateway model discovery ---------------------------------------------


def test_discovery_lists_every_model_under_an_id_claude_code_keeps(
    server: RunningServer, thinker: ScriptedBackend
) -> None:
    """Claude Code (CLAUDE_CODE_ENABLE_GATEWAY_MODEL_DISCOVERY=1) GETs
    /v1/models?limit=1000 and keeps the ids matching /(claude|anthropic)/i: each of the
    gateway's models is there as anthropic/<name>, shown under its own name, and a
    request naming that id is served by the model's own route."""
    headers = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
    listed = httpx.get(server.url + "/v1/models?limit=1000", headers=headers).json()["data"]
    kept = {m["id"]: m for m in listed if re.search("claude|anthropic", m["id"], re.IGNORECASE)}
    assert {"anthropic/qwen3:8b", "anthropic/llama3.2"} <= set(kept)
    assert kept["anthropic/llama3.2"]["display_name"] == "llama3.2"

    one = anthropic_client(server.url, "sk-test").models.retrieve("anthropic/llama3.2")
    assert (one.id, one.display_name) == ("anthropic/llama3.2", "llama3.2")

    thinker.enqueue(Script(text=["served"]))
    reply = anthropic_client(server.url, "sk-test").messages.create(
        model="anthropic/llama3.2", max_tokens=16, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.content[0].type == "text"
    assert thinker.requests[-1].model == "llama3.2"  # its own name, not the discovery id


# -- the billing-header line -----------------------------------------------------------


def test_requests_differing_only_in_the_billing_hash_reach_the_backend_alike(
    client: anthropic.Anthropic, thinker: ScriptedBackend
) -> None:
    """Some Claude Code versions put a per-request cch= hash in the billing line at the
    front of the system prompt; a backend that is not Anthropic's API gets the prompt
    without that line, identical from request to request (its prefix cache hits)."""
    prompts = []
    for cch in ("5e1f0", "a7c42"):
        body = copy.deepcopy(captured())
        line = body["system"][0]["text"]
        assert line.startswith("x-anthropic-billing-header:")
        body["system"][0]["text"] = f"{line} cch={cch};"
        thinker.enqueue(Script(text=["ok"]))
        list(client.beta.messages.create(betas=BETAS, **body))
        prompts.append(thinker.requests[-1].messages)
    assert prompts[0] == prompts[1]
    system = prompts[0][0]
    assert system.role == "system" and "x-anthropic-billing-header" not in system.text
    assert system.text.startswith("You are a Claude agent")


def test_the_raw_model_list_carries_every_field_claude_code_reads(server: RunningServer) -> None:
    headers = {"x-api-key": "sk-test", "anthropic-version": "2023-06-01"}
    body = httpx.get(server.url + "/v1/models", headers=headers).json()
    assert set(body) == {"data", "has_more", "first_id", "last_id"}
    first = body["data"][0]
    assert {"type", "id", "display_name", "created_at"} <= set(first)
    assert first["created_at"].endswith("Z")


@pytest.mark.parametrize(
    ("query", "param"),
    [("limit=0", "limit"), ("limit=many", "limit"), ("after_id=nope", "after_id")],
)
def test_a_bad_page_request_is_an_anthropic_400(
    client: anthropic.Anthropic, query: str, param: str
) -> None:
    with pytest.raises(anthropic.BadRequestError) as info:
        client.get(f"/v1/models?{query}", cast_to=object)
    error = info.value.body
    assert isinstance(error, dict) and error["type"] == "error"
    assert error["error"]["type"] == "invalid_request_error"
    assert param in error["error"]["message"]


def test_without_the_header_the_list_stays_openais(server: RunningServer) -> None:
    listed = openai_client(server.url, "sk-test").models.list()
    assert all(m.object == "model" for m in listed)
