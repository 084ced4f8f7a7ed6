"""The ``decision_validity`` scenario: how often the embedded model's emulated tool
decision is usable, over 50 fixed requests.

Tool emulation (``features/tool_emulation.py``) asks a model without native tools for
one JSON decision. Fifty fixed requests (five tool sets, ten each: actions and queries,
greetings, other languages, turns whose tool results are already in) go to the embedded
model once per mode, and each mode reports: **valid** (the decision parses, names an
offered tool or answers with text, its arguments satisfy the schema, and it repeats no
call whose result is in), **whole** (one complete JSON object and nothing else), the
decision's output tokens and seconds, and the run's seconds. Modes: ``schema`` (the
decision's JSON schema as a llama.cpp grammar, what the embedded backend gets) and
``json`` (plain JSON mode). The model runs in the gateway's own worker process.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import AsyncGenerator
from dataclasses import asdict, dataclass, field, replace
from typing import Any

import orjson

from harness import arguments, entry_point, results_header, run_async, save_results, start_run
from llmbridge.backends.embedded.backend import EmbeddedBackend
from llmbridge.core.accumulate import accumulate
from llmbridge.core.events import PartDelta, ResponseEnd, StreamEvent, TextDelta
from llmbridge.core.messages import Message, TextPart, ToolCallPart, ToolDefinition, ToolResultPart
from llmbridge.core.request import ChatRequest
from llmbridge.features.token_count import count_text_tokens
from llmbridge.features.tool_emulation import emulate_tool_calls, parse_decision
from llmbridge.features.tool_healing import heal_arguments
from llmbridge.features.tool_turn import current_turn


def _tool(name: str, description: str, **parameters: Any) -> ToolDefinition:
    required = [key for key, spec in parameters.items() if spec.pop("required", False)]
    schema: dict[str, Any] = {"type": "object", "properties": parameters}
    if required:
        schema["required"] = required
    return ToolDefinition(name, description, schema)


def _s(description: str, *, required: bool = False) -> dict[str, Any]:
    return {"type": "string", "description": description, "required": required}


TOOL_SETS: dict[str, tuple[ToolDefinition, ...]] = {
    "home": (
        _tool(
            "CallService",
            "Call a Home Assistant service",
            domain=_s("e.g. light", required=True),
            service=_s("e.g. turn_on", required=True),
            entity_id=_s("e.g. light.kitchen"),
        ),
        _tool("GetLiveContext", "The current state of every device"),
    ),
    "clock": (
        _tool("get_time", "The current time on the server clock"),
        _tool("get_weather", "The current weather in a city", city=_s("a city", required=True)),
    ),
    "files": (
        _tool("read_file", "Read a file", path=_s("its path", required=True)),
        _tool(
            "write_file",
            "Write a file",
            path=_s("its path", required=True),
            content=_s("the text", required=True),
        ),
        _tool("run_shell", "Run a shell command", command=_s("the command", required=True)),
    ),
    "calendar": (
        _tool("list_events", "The events of a day", date=_s("YYYY-MM-DD")),
        _tool(
            "create_event",
            "Add an event to the calendar",
            title=_s("its title", required=True),
            start=_s("ISO date and time", required=True),
        ),
    ),
    "search": (
        _tool("web_search", "Search the web", query=_s("what to search", required=True)),
        _tool("get_page", "Fetch a web page", url=_s("its URL", required=True)),
    ),
}

SYSTEMS = {
    "home": "You are a voice assistant for Home Assistant. Devices: Kitchen light (off), "
    "Living room lamp (on), Thermostat (21 C).",
    "clock": "You are a helpful assistant.",
    "files": "You are a coding assistant working in /home/user/project.",
    "calendar": "You are a personal assistant managing the user's calendar.",
    "search": "You are a research assistant.",
}

ASKS = {
    "home": [
        "Turn on the kitchen light",
        "Is the living room lamp on?",
        "Set the thermostat to 23 degrees",
        "Turn everything off",
        "開客廳的燈",
        "Allume la lumière de la cuisine",
    ],
    "clock": [
        "What time is it?",
        "What is the weather in Paris?",
        "Will it rain in Tokyo today?",
        "Tell me the time please",
        "現在幾點？",
        "Quel temps fait-il à Berlin ?",
    ],
    "files": [
        "Read README.md",
        "Run the tests with pytest",
        "Create a file hello.txt that says hello",
        "What is in setup.py?",
        "列出目錄中的文件",
        "Lis le fichier main.py",
    ],
    "calendar": [
        "What do I have on 2026-12-01?",
        "Add a dentist appointment tomorrow at 10:00",
        "Schedule lunch with Ana on Friday at noon",
        "Am I free today?",
        "明天有什麼行程？",
        "Ajoute une réunion lundi à 9h",
    ],
    "search": [
        "Search for the latest Python release",
        "Open https://example.com",
        "Find recipes for pancakes",
        "Look up the population of Canada",
        "搜尋台北的天氣",
        "Cherche les horaires du musée du Louvre",
    ],
}
CHATS = ["hello", "thanks, that's all"]
ANSWERED = {
    "home": ("Is the kitchen light on?", "GetLiveContext", {}, "Kitchen light: off"),
    "clock": ("What is the weather in Paris?", "get_weather", {"city": "Paris"}, "Sunny, 21 C"),
    "files": ("Read README.md", "read_file", {"path": "README.md"}, "# Project\nA demo."),
    "calendar": ("What do I have today?", "list_events", {}, "10:00 Stand-up; 15:00 Review"),
    "search": ("Who wrote Hamlet?", "web_search", {"query": "Hamlet author"}, "Shakespeare"),
}


def requests() -> list[ChatRequest]:
    """The fixed 50: per tool set, six requests, two chats, two answered turns (the same
    answered turn asked twice would be one case; the second adds an earlier exchange)."""
    out: list[ChatRequest] = []
    for name, tools in TOOL_SETS.items():
        system = Message("system", (TextPart(SYSTEMS[name]),))
        for words in [*ASKS[name], *CHATS]:
            out.append(
                ChatRequest(
                    model="m", messages=(system, Message("user", (TextPart(words),))), tools=tools
                )
            )
        ask, tool, arguments, result = ANSWERED[name]
        answered = (
            Message("user", (TextPart(ask),)),
            Message("assistant", (ToolCallPart("c1", tool, arguments),)),
            Message("tool", (ToolResultPart("c1", result, name=tool),)),
        )
        earlier = (Message("user", (TextPart("hi"),)), Message("assistant", (TextPart("Hello!"),)))
        for history in (answered, earlier + answered):
            out.append(ChatRequest(model="m", messages=(system, *history), tools=tools))
    assert len(out) == 50
    return out


def valid(request: ChatRequest, text: str) -> bool:
    """Whether the model's first reply is a decision the client gets as it is."""
    decision = parse_decision(text, request.tools)
    if decision is None:
        return False
    if decision.action != "tool_call":
        return True
    tool = next((t for t in request.tools if t.name == decision.tool_name), None)
    if tool is None:
        return False  # "unknown": a tool that was not offered
    if heal_arguments(decision.arguments, tool.input_schema).problem is not None:
        return False
    turn = current_turn([m for m in request.messages if m.role != "system"])
    return turn.answered_call(decision.tool_name, decision.arguments) is None


def whole(text: str) -> bool:
    """Whether ``text`` is one JSON object and nothing more."""
    try:
        return isinstance(orjson.loads(text), dict)
    except orjson.JSONDecodeError:
        return False


@dataclass
class Tally:
    valid: int = 0
    whole: int = 0
    seconds: list[float] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    actions: dict[str, int] = field(default_factory=dict)


class FirstCall:
    """Wraps ``backend.chat`` and keeps each model call of a request: its text, seconds
    and output tokens (estimated from the text when the reply was cut off once its
    JSON closed, as the emulation itself then does)."""

    def __init__(self, backend: EmbeddedBackend) -> None:
        self.backend = backend
        self.calls: list[tuple[str, float, int]] = []

    async def chat(self, asked: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        started, text, tokens = time.perf_counter(), [], None
        try:
            async for event in self.backend.chat(asked):
                if isinstance(event, PartDelta) and isinstance(event.delta, TextDelta):
                    text.append(event.delta.text)
                if isinstance(event, ResponseEnd):
                    tokens = event.usage.output_tokens
                yield event
        finally:
            written = "".join(text)
            counted = count_text_tokens(written) if tokens is None else tokens
            self.calls.append((written, time.perf_counter() - started, counted))


async def run_mode(backend: EmbeddedBackend, mode: str, cases: list[ChatRequest]) -> Tally:
    tally = Tally()
    for number, request in enumerate(cases, 1):
        first = FirstCall(backend)
        await accumulate(emulate_tool_calls(first.chat, request, structured=mode == "schema"))
        text, seconds, tokens = first.calls[0]
        ok = valid(request, text)
        decision = parse_decision(text, request.tools)
        action = decision.action if decision else "unreadable"
        tally.valid += ok
        tally.whole += whole(text)
        tally.seconds.append(seconds)
        tally.tokens.append(tokens)
        tally.actions[action] = tally.actions.get(action, 0) + 1
        verdict = "valid  " if ok else "INVALID"
        print(
            f"  {mode} {number:2d}/{len(cases)} {verdict} {seconds:6.2f}s {tokens:4d} tok  "
            f"{text[:90]!r}",
            flush=True,
        )
    return tally


async def run_modes(args: argparse.Namespace) -> dict[str, Any]:
    cases = requests()[: args.limit]
    if args.max_tokens is not None:
        cases = [replace(c, params=replace(c.params, max_tokens=args.max_tokens)) for c in cases]
    backend = EmbeddedBackend("embedded")
    await backend.start()
    out: dict[str, Any] = {}
    try:
        for mode in args.modes.split(","):
            print(f"mode {mode}: {len(cases)} requests", flush=True)
            started = time.perf_counter()
            tally = await run_mode(backend, mode, cases)
            run_s = time.perf_counter() - started
            out[mode] = asdict(tally) | {"cases": len(cases), "run_s": run_s}
    finally:
        await backend.aclose()
    return out


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__)
    parser.add_argument("--modes", default="schema,json")
    parser.add_argument("--limit", type=int, default=50, help="the first N of the 50")
    parser.add_argument("--max-tokens", type=int, help="per decision")
    args = parser.parse_args(argv)
    run = start_run("decision_validity", argv)
    modes = run_async(run_modes(args))
    head = f"{'valid':>9} {'whole':>5} {'mean s':>8} {'mean tok':>9} {'run s':>8}  actions"
    print(f"\n{'mode':8} {head}")
    for mode, t in modes.items():
        valid = f"{t['valid']:3d}/{t['cases']:<3d} {100 * t['valid'] / t['cases']:3.0f}%"
        means = f"{statistics.fmean(t['seconds']):8.2f} {statistics.fmean(t['tokens']):9.1f}"
        actions = dict(sorted(t["actions"].items()))
        print(f"{mode:8} {valid} {t['whole']:5d} {means} {t['run_s']:8.1f}  {actions}")
    if "schema" in modes and "json" in modes:
        print(f"run time schema / json: x{modes['schema']['run_s'] / modes['json']['run_s']:.2f}")
    save_results(
        "decision_validity", results_header(run, args) | {"modes": modes}, run.started, args
    )
    return 0


if __name__ == "__main__":
    entry_point(main)
