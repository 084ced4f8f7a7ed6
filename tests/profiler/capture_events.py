"""Capture real OpenCode event sequences as fixtures for the terminal-event tests.

    .venv/bin/python -m tests.profiler.capture_events   # rewrites tests/fixtures/opencode-events/

Each fixture is the ``/event`` stream of one session as the profiler's OpenCode
provider received it (de-duplicated by event id, as its ``EventHub`` does), from the
session's creation until a second after the prompt returned, so it goes on past the
event that ended the turn. It comes from the pinned ``opencode serve`` with the
gateway's scripted backend as its model (as ``capture.py`` does for messages): a
text reply, a tool step followed by a text step, a model that answers 400, and a
prompt to an agent OpenCode does not have. Streaming ``message.part.delta`` events
are dropped (they carry only text and are many); the temporary directory is
replaced by ``$WORKDIR``.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from llmbridge.backends.opencode.event_hub import session_of
from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.errors import InvalidRequestError
from llmbridge.profiler.providers.opencode import OpenCodeSessionProvider
from llmbridge.profiler.records.types import ProviderConfig
from tests.conftest import running_gateway
from tests.e2e.opencode import opencode_binary

FIXTURES = Path(__file__).resolve().parent.parent / "fixtures" / "opencode-events"


class RecordingProvider(OpenCodeSessionProvider):
    """The profiler's provider, keeping every event its hubs receive."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.events: list[dict[str, Any]] = []

    async def _open_channel(self, directory: Path | None) -> Any:
        channel = await super()._open_channel(directory)
        dispatch = channel.hub._dispatch

        def record(event: dict[str, Any]) -> None:
            self.events.append(event)
            dispatch(event)

        channel.hub._dispatch = record  # type: ignore[method-assign]
        return channel


@dataclass
class EventCapture:
    name: str
    description: str
    scripts: list[Script]
    agent: str | None = None


CAPTURES = [
    EventCapture("text_reply", "One text reply: step-finish stop, then idle.", [Script()]),
    EventCapture(
        "tool_then_text",
        "A bash step (finish tool-calls, which does not end the turn), then a text step.",
        [
            Script(text=[], tool_calls=[("bash", {"command": "echo hi", "description": "x"})]),
            Script(text=["Done."]),
        ],
    ),
    EventCapture(
        "model_error",
        "The model answers 400: session.error with OpenCode's APIError.",
        [Script(fail_before=InvalidRequestError("the scripted model refuses"))],
    ),
    EventCapture(
        "unknown_agent",
        "A prompt to an agent OpenCode lacks: session.error, no user message, no idle.",
        [],
        agent="no-such-agent",
    ),
]


async def _capture(model: ScriptedBackend, gateway_url: str) -> None:
    provider = RecordingProvider(command=opencode_binary())
    FIXTURES.mkdir(parents=True, exist_ok=True)
    endpoint = {"url": gateway_url + "/v1", "limits": {"context": 32768, "output": 1024}}
    try:
        for capture in CAPTURES:
            await provider.init(
                ProviderConfig(
                    model="gw/scripted",
                    permission="allow",
                    agent=capture.agent,
                    options={"endpoint": endpoint},
                )
            )
            assert provider.server is not None and provider.server.workdir is not None
            workdir = str(provider.server.workdir)
            model.queue.clear()
            model.enqueue(*capture.scripts)
            provider.events.clear()
            handle = await provider.create_session(
                system_instructions=None, scenario_id=capture.name, iteration=0
            )
            result = await provider.prompt(handle, "Go.", 60)
            await asyncio.sleep(1.0)  # what OpenCode sends after the end of the turn
            await provider.destroy_session(handle)
            seen: set[str] = set()
            events = []
            for event in provider.events:
                if session_of(event) != handle.session_id or event["id"] in seen:
                    continue
                seen.add(event["id"])
                if event["type"] != "message.part.delta":
                    events.append(event)
            fixture = {
                "name": capture.name,
                "description": capture.description,
                "opencode": "1.18.33",
                "completion_reason": result.completion_reason,
                "error": result.error,
                "events": json.loads(json.dumps(events).replace(workdir, "$WORKDIR")),
            }
            path = FIXTURES / f"{capture.name}.json"
            path.write_text(json.dumps(fixture, indent=1, ensure_ascii=False) + "\n")
            print(f"captured {path.name}: {len(events)} events, {result.completion_reason}")
    finally:
        await provider.shutdown()


def main() -> None:
    model = ScriptedBackend("model", models=("scripted",))
    with running_gateway({"model": model}, models=[{"name": "scripted", "backend": "model"}]) as gw:
        asyncio.run(_capture(model, gw.url))


if __name__ == "__main__":
    main()
