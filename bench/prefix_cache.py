"""The ``prefix_cache`` scenario: how much of each agent turn's prompt the embedded model
reads from llama.cpp's KV cache, and what that does to the time to first token.

It replays two multi-turn, tool-using sessions on the embedded model (SmolLM2-135M,
temperature 0), each through a gateway on a free loopback port, driven by the official
client of the agent's dialect:

- **A, Claude Code** (``anthropic`` client, streamed): the system blocks, tools and
  first user message of ``/work/shared/reference/captured/claude-code-2.1.330-messages-
  request.json`` (its three tools fit SmolLM2's 8,192-token context, so nothing is
  trimmed), then turns that append the assistant's reply as the gateway returned it
  (``tool_use`` blocks included), a scripted ``tool_result`` for each tool call, or the
  next scripted user message;
- **B, Home Assistant** (``ollama`` client, streamed): a voice-assistant system prompt
  with the home's state, Home Assistant's tools (``HassTurnOn``, ``GetLiveContext``),
  four user requests, each tool call answered by a scripted result.

A request is a row: the model calls it cost (tool emulation makes a decision call,
sometimes an answer call), their prompt tokens, the tokens read from the cache, the
tokens evaluated, the model's own time to its first token (``Timings.prompt_eval_ns``,
summed over the calls) and the client's (its first content event: with emulated tools
that comes after the whole decision is generated). Two measures of the cache:

- **reported**: ``Usage.cache_read_input_tokens`` of each model call (the worker's own
  count), read off by a wrapper of ``backend.chat`` in the gateway process; older code
  may report nothing (``-``);
- **measured**: independent of the gateway's code. The same wrapper records each call's
  messages as the backend converts them (``to_llama_messages``) and its output text;
  this process renders them with the GGUF's chat template, tokenizes them with a
  ``vocab_only`` ``Llama`` of the same file and counts the tokens each prompt shares
  with the previous call's prompt + output (what llama.cpp can reuse: the common
  prefix, less the one token it re-evaluates on a full match). The output is
  re-tokenized from its text, so it can differ by a token at the seam; the prompt's
  prefix, which is what matters, is exact.

Summary per session, from the second request on: the share of input tokens read from
the cache (the goal: at least 80%), and the time to first token against the first
request's. ``--baseline-src DIR`` replays the same sessions on a gateway running DIR's
code (``PYTHONPATH=DIR``, checked) after this tree's, and prints this tree's figures
over the baseline's. A 135M model's decisions follow its prompt, so once the prompts
differ the sessions are the same script, not the same tokens.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import (
    Baseline,
    Server,
    arguments,
    entry_point,
    free_port,
    log,
    prepare_baseline,
    results_header,
    run_async,
    save_results,
    start_run,
    wait_ready,
    workspace,
)

if TYPE_CHECKING:  # the gateway side imports llmbridge itself: maybe another checkout's
    from llmbridge.core.events import StreamEvent
    from llmbridge.core.request import ChatRequest

MAX_TOKENS = 128
"""Per request: a decision or a short answer; bounded, as an agent's requests are not,
so that a looping 135M model cannot hold the bench."""
CLIENT_TIMEOUT = 300.0
CAPTURE = Path("/work/shared/reference/captured/claude-code-2.1.330-messages-request.json")
CLAUDE_CODE_USERS = (
    "List the files in this directory.",
    "Read main.py and tell me what it prints.",
    "Change the greeting in main.py to say hello world.",
)
CLAUDE_CODE_RESULTS = {
    "Bash": "main.py\nREADME.md\ntests/",
    "Read": "     1\tdef main():\n     2\t    print('hi')\n     3\t\n     4\tmain()\n",
    "Edit": "The file /home/user/work/ccwork/main.py has been updated.",
}
HOME_ASSISTANT_SYSTEM = (
    "You are a voice assistant for Home Assistant. Answer questions about the world "
    "truthfully. Answer in plain text. Keep it simple and to the point.\n"
    "Static Context: An overview of the areas and the devices in this smart home:\n"
    "- names: Kitchen light\n  domain: light\n  state: 'off'\n  areas: Kitchen\n"
    "- names: Living room lamp\n  domain: light\n  state: 'on'\n  areas: Living room\n"
    "- names: Front door\n  domain: lock\n  state: locked\n  areas: Hall\n"
    "- names: Bedroom fan\n  domain: fan\n  state: 'off'\n  areas: Bedroom\n"
    "- names: Thermostat\n  domain: climate\n  state: heat\n  areas: Hall\n"
    "  attributes:\n    current_temperature: 19.5\n    temperature: 21"
)
_NAME = {"type": "string", "description": "Name of the device or entity"}
_DOMAIN = {"type": "array", "items": {"type": "string"}}
HOME_ASSISTANT_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {"type": "object", "properties": properties, **required},
        },
    }
    for name, description, properties, required in (
        (
            "HassTurnOn",
            "Turns on/opens a device or entity",
            {"name": _NAME, "domain": _DOMAIN},
            {"required": ["name"]},
        ),
        ("GetLiveContext", "Provides real-time information about the state of devices", {}, {}),
    )
]
HOME_ASSISTANT_USERS = (
    "Turn on the kitchen light",
    "Is the front door locked?",
    "Turn on the bedroom fan",
    "What temperature is it in the hall?",
)
HOME_ASSISTANT_RESULTS = {
    "HassTurnOn": '{"speech": {}, "response_type": "action_done", "data": {"success": '
    '[{"name": "Kitchen light", "type": "entity"}], "failed": []}}',
    "GetLiveContext": "Live Context: Kitchen light: on; Front door: locked; "
    "Thermostat: 19.5 degrees, target 21",
}


@dataclass
class ModelCall:
    """One call of the gateway's backend, as the wrapper in the gateway recorded it."""

    messages: list[dict[str, str]] | None
    completion: str | None
    output: str
    reported_input: int | None
    reported_cached: int | None
    prompt_eval_ms: float | None
    measured_prompt: int = 0
    measured_cached: int = 0


@dataclass
class Row:
    """One client request and what it cost."""

    session: str
    index: int
    kind: str
    """``user`` (a new user message) or ``tool`` (a tool result sent back)."""
    ttft_ms: float | None = None
    total_ms: float = 0.0
    tool_calls: list[str] = field(default_factory=list)
    error: str | None = None
    calls: list[ModelCall] = field(default_factory=list)

    @property
    def prompt(self) -> int:
        return sum(call.measured_prompt for call in self.calls)

    @property
    def measured_cached(self) -> int:
        return sum(call.measured_cached for call in self.calls)

    def total(self, attribute: str) -> float | None:
        """A reported figure summed over the request's calls (None if one lacks it)."""
        values = [getattr(call, attribute) for call in self.calls]
        return None if not values or None in values else sum(values)


# -- the gateway side (``--serve``): runs in its own process ----------------------------


def serve(port: int, record: Path, n_ctx: int, database: Path) -> None:
    """The gateway over the embedded model, with ``backend.chat`` wrapped to append one
    JSON line per model call to ``record``. Uses only what older code has too
    (``EmbeddedBackend``, ``create_app``, ``to_llama_messages``)."""
    import uvicorn

    from llmbridge.backends.embedded.backend import EmbeddedBackend
    from llmbridge.backends.embedded.prompt import to_llama_messages
    from llmbridge.core.events import PartDelta, ResponseEnd, TextDelta
    from llmbridge.gateway.app import create_app
    from llmbridge.gateway.config import GatewayConfig

    backend = EmbeddedBackend("embedded", n_ctx=n_ctx)
    original, out = backend.chat, record.open("a", encoding="utf-8")

    async def recording_chat(request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        texts: list[str] = []
        end: ResponseEnd | None = None
        try:
            async for event in original(request):
                if isinstance(event, PartDelta) and isinstance(event.delta, TextDelta):
                    texts.append(event.delta.text)
                elif isinstance(event, ResponseEnd):
                    end = event
                yield event
        finally:
            completion, raw = request.completion, None
            if completion is not None and (completion.raw or completion.suffix is not None):
                raw = completion.prompt  # the worker tokenizes it as it stands
            usage = end.usage if end is not None else None
            prompt_eval = end.timings.prompt_eval_ns if end is not None else None
            line = {
                "messages": None if raw is not None else to_llama_messages(request.messages),
                "completion": raw,
                "output": "".join(texts),
                "reported_input": usage.input_tokens if usage else None,
                "reported_cached": getattr(usage, "cache_read_input_tokens", None),
                "prompt_eval_ms": None if prompt_eval is None else prompt_eval / 1e6,
            }
            out.write(json.dumps(line) + "\n")
            out.flush()

    backend.chat = recording_chat  # type: ignore[method-assign]  # the one wrapper
    agent = {"database": str(database), "summaries": False}
    backends = {"embedded": {"type": "embedded", "n_ctx": n_ctx}}
    config = {"backends": backends, "default_backend": "embedded", "agent": agent}
    app = create_app(GatewayConfig.model_validate(config), backends={"embedded": backend})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# -- the client side: the two sessions ----------------------------------------------------

Send = Callable[[Row], None]
"""Sends its row's request and fills the row in (the caller attaches the model calls)."""


def session_claude_code(url: str, turns: int) -> Iterator[tuple[Row, Send]]:
    """Session A's requests: a tool call is answered before the next user message; at
    most ``turns`` requests. Without the captured request the bench stops."""
    import anthropic

    try:
        captured = json.loads(CAPTURE.read_text())
    except OSError as exc:
        raise SystemExit(f"the captured Claude Code request is needed: {exc}") from exc
    system, tools = captured["system"], captured["tools"]
    client = anthropic.Anthropic(
        base_url=url, api_key="bench", max_retries=0, timeout=CLIENT_TIMEOUT
    )
    users = [captured["messages"][0]["content"][0]["text"], *CLAUDE_CODE_USERS]
    messages: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    for index in range(turns):
        if not (users or pending):
            return
        row = Row("A claude-code", index, "tool" if pending else "user")
        text = [{"type": "text", "text": users.pop(0)}] if not pending else None
        messages.append({"role": "user", "content": pending or text})
        pending = []

        def send(row: Row, pending: list[dict[str, Any]] = pending) -> None:
            started = time.perf_counter()
            with client.messages.stream(
                model="claude-opus-5-5",
                system=system,
                tools=tools,
                messages=messages,  # type: ignore[arg-type]  # the captured JSON's shapes
                max_tokens=MAX_TOKENS,
                # Claude Code sends no temperature (this SDK has no argument for it);
                # greedy decoding keeps the replay repeatable.
                extra_body={"temperature": 0},
            ) as stream:
                for event in stream:
                    if row.ttft_ms is None and event.type.startswith("content_block_"):
                        row.ttft_ms = (time.perf_counter() - started) * 1000
                final = stream.get_final_message()
            row.total_ms = (time.perf_counter() - started) * 1000
            content = [block.model_dump(exclude_none=True) for block in final.content]
            messages.append({"role": "assistant", "content": content or "(no reply)"})
            for call in (b for b in content if b.get("type") == "tool_use"):
                row.tool_calls.append(call["name"])
                result = CLAUDE_CODE_RESULTS.get(call["name"], "done")
                pending.append(
                    {"type": "tool_result", "tool_use_id": call["id"], "content": result}
                )

        yield row, send


def session_home_assistant(url: str, turns: int) -> Iterator[tuple[Row, Send]]:
    """Session B's requests (see ``session_claude_code``)."""
    import ollama

    client = ollama.Client(host=url, timeout=CLIENT_TIMEOUT)
    messages: list[dict[str, Any]] = [{"role": "system", "content": HOME_ASSISTANT_SYSTEM}]
    users, pending = list(HOME_ASSISTANT_USERS), list[dict[str, Any]]()
    for index in range(turns):
        if not (users or pending):
            return
        row = Row("B home-assistant", index, "tool" if pending else "user")
        messages.extend(pending or [{"role": "user", "content": users.pop(0)}])
        pending = []

        def send(row: Row, pending: list[dict[str, Any]] = pending) -> None:
            started, text, calls = time.perf_counter(), [], list[dict[str, Any]]()
            options = {"temperature": 0, "num_predict": MAX_TOKENS}
            for chunk in client.chat(
                model="smollm2",
                messages=messages,
                tools=HOME_ASSISTANT_TOOLS,
                stream=True,
                options=options,
            ):
                message = chunk.message
                if row.ttft_ms is None and (message.content or message.tool_calls):
                    row.ttft_ms = (time.perf_counter() - started) * 1000
                text.append(message.content or "")
                for tool_call in message.tool_calls or []:
                    function = tool_call.function
                    calls.append(
                        {"function": {"name": function.name, "arguments": dict(function.arguments)}}
                    )
            row.total_ms = (time.perf_counter() - started) * 1000
            reply: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
            messages.append(reply | ({"tool_calls": calls} if calls else {}))
            for call in calls:
                name = call["function"]["name"]
                row.tool_calls.append(name)
                result = HOME_ASSISTANT_RESULTS.get(name, '{"success": true}')
                pending.append({"role": "tool", "content": result, "tool_name": name})

        yield row, send


# -- the independent measure ---------------------------------------------------------------


def measure(rows: list[Row]) -> None:
    """Fill each call's measured prompt and cached tokens, in call order, with the GGUF's
    vocabulary and chat template as the embedded worker uses them."""
    import llama_cpp

    from llmbridge.backends.embedded.backend import default_model_path
    from llmbridge.backends.embedded.prompt import cached_prefix, prompt_tokens, template_formatter

    llama = llama_cpp.Llama(model_path=str(default_model_path()), vocab_only=True, verbose=False)
    formatter = template_formatter(llama)
    held: list[int] = []
    for call in (call for row in rows for call in row.calls):
        if call.completion is not None:
            prompt = list(llama.tokenize(call.completion.encode(), add_bos=True, special=True))
        elif (found := prompt_tokens(llama, formatter, call.messages or [])) is not None:
            prompt = found
        else:
            raise SystemExit("the GGUF has no chat template: cannot measure")
        call.measured_prompt = len(prompt)
        call.measured_cached = cached_prefix(held, prompt, requires_eval=True)
        held = prompt + list(llama.tokenize(call.output.encode(), add_bos=False, special=False))


# -- one side: a gateway, both sessions -----------------------------------------------------


def run_side(
    label: str, workdir: Path, args: argparse.Namespace, baseline: Baseline | None
) -> list[Row]:
    port, record = free_port(), workdir / f"{label}-calls.jsonl"
    record.write_text("")
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--serve",
        str(port),
        "--record",
        str(record),
    ]
    argv += ["--n-ctx", str(args.n_ctx), "--database", str(workdir / f"{label}.db")]
    env = baseline.env if baseline is not None else None
    server = Server.start(label, port, argv, workdir, env=env, health="/health", patience=180)
    rows: list[Row] = []
    try:
        run_async(wait_ready(None, server))  # the model loaded
        read = 0
        url = server.url
        for session in (
            session_claude_code(url, args.turns_a),
            session_home_assistant(url, args.turns_b),
        ):
            for row, send in session:
                try:
                    send(row)
                except Exception as exc:  # noqa: BLE001 - recorded; the session stops
                    row.error = repr(exc)[:300]
                lines = record.read_text(encoding="utf-8").splitlines()
                row.calls = [ModelCall(**json.loads(line)) for line in lines[read:] if line.strip()]
                read = len(lines)
                rows.append(row)
                log(
                    f"{label} {row.session} #{row.index} {row.kind}: {len(row.calls)} calls, "
                    f"ttft {row.ttft_ms or 0:.0f} ms, tools {row.tool_calls}"
                    + (f", error {row.error}" if row.error else "")
                )
                if row.error:
                    break
    finally:
        server.stop()
    return rows


# -- the report -------------------------------------------------------------------------------


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a and b else None


def summarise(rows: list[Row]) -> dict[str, Any]:
    """From the second request on: the share of input tokens from the cache, and the
    time to first token (the client's and the model's own) against the first request's."""
    later = [row for row in rows[1:] if not row.error]
    prompt = sum(row.prompt for row in later)
    reported = [row.total("reported_cached") for row in later]
    ttfts = [row.ttft_ms for row in later if row.ttft_ms is not None]
    evals = [e for row in later if (e := row.total("prompt_eval_ms")) is not None]
    first = rows[0].ttft_ms if rows else None
    first_eval = rows[0].total("prompt_eval_ms") if rows else None
    later_ttft = statistics.median(ttfts) if ttfts else None
    later_eval = statistics.median(evals) if evals else None
    return {
        "requests": len(rows),
        "prompt_tokens_from_2nd": prompt,
        "measured_cached_share": _ratio(sum(row.measured_cached for row in later), prompt),
        "reported_cached_share": (
            _ratio(sum(r for r in reported if r is not None), prompt)
            if reported and None not in reported
            else None
        ),
        "ttft_first_ms": first,
        "ttft_later_median_ms": later_ttft,
        "ttft_ratio_vs_first": _ratio(later_ttft, first),
        "model_ttft_first_ms": first_eval,
        "model_ttft_later_median_ms": later_eval,
        "model_ttft_ratio_vs_first": _ratio(later_eval, first_eval),
    }


def fmt(value: float | int | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def print_side(label: str, source: dict[str, Any], rows: list[Row]) -> dict[str, dict[str, Any]]:
    commit = source.get("commit")
    print(f"\n== {label} ({source.get('src')}{' @ ' + commit[:9] if commit else ''})")
    print(
        f"{'session':<17}{'#':>3} {'kind':<5}{'calls':>6}{'prompt':>8}{'cached':>8}"
        f"{'(meas.)':>8}{'eval':>7}{'model ms':>9}{'ttft ms':>9}{'total ms':>10}  tools"
    )
    summaries: dict[str, dict[str, Any]] = {}
    for session in sorted({row.session for row in rows}):
        mine = [row for row in rows if row.session == session]
        for row in mine:
            reported = row.total("reported_cached")
            cached = reported if reported is not None else row.measured_cached
            print(
                f"{row.session:<17}{row.index:>3} {row.kind:<5}{len(row.calls):>6}"
                f"{row.prompt:>8}{fmt(reported):>8}{row.measured_cached:>8}"
                f"{row.prompt - cached:>7.0f}{fmt(row.total('prompt_eval_ms')):>9}"
                f"{fmt(row.ttft_ms):>9}{row.total_ms:>10.0f}  "
                f"{','.join(row.tool_calls) or ('ERROR ' + row.error if row.error else '')}"
            )
        s = summaries[session] = summarise(mine)
        print(
            f"  from the 2nd request: {fmt(s['measured_cached_share'], '.1%')} of input "
            f"tokens cached (measured), {fmt(s['reported_cached_share'], '.1%')} (reported); "
            f"ttft median {fmt(s['ttft_later_median_ms'])} ms vs first "
            f"{fmt(s['ttft_first_ms'])} ms (x{fmt(s['ttft_ratio_vs_first'], '.2f')}); the "
            f"model's own {fmt(s['model_ttft_later_median_ms'])} ms vs "
            f"{fmt(s['model_ttft_first_ms'])} ms (x{fmt(s['model_ttft_ratio_vs_first'], '.2f')})"
        )
    return summaries


def main(argv: list[str] | None = None) -> int:
    parser = arguments(__doc__, quick="3 requests per session", baseline="src/ of another checkout")
    parser.add_argument("--n-ctx", type=int, default=8192, help="the model's context")
    parser.add_argument("--turns-a", type=int, default=5, help="requests in session A")
    parser.add_argument("--turns-b", type=int, default=6, help="requests in session B")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--database", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.serve is not None:
        serve(args.serve, args.record, args.n_ctx, args.database)
        return 0
    if args.quick:
        args.turns_a = args.turns_b = 3
    run = start_run("prefix_cache", argv)
    baseline = prepare_baseline(args.baseline_src)
    sides: dict[str, tuple[Baseline | None, dict[str, Any]]] = {
        "this-tree": (None, {"src": "this tree"})
    }
    if baseline is not None:
        sides["baseline"] = (baseline, baseline.describe())
    rows: dict[str, list[Row]] = {}
    with workspace("prefix-cache") as (workdir, _):
        for label, (checkout, _) in sides.items():
            rows[label] = run_side(label, workdir, args, checkout)
    for side in rows.values():
        measure(side)
    summaries = {label: print_side(label, sides[label][1], rows[label]) for label in rows}
    if baseline is not None:
        print("\n== this tree vs baseline (same run)")
        for session, ours in summaries["this-tree"].items():
            theirs = summaries["baseline"].get(session, {})
            ttft = _ratio(ours["ttft_later_median_ms"], theirs.get("ttft_later_median_ms"))
            own = _ratio(
                ours["model_ttft_later_median_ms"], theirs.get("model_ttft_later_median_ms")
            )
            print(
                f"  {session}: cached share from the 2nd request "
                f"{fmt(ours['measured_cached_share'], '.1%')} vs "
                f"{fmt(theirs.get('measured_cached_share'), '.1%')} (measured); ttft median "
                f"from the 2nd request x{fmt(ttft, '.2f')} of the baseline's, the model's own "
                f"x{fmt(own, '.2f')}"
            )
    document = results_header(run, args) | {"n_ctx": args.n_ctx, "sides": []}
    for label, side in rows.items():
        table = [
            {**asdict(r), "prompt": r.prompt, "measured_cached": r.measured_cached} for r in side
        ]
        source, summary = sides[label][1], summaries[label]
        document["sides"].append(
            {"label": label, "source": source, "summary": summary, "rows": table}
        )
    save_results("prefix_cache", document, run.started, args)
    return 0


if __name__ == "__main__":
    entry_point(main)
