"""Capture real OpenCode sessions as JSON fixtures for the trace-builder tests.

    .venv/bin/python -m tests.profiler.capture      # rewrites tests/fixtures/opencode-sessions/

Each fixture is what ``GET /session/{id}/message`` returned from the pinned
``opencode serve`` (spawned by the profiler's own OpenCode provider, tools allowed in
its temporary directory) after a scripted model drove it down one of seed 004's
paths. The model is the gateway's scripted backend behind its OpenAI route, except
for split reasoning, which OpenCode produces from consecutive Anthropic thinking
blocks and so comes from a canned Anthropic stream. Ids and timestamps are OpenCode's
own; the temporary directory is replaced by ``$WORKDIR``.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import StopReason, Usage
from llmbridge.profiler.providers.opencode import OpenCodeSessionProvider
from llmbridge.profiler.providers.provider import PromptTimeoutError
from llmbridge.profiler.records.types import ProviderConfig
from tests.conftest import RunningServer, running_gateway
from tests.e2e.opencode import opencode_binary

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "opencode-sessions"


class InterleavedModel(ScriptedBackend):
    """Scripts, plus one reply OpenCode stores as reasoning, text, reasoning parts."""

    interleave_next = False

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if not self.interleave_next:
            async for event in super().chat(request):
                yield event
            return
        self.interleave_next = False
        self.requests.append(request)
        parts = PartsManager()
        yield ResponseStart(id="interleaved", model=request.model, created=0.0)
        for piece in (
            parts.thinking("The user wants two answers. "),
            parts.text("First answer.\n"),
            parts.thinking("Now the second one."),
            parts.text("Second answer."),
            parts.finish(),
        ):
            for event in piece:
                yield event
        usage = Usage(input_tokens=40, output_tokens=12)
        yield ResponseEnd(stop_reason=StopReason.END_TURN, usage=usage)


def _anthropic_event(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps({'type': kind, **data})}\n\n".encode()


def _split_reasoning_stream() -> list[bytes]:
    """Two thinking blocks in a row, then text: OpenCode keeps them as two parts."""
    events = [
        _anthropic_event(
            "message_start",
            {
                "message": {
                    "id": "msg_split",
                    "type": "message",
                    "role": "assistant",
                    "model": "m",
                    "content": [],
                    "stop_reason": None,
                    "stop_sequence": None,
                    "usage": {"input_tokens": 30, "output_tokens": 1},
                }
            },
        )
    ]
    for index, thought in enumerate(("First, the capital question. ", "Paris is the answer.")):
        events += [
            _anthropic_event(
                "content_block_start",
                {
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            ),
            _anthropic_event(
                "content_block_delta",
                {"index": index, "delta": {"type": "thinking_delta", "thinking": thought}},
            ),
            _anthropic_event(
                "content_block_delta",
                {"index": index, "delta": {"type": "signature_delta", "signature": f"sig{index}"}},
            ),
            _anthropic_event("content_block_stop", {"index": index}),
        ]
    events += [
        _anthropic_event(
            "content_block_start", {"index": 2, "content_block": {"type": "text", "text": ""}}
        ),
        _anthropic_event(
            "content_block_delta",
            {
                "index": 2,
                "delta": {"type": "text_delta", "text": "The capital of France is Paris."},
            },
        ),
        _anthropic_event("content_block_stop", {"index": 2}),
        _anthropic_event(
            "message_delta",
            {
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 18},
            },
        ),
        _anthropic_event("message_stop", {}),
    ]
    return events


def _anthropic_app() -> Starlette:
    async def messages(request: Request) -> Response:
        await request.body()

        async def body() -> AsyncIterator[bytes]:
            for chunk in _split_reasoning_stream():
                yield chunk

        return StreamingResponse(body(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/messages", messages, methods=["POST"])])


@dataclass
class Capture:
    name: str
    description: str
    prompts: list[str]
    scripts: list[Script] = field(default_factory=list)
    model: str = "gw/scripted"
    timeout: float = 60.0
    setup: Callable[[InterleavedModel], None] | None = None


def captures(workdir_marker: str) -> list[Capture]:
    notes = f"{workdir_marker}/notes.txt"
    todo = f"{workdir_marker}/todo.txt"
    missing = f"{workdir_marker}/missing.txt"
    return [
        Capture(
            "single_turn",
            "One prompt, one text reply, no tools.",
            ["What is the capital of France?"],
            [Script(text=["The capital ", "of France ", "is Paris."])],
        ),
        Capture(
            "multi_tool",
            "Two tools in one step (read twice), a shell command in the next, then text.",
            ["How many lines has notes.txt?"],
            [
                Script(
                    text=[],
                    tool_calls=[("read", {"filePath": notes}), ("read", {"filePath": todo})],
                ),
                Script(
                    text=[],
                    tool_calls=[
                        ("bash", {"command": "wc -l notes.txt", "description": "Count lines"})
                    ],
                ),
                Script(text=["notes.txt has 2 lines."]),
            ],
        ),
        Capture(
            "split_reasoning",
            "Reasoning split over two consecutive parts (two Anthropic thinking blocks).",
            ["What is the capital of France?"],
            model="an/m",
        ),
        Capture(
            "tool_error",
            "A tool call that fails (the file is missing), then the agent recovers.",
            ["Read missing.txt"],
            [
                Script(text=[], tool_calls=[("read", {"filePath": missing})]),
                Script(text=["missing.txt does not exist, ", "so there is nothing to read."]),
            ],
        ),
        Capture(
            "reasoning_text_boundary",
            "Reasoning, text, reasoning, text in one step: the boundaries must survive.",
            ["Give me two answers."],
            setup=lambda model: setattr(model, "interleave_next", True),
        ),
        Capture(
            "empty_response",
            "The model ends its turn without any text.",
            ["Say nothing."],
            [Script(text=[])],
        ),
        Capture(
            "timeout",
            "The model is too slow: the provider aborts at the deadline.",
            ["Take your time."],
            [Script(text=["Too ", "late."], chunk_delay=30)],
            timeout=3.0,
        ),
        Capture(
            "multi_turn",
            "Two prompts in one session: two user messages, each with its reply.",
            ["Hello!", "What did I just say?"],
            [Script(text=["Hello! How can I help?"]), Script(text=["You said hello."])],
        ),
    ]


def _scrub(value: Any, workdir: str) -> Any:
    text = json.dumps(value)
    return json.loads(text.replace(workdir, "$WORKDIR"))


async def _capture_all(model: InterleavedModel, gateway_url: str, anthropic_url: str) -> None:
    provider = OpenCodeSessionProvider(command=opencode_binary())
    anthropic = {
        "an": {
            "npm": "@ai-sdk/anthropic",
            "name": "canned anthropic",
            "options": {"baseURL": anthropic_url + "/v1", "apiKey": "x"},
            "models": {"m": {"reasoning": True, "limit": {"context": 32000, "output": 4000}}},
        }
    }
    FIXTURES.mkdir(parents=True, exist_ok=True)
    try:
        for capture in captures("$WORKDIR"):
            endpoint = {"url": gateway_url + "/v1", "limits": {"context": 32768, "output": 1024}}
            await provider.init(
                ProviderConfig(
                    model=capture.model,
                    permission="allow",
                    options={
                        "endpoint": endpoint if capture.model.startswith("gw/") else None,
                        "opencode_config": {"provider": anthropic},
                    },
                )
            )
            assert provider.server is not None and provider.server.workdir is not None
            workdir = str(provider.server.workdir)
            (provider.server.workdir / "notes.txt").write_text("first line\nsecond line\n")
            (provider.server.workdir / "todo.txt").write_text("- profile OpenCode\n")
            model.queue.clear()
            for script in capture.scripts:
                model.enqueue(_with_workdir(script, workdir))
            if capture.setup is not None:
                capture.setup(model)
            handle = await provider.create_session(
                system_instructions=None, scenario_id=capture.name, iteration=0
            )
            for text in capture.prompts:
                with contextlib.suppress(PromptTimeoutError):
                    await provider.prompt(handle, text, capture.timeout)
            messages = await provider._call("GET", f"session/{handle.session_id}/message")
            await provider.destroy_session(handle)
            fixture = {
                "name": capture.name,
                "description": capture.description,
                "opencode": "1.18.33",
                "messages": _scrub(messages, workdir),
            }
            path = FIXTURES / f"{capture.name}.json"
            path.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
            print(f"captured {path.name}: {len(messages)} messages")
    finally:
        await provider.shutdown()


def _with_workdir(script: Script, workdir: str) -> Script:
    calls = [
        (name, json.loads(json.dumps(args).replace("$WORKDIR", workdir)))
        for name, args in script.tool_calls
    ]
    return Script(
        text=script.text,
        thinking=script.thinking,
        tool_calls=calls,
        chunk_delay=script.chunk_delay,
    )


def main() -> None:
    model = InterleavedModel("model", models=("scripted",))
    with (
        running_gateway({"model": model}, models=[{"name": "scripted", "backend": "model"}]) as gw,
        RunningServer(_anthropic_app()) as canned,
    ):
        asyncio.run(_capture_all(model, gw.url, canned.url))


if __name__ == "__main__":
    main()
