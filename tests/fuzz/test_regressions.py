"""One test per bug the fuzz tests found (docs/RELIABILITY.md, "Fuzzing").

Each request here is the shrunk example that failed, sent to the running gateway.
"""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import httpx_sse
import orjson
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.web.render import Dialect
from tests.conftest import RunningServer
from tests.fuzz.shapes import assert_error_shape

USER = [{"role": "user", "content": "hi"}]


@pytest.fixture(scope="module")
def client(gateway: RunningServer) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=gateway.url, timeout=10) as http:
        yield http


def test_show_validates_its_body(client: httpx.Client) -> None:
    # Found by schemathesis (negative data): /api/show read only model/name and took
    # any other field of any type; Ollama's Go decoder rejects "verbose": "yes".
    response = client.post("/api/show", json={"model": "scripted", "verbose": "yes"})
    message = assert_error_shape(Dialect.OLLAMA, 400, response.content)
    assert message.startswith("verbose:")
    response = client.post("/api/show", json={"name": "scripted", "verbose": True})
    assert response.status_code == 200, response.text
    no_model = client.post("/api/show", json={"verbose": True})
    assert assert_error_shape(Dialect.OLLAMA, 400, no_model.content) == "'model' is required"


@pytest.mark.parametrize(
    ("path", "body", "param"),
    [
        (
            "/v1/chat/completions",
            {"messages": USER, "parallel_tool_calls": 0.0},
            "parallel_tool_calls",
        ),
        ("/v1/chat/completions", {"messages": USER, "max_tokens": True}, "max_tokens"),
        ("/v1/chat/completions", {"messages": USER, "stream": "false"}, "stream"),
        ("/v1/embeddings", {"input": "hi", "dimensions": False}, "dimensions"),
    ],
)
def test_openai_types_are_strict(
    client: httpx.Client, path: str, body: dict[str, object], param: str
) -> None:
    # Found by schemathesis (negative data): lax pydantic read 0.0 as false, true as 1
    # and "false" as false, where OpenAI's API answers 400.
    response = client.post(path, json={"model": "scripted", **body})
    assert_error_shape(Dialect.OPENAI, 400, response.content)
    assert response.json()["error"]["param"] == param


# U+0085 (NEL), U+2028 and U+2029 in a model name and in the reply text.
BREAKS = "a\u0085b\u2028c\u2029d"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/api/chat", {"messages": USER}),
        ("/v1/chat/completions", {"messages": USER, "stream_options": {"include_usage": True}}),
        ("/v1/messages", {"messages": USER, "max_tokens": 8}),
    ],
)
def test_streams_escape_unicode_line_breaks(
    client: httpx.Client, scripted: ScriptedBackend, path: str, body: dict[str, object]
) -> None:
    # Found by the dialect fuzz test: SSE data carried U+0085 / U+2028 / U+2029 raw;
    # httpx (and so httpx-sse) splits lines there, cutting an event's JSON in two.
    # The Ollama NDJSON encoder already escaped them; now every stream does.
    scripted.enqueue(Script(text=[BREAKS, BREAKS]))
    response = client.post(path, json={"model": BREAKS, "stream": True, **body})
    assert response.status_code == 200, response.text
    assert b"\xe2\x80\xa8" not in response.content and b"\xc2\x85" not in response.content
    if path == "/api/chat":
        frames = [orjson.loads(line) for line in response.iter_lines() if line]
        text = "".join(frame["message"]["content"] for frame in frames)
        assert frames[0]["model"] == BREAKS
    else:
        events = list(httpx_sse.EventSource(response).iter_sse())
        payloads = [orjson.loads(e.data) for e in events if e.data != "[DONE]"]
        if path == "/v1/messages":
            assert payloads[0]["message"]["model"] == BREAKS
            text = "".join(p["delta"].get("text", "") for p in payloads if "delta" in p)
        else:
            assert payloads[0]["model"] == BREAKS
            text = "".join(
                choice["delta"].get("content") or "" for p in payloads for choice in p["choices"]
            )
    assert text == BREAKS * 2
