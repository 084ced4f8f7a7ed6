"""The ``prefix_cache`` scenario: how much of each agent turn's prompt the embedded
model reads from llama.cpp's KV cache, and what that does to the time to first token.

This file owns that measurement. It replays two multi-turn, tool-using sessions on
the embedded model (SmolLM2-135M, temperature 0), each through a gateway on a free
loopback port, driven by the official client of the agent's dialect:

- **A, Claude Code** (``anthropic`` client, streamed): the system blocks, tools and
  first user message of ``/work/shared/reference/captured/claude-code-2.1.330-messages-
  request.json`` (whole: its three tools fit SmolLM2's 8,192-token context, so nothing
  is trimmed), then turns that append the assistant's reply as the gateway returned it
  (``tool_use`` blocks included), a scripted ``tool_result`` for each tool call, or
  the next scripted user message;
- **B, Home Assistant** (``ollama`` client, streamed): a voice-assistant system prompt
  with the home's state, Home Assistant's tools (``HassTurnOn``, ``GetLiveContext``),
  four user requests, each tool call answered by a scripted result.

A request is a row. Per row it prints the model calls the request cost (tool
emulation makes a decision call, sometimes an answer call), their prompt tokens, the
tokens read from the cache, the tokens evaluated, the model's own time to its first
token (prompt evaluation, ``Timings.prompt_eval_ns``, summed over the calls) and the
time to first token as the client saw it (its first content event: with emulated
tools that comes after the whole decision is generated, so it includes generation).
Two measures of the cache, side by side:

- **reported**: what the gateway's embedded backend put in ``Usage
  .cache_read_input_tokens`` (the worker's own count: the prefix ``Llama.generate``
  reuses). The gateway process wraps ``backend.chat`` to read it off each model call;
  older code may report nothing (``-``);
- **measured**: independent of the gateway's code. The same wrapper records each model
  call's messages as the backend converts them (``to_llama_messages``) and its output
  text; this process renders them with the GGUF's chat template, tokenizes them with
  a ``vocab_only`` ``Llama`` of the same file and counts the tokens each prompt shares
  with the previous call's prompt + output (what llama.cpp can reuse: the common
  prefix, less the one token it re-evaluates on a full match). The output is
  re-tokenized from its text, so it can differ from the sampled tokens by a token at
  the seam; the prompt's prefix, which is what matters, is exact.

Summary per session, from the second request on: the share of input tokens read from
the cache (the goal: at least 80%), and the time to first token against the
first request's. ``--baseline-src DIR`` (``src/`` of another checkout) replays the same
sessions on a gateway running that code, in a subprocess with ``PYTHONPATH=DIR``
(``harness.prepare_baseline`` checks that it really imports from there), and prints this
tree's figures over the baseline's, measured in the same run. The replies differ
between the two once their prompts differ (a 135M model's decisions follow its
prompt), so the sessions are the same script, not the same tokens.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncGenerator, Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx

from harness import (
    Baseline,
    BaselineError,
    Server,
    check_process_env,
    free_port,
    log,
    prepare_baseline,
    results_header,
    save_results,
    start_run,
)

if TYPE_CHECKING:  # the gateway side imports llmbridge itself: maybe another checkout's
    from llmbridge.core.events import StreamEvent
    from llmbridge.core.request import ChatRequest

MAX_TOKENS = 128
"""Per request: a decision or a short answer; bounded, as an agent's requests are not,
so that a looping 135M model cannot hold the bench."""
CLIENT_TIMEOUT = 300.0
SESSION_A = "A claude-code"
SESSION_B = "B home-assistant"


# -- session A: Claude Code (from the captured request) ----------------------------------

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


def claude_code_request() -> tuple[list[dict[str, Any]], list[dict[str, Any]], str]:
    """System blocks, tools and first user message of the captured Claude Code request
    (three tools: Bash, Edit, Read); without the file, the bench stops."""
    try:
        captured = json.loads(CAPTURE.read_text())
    except OSError as exc:
        raise SystemExit(f"the captured Claude Code request is needed: {exc}") from exc
    first = captured["messages"][0]["content"][0]["text"]
    return list(captured["system"]), list(captured["tools"]), str(first)


# -- session B: Home Assistant -------------------------------------------------------------

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
HOME_ASSISTANT_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "HassTurnOn",
            "description": "Turns on/opens a device or entity",
            "parameters": {
                "type": "object",
                "properties": {
                    "name": {"type": "string", "description": "Name of the device or entity"},
                    "domain": {"type": "array", "items": {"type": "string"}},
                },
                "required": ["name"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "GetLiveContext",
            "description": "Provides real-time information about the state of devices",
            "parameters": {"type": "object", "properties": {}},
        },
    },
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


# -- one request's record ----------------------------------------------------------------


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
    ttft_ms: float | None
    total_ms: float
    tool_calls: list[str]
    error: str | None = None
    calls: list[ModelCall] = field(default_factory=list)

    @property
    def prompt(self) -> int:
        return sum(call.measured_prompt for call in self.calls)

    @property
    def measured_cached(self) -> int:
        return sum(call.measured_cached for call in self.calls)

    @property
    def prompt_eval_ms(self) -> float | None:
        """The model's own time to its first token, summed over the request's calls."""
        times = [call.prompt_eval_ms for call in self.calls]
        if not times or any(time is None for time in times):
            return None
        return sum(time for time in times if time is not None)

    @property
    def reported_cached(self) -> int | None:
        counts = [call.reported_cached for call in self.calls]
        if not counts or any(count is None for count in counts):
            return None
        return sum(count for count in counts if count is not None)


# -- the gateway side (``--serve``): runs in its own process ----------------------------


def serve(port: int, record: Path, n_ctx: int, database: Path) -> None:
    """The gateway over the embedded model, with ``backend.chat`` wrapped to append one
    JSON line per model call to ``record``. Uses only what older code
    has too (``EmbeddedBackend``, ``create_app``, ``to_llama_messages``)."""
    import uvicorn

    from llmbridge.backends.embedded.backend import EmbeddedBackend
    from llmbridge.backends.embedded.prompt import to_llama_messages
    from llmbridge.core.events import PartDelta, ResponseEnd, TextDelta
    from llmbridge.gateway.app import create_app
    from llmbridge.gateway.config import GatewayConfig

    backend = EmbeddedBackend("embedded", n_ctx=n_ctx)
    original = backend.chat
    out = record.open("a", encoding="utf-8")

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
            completion = request.completion
            raw = None
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
    config = GatewayConfig.model_validate(
        {
            "backends": {"embedded": {"type": "embedded", "n_ctx": n_ctx}},
            "default_backend": "embedded",
            "agent": {"database": str(database), "summaries": False},
        }
    )
    app = create_app(config, backends={"embedded": backend})
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def start_gateway(
    name: str, workdir: Path, n_ctx: int, baseline: Baseline | None
) -> tuple[Server, Path]:
    port = free_port()
    record = workdir / f"{name}-calls.jsonl"
    record.write_text("")
    argv = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--serve",
        str(port),
        "--record",
        str(record),
        "--n-ctx",
        str(n_ctx),
        "--database",
        str(workdir / f"{name}.db"),
    ]
    env = baseline.env if baseline is not None else None
    server = Server.start(name, port, argv, workdir, env=env)
    if baseline is not None:
        check_process_env(server.pid, baseline.env)
    return server, record


def wait_up(server: Server, patience: float = 180.0) -> None:
    """Until ``/health`` answers 200 (the model loaded), or the process died."""
    deadline = time.monotonic() + patience
    while time.monotonic() < deadline:
        if server.process.poll() is not None:
            raise RuntimeError(f"{server.name} exited:\n{server.log_tail()}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{server.port}/health", timeout=5).status_code == 200:
                return
        time.sleep(0.2)
    raise RuntimeError(f"{server.name} not up after {patience:.0f} s:\n{server.log_tail()}")


class CallLog:
    """The model calls the gateway has recorded, read as they arrive."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.read = 0

    def new_calls(self) -> list[ModelCall]:
        lines = self.path.read_text(encoding="utf-8").splitlines()
        fresh = lines[self.read :]
        self.read = len(lines)
        return [ModelCall(**json.loads(line)) for line in fresh if line.strip()]


# -- the client side: the two sessions ----------------------------------------------------


def session_claude_code(url: str, turns: int) -> Iterator[tuple[str, Callable[[], Row]]]:
    """Session A's requests, each a function that sends it and returns its row (the
    caller attaches the model calls). A tool call is answered before the next user
    message; at most ``turns`` requests."""
    import anthropic

    client = anthropic.Anthropic(
        base_url=url, api_key="bench", max_retries=0, timeout=CLIENT_TIMEOUT
    )
    system, tools, first_user = claude_code_request()
    users = [first_user, *CLAUDE_CODE_USERS]
    messages: list[dict[str, Any]] = []
    pending: list[dict[str, Any]] = []
    sent = 0
    with client:
        while sent < turns and (users or pending):
            kind = "tool" if pending else "user"
            if pending:
                messages.append({"role": "user", "content": pending})
                pending = []
            else:
                messages.append(
                    {"role": "user", "content": [{"type": "text", "text": users.pop(0)}]}
                )
            index = sent

            def send(
                index: int = index, kind: str = kind, pending: list[dict[str, Any]] = pending
            ) -> Row:
                started = time.perf_counter()
                first: float | None = None
                with client.messages.stream(
                    model="claude-opus-5-5",
                    system=system,  # type: ignore[arg-type]  # the captured JSON
                    tools=tools,  # type: ignore[arg-type]
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=MAX_TOKENS,
                    # Claude Code sends no temperature (this SDK has no argument for
                    # it); greedy decoding keeps the replay repeatable.
                    extra_body={"temperature": 0},
                ) as stream:
                    for event in stream:
                        if first is None and event.type in (
                            "content_block_start",
                            "content_block_delta",
                        ):
                            first = time.perf_counter()
                    final = stream.get_final_message()
                total = time.perf_counter() - started
                content = [block.model_dump(exclude_none=True) for block in final.content]
                calls = [b for b in content if b.get("type") == "tool_use"]
                messages.append({"role": "assistant", "content": content or "(no reply)"})
                for call in calls:
                    result = CLAUDE_CODE_RESULTS.get(call["name"], "done")
                    pending.append(
                        {"type": "tool_result", "tool_use_id": call["id"], "content": result}
                    )
                return Row(
                    SESSION_A,
                    index,
                    kind,
                    None if first is None else (first - started) * 1000,
                    total * 1000,
                    [c["name"] for c in calls],
                )

            yield kind, send
            sent += 1


def session_home_assistant(url: str, turns: int) -> Iterator[tuple[str, Callable[[], Row]]]:
    """Session B's requests (see ``session_claude_code``)."""
    import ollama

    client = ollama.Client(host=url, timeout=CLIENT_TIMEOUT)
    messages: list[dict[str, Any]] = [{"role": "system", "content": HOME_ASSISTANT_SYSTEM}]
    users = list(HOME_ASSISTANT_USERS)
    pending: list[dict[str, Any]] = []
    sent = 0
    while sent < turns and (users or pending):
        kind = "tool" if pending else "user"
        if pending:
            messages.extend(pending)
            pending = []
        else:
            messages.append({"role": "user", "content": users.pop(0)})
        index = sent

        def send(
            index: int = index, kind: str = kind, pending: list[dict[str, Any]] = pending
        ) -> Row:
            started = time.perf_counter()
            first: float | None = None
            text: list[str] = []
            calls: list[dict[str, Any]] = []
            for chunk in client.chat(
                model="smollm2",
                messages=messages,
                tools=HOME_ASSISTANT_TOOLS,
                stream=True,
                options={"temperature": 0, "num_predict": MAX_TOKENS},
            ):
                message = chunk.message
                if first is None and (message.content or message.tool_calls):
                    first = time.perf_counter()
                text.append(message.content or "")
                for tool_call in message.tool_calls or []:
                    calls.append(
                        {
                            "function": {
                                "name": tool_call.function.name,
                                "arguments": dict(tool_call.function.arguments),
                            }
                        }
                    )
            total = time.perf_counter() - started
            reply: dict[str, Any] = {"role": "assistant", "content": "".join(text)}
            if calls:
                reply["tool_calls"] = calls
            messages.append(reply)
            for call in calls:
                name = call["function"]["name"]
                result = HOME_ASSISTANT_RESULTS.get(name, '{"success": true}')
                pending.append({"role": "tool", "content": result, "tool_name": name})
            return Row(
                SESSION_B,
                index,
                kind,
                None if first is None else (first - started) * 1000,
                total * 1000,
                [c["function"]["name"] for c in calls],
            )

        yield kind, send
        sent += 1


# -- the independent measure ---------------------------------------------------------------


class Tokenizer:
    """The GGUF's vocabulary and chat template, as the embedded worker uses them."""

    def __init__(self) -> None:
        import llama_cpp

        from llmbridge.backends.embedded.backend import default_model_path
        from llmbridge.backends.embedded.prompt import template_formatter

        self.llama = llama_cpp.Llama(
            model_path=str(default_model_path()), vocab_only=True, verbose=False
        )
        self.formatter = template_formatter(self.llama)

    def prompt(self, call: ModelCall) -> list[int]:
        if call.completion is not None:
            return list(self.llama.tokenize(call.completion.encode(), add_bos=True, special=True))
        from llmbridge.backends.embedded.prompt import prompt_tokens

        tokens = prompt_tokens(self.llama, self.formatter, call.messages or [])
        if tokens is None:
            raise SystemExit("the GGUF has no chat template: cannot measure")
        return tokens

    def output(self, text: str) -> list[int]:
        return list(self.llama.tokenize(text.encode(), add_bos=False, special=False))


def measure(rows: list[Row], tokenizer: Tokenizer) -> None:
    """Fill each call's measured prompt and cached tokens, in call order."""
    from llmbridge.backends.embedded.prompt import cached_prefix

    held: list[int] = []
    for row in rows:
        for call in row.calls:
            prompt = tokenizer.prompt(call)
            call.measured_prompt = len(prompt)
            call.measured_cached = cached_prefix(held, prompt, requires_eval=True)
            held = prompt + tokenizer.output(call.output)


# -- one side: a gateway, both sessions -----------------------------------------------------


@dataclass
class Side:
    label: str
    rows: list[Row] = field(default_factory=list)
    source: dict[str, Any] = field(default_factory=dict)


def run_side(
    label: str, workdir: Path, args: argparse.Namespace, baseline: Baseline | None
) -> Side:
    side = Side(label, source=baseline.describe() if baseline else {"src": "this tree"})
    server, record = start_gateway(label, workdir, args.n_ctx, baseline)
    try:
        wait_up(server)
        calls = CallLog(record)
        url = f"http://127.0.0.1:{server.port}"
        sessions = (
            (SESSION_A, session_claude_code(url, args.turns_a)),
            (SESSION_B, session_home_assistant(url, args.turns_b)),
        )
        for name, requests in sessions:
            log(f"{label}: session {name}")
            for count, (kind, send) in enumerate(requests):
                try:
                    row = send()
                except Exception as exc:  # noqa: BLE001 - recorded; the session stops
                    row = Row(name, count, kind, None, 0.0, [], error=repr(exc)[:300])
                row.calls = calls.new_calls()
                side.rows.append(row)
                log(
                    f"{label} {row.session} #{row.index} {kind}: {len(row.calls)} calls, "
                    f"ttft {row.ttft_ms or 0:.0f} ms, tools {row.tool_calls}"
                    + (f", error {row.error}" if row.error else "")
                )
                if row.error:
                    break
    finally:
        server.stop()
    return side


# -- the report -------------------------------------------------------------------------------


def summarise(rows: list[Row]) -> dict[str, Any]:
    """From the second request on: the share of input tokens from the cache, and the
    time to first token against the first request's."""
    later = [row for row in rows[1:] if not row.error]
    prompt = sum(row.prompt for row in later)
    measured = sum(row.measured_cached for row in later)
    reported = [row.reported_cached for row in later]
    ttfts = [row.ttft_ms for row in later if row.ttft_ms is not None]
    first = rows[0].ttft_ms if rows and rows[0].ttft_ms else None
    evals = [row.prompt_eval_ms for row in later if row.prompt_eval_ms is not None]
    first_eval = rows[0].prompt_eval_ms if rows else None
    return {
        "requests": len(rows),
        "prompt_tokens_from_2nd": prompt,
        "measured_cached_share": measured / prompt if prompt else None,
        "reported_cached_share": (
            sum(r for r in reported if r is not None) / prompt
            if prompt and reported and all(r is not None for r in reported)
            else None
        ),
        "ttft_first_ms": first,
        "ttft_later_median_ms": statistics.median(ttfts) if ttfts else None,
        "ttft_ratio_vs_first": (statistics.median(ttfts) / first) if ttfts and first else None,
        "model_ttft_first_ms": first_eval,
        "model_ttft_later_median_ms": statistics.median(evals) if evals else None,
        "model_ttft_ratio_vs_first": (
            statistics.median(evals) / first_eval if evals and first_eval else None
        ),
    }


def fmt(value: float | int | None, spec: str = ".0f") -> str:
    return "-" if value is None else format(value, spec)


def print_side(side: Side) -> dict[str, dict[str, Any]]:
    print(
        f"\n== {side.label} ({side.source.get('src')}"
        f"{' @ ' + side.source['commit'][:9] if side.source.get('commit') else ''})"
    )
    header = (
        f"{'session':<17}{'#':>3} {'kind':<5}{'calls':>6}{'prompt':>8}{'cached':>8}"
        f"{'(meas.)':>8}{'eval':>7}{'model ms':>9}{'ttft ms':>9}{'total ms':>10}  tools"
    )
    print(header)
    summaries: dict[str, dict[str, Any]] = {}
    for session in sorted({row.session for row in side.rows}):
        rows = [row for row in side.rows if row.session == session]
        for row in rows:
            reported = row.reported_cached
            cached = reported if reported is not None else row.measured_cached
            print(
                f"{row.session:<17}{row.index:>3} {row.kind:<5}{len(row.calls):>6}"
                f"{row.prompt:>8}{fmt(reported):>8}{row.measured_cached:>8}"
                f"{row.prompt - cached:>7}{fmt(row.prompt_eval_ms):>9}{fmt(row.ttft_ms):>9}"
                f"{row.total_ms:>10.0f}  "
                f"{','.join(row.tool_calls) or ('ERROR ' + row.error if row.error else '')}"
            )
        summary = summarise(rows)
        summaries[session] = summary
        print(
            f"  from the 2nd request: {fmt(summary['measured_cached_share'], '.1%')} of input "
            f"tokens cached (measured), {fmt(summary['reported_cached_share'], '.1%')} "
            f"(reported); ttft median {fmt(summary['ttft_later_median_ms'])} ms vs first "
            f"{fmt(summary['ttft_first_ms'])} ms (x{fmt(summary['ttft_ratio_vs_first'], '.2f')}); "
            f"the model's own (prompt evaluation) "
            f"{fmt(summary['model_ttft_later_median_ms'])} ms vs "
            f"{fmt(summary['model_ttft_first_ms'])} ms "
            f"(x{fmt(summary['model_ttft_ratio_vs_first'], '.2f')})"
        )
    return summaries


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--baseline-src", type=Path, help="src/ of another checkout")
    parser.add_argument("--n-ctx", type=int, default=8192, help="the model's context")
    parser.add_argument("--turns-a", type=int, default=5, help="requests in session A")
    parser.add_argument("--turns-b", type=int, default=6, help="requests in session B")
    parser.add_argument("--quick", action="store_true", help="3 requests per session")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--record", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--database", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        serve(args.serve, args.record, args.n_ctx, args.database)
        return
    if args.quick:
        args.turns_a = args.turns_b = 3
    run = start_run("prefix_cache", None)
    baseline = None
    if args.baseline_src is not None:
        try:
            baseline = prepare_baseline(args.baseline_src)
        except BaselineError as exc:
            raise SystemExit(str(exc)) from exc
    tokenizer = Tokenizer()
    sides: list[Side] = []
    with tempfile.TemporaryDirectory(prefix="prefix-cache-") as tmp:
        workdir = Path(tmp)
        sides.append(run_side("this-tree", workdir, args, None))
        if baseline is not None:
            sides.append(run_side("baseline", workdir, args, baseline))
    for side in sides:
        measure(side.rows, tokenizer)
    summaries = {side.label: print_side(side) for side in sides}
    if baseline is not None:
        print("\n== this tree vs baseline (same run)")
        for session, ours in summaries["this-tree"].items():
            theirs = summaries["baseline"].get(session, {})
            ours_ttft, base_ttft = ours["ttft_later_median_ms"], theirs.get("ttft_later_median_ms")
            ratio = ours_ttft / base_ttft if ours_ttft and base_ttft else None
            ours_eval = ours["model_ttft_later_median_ms"]
            base_eval = theirs.get("model_ttft_later_median_ms")
            eval_ratio = ours_eval / base_eval if ours_eval and base_eval else None
            print(
                f"  {session}: cached share from the 2nd request "
                f"{fmt(ours['measured_cached_share'], '.1%')} vs "
                f"{fmt(theirs.get('measured_cached_share'), '.1%')} (measured); "
                f"ttft median from the 2nd request x{fmt(ratio, '.2f')} of the baseline's, "
                f"the model's own x{fmt(eval_ratio, '.2f')}"
            )
    result = results_header(run, args) | {
        "n_ctx": args.n_ctx,
        "sides": [
            {
                "label": side.label,
                "source": side.source,
                "summary": summaries[side.label],
                "rows": [
                    {**asdict(row), "prompt": row.prompt, "measured_cached": row.measured_cached}
                    for row in side.rows
                ],
            }
            for side in sides
        ],
    }
    save_results("prefix_cache", result, run.started)


if __name__ == "__main__":
    main()
