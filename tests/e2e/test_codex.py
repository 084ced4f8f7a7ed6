"""OpenAI's Codex CLI end to end: the real ``codex exec``, pinned in
``tests/e2e/package.json`` (``@openai/codex``, whose Linux binary comes as an optional
dependency) and installed by ``make test``, against the gateway's ``/v1/responses`` on
loopback.

Codex is configured as a user would: a custom model provider in
``$CODEX_HOME/config.toml`` with ``wire_api = "responses"`` (the only value 0.169.0
accepts) and no ``env_key`` (the gateway takes no key, and Codex then sends none). It
runs fully offline: ``HOME`` and ``CODEX_HOME`` are fresh temporary directories, and the
one thing that reaches for other hosts in ``codex exec`` 0.169.0, the curated plugins
sync at start (``api.github.com``, then ``chatgpt.com``; seen with ``strace -e
connect,sendto``), is switched off with ``features.plugins = false``; update checks
and analytics are off too. With that, its only connection is to the gateway.

What Codex 0.169.0 and 0.171.0 send (``../shared/reference/captured/``): streamed requests with
``developer`` and ``user`` messages, flat ``function`` tools (its shell tool is
``exec_command`` with one string ``cmd``), a ``namespace`` (``multi_agent_v1``) and the
hosted ``web_search``, ``store: false`` and ``reasoning.encrypted_content`` in
``include``. A tool's result comes back as a ``function_call_output`` with the whole
conversation (no ``previous_response_id``).
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import Usage
from llmbridge.dialects.responses.summary import SUMMARY_INTRO
from llmbridge.features.compaction import SUMMARY_PROMPT
from tests.conftest import RunningServer
from tests.e2e import cli_harness
from tests.e2e.cli_harness import (
    CliRun,
    ToolLoopBackend,
    check_installed,
    clean_environment,
    failure_report,
    run_cli,
    tool_round,
)
from tests.e2e.clients import BIN, expected_version
from tests.e2e.mcp_gateway import FINAL_TEXT as MCP_FINAL_TEXT
from tests.e2e.mcp_gateway import (
    GATEWAY_TOOL,
    McpToolBackend,
    check_the_tool_ran,
    mcp_gateway,
)
from tests.e2e.mcp_gateway import MARKER as MCP_MARKER
from tests.e2e.recording import Exchange, Recorder
from tests.e2e.relaying import paths_served, relaying_gateway

CODEX = BIN / "codex"
PINNED: str = expected_version("@openai/codex")  # the newest under make compat
MODEL = "codex-e2e"  # what Codex asks for; the gateway routes it to the scripted backend
BACKEND_MODEL = "scripted"
SHELL_TOOL = "exec_command"  # Codex's shell tool (0.169.0, 0.171.0): {"cmd": "<a command>"}
KEY_VARIABLE = "LLMBRIDGE_API_KEY"  # the gateway's key, for the model provider and MCP
Served = tuple[RunningServer, Recorder]


# -- the CLI --------------------------------------------------------------------------


def _environment(home: Path, **variables: str) -> dict[str, str]:
    """A clean environment (cli_harness.clean_environment) with Codex's own home."""
    return clean_environment(home, CODEX_HOME=str(home / "codex"), **variables)


def _write_config(
    home: Path, base_url: str, more: str = "", key_variable: str = "", provider: str = ""
) -> None:
    """``$CODEX_HOME/config.toml``: the gateway as Codex's model provider (sending the
    key in the variable ``key_variable``, its ``env_key``, when given; ``provider``: more
    of its table), then ``more``."""
    env_key = f'env_key = "{key_variable}"\n' if key_variable else ""
    codex_home = home / "codex"
    codex_home.mkdir(exist_ok=True)
    (codex_home / "config.toml").write_text(
        f"""\
model = "{MODEL}"
model_provider = "llmbridge"
approval_policy = "never"           # exec's default too: never ask, run or refuse
check_for_update_on_startup = false

[model_providers.llmbridge]
name = "llmbridge"
{env_key}base_url = "{base_url}/v1"
wire_api = "responses"
request_max_retries = 0             # a failed request is a test failure, not a retry
stream_max_retries = 0
{provider}
[features]
plugins = false                     # the curated plugins sync reaches api.github.com

[analytics]
enabled = false

[sandbox_workspace_write]
# The temporary directories are under /tmp, which workspace-write leaves writable by
# default: excluded, only the working directory is, so a write beside it must fail.
exclude_slash_tmp = true
exclude_tmpdir_env_var = true
{more}""",
        encoding="utf-8",
    )


def _events(run: CliRun) -> list[dict[str, Any]]:
    """The JSON lines ``codex exec --json`` printed."""
    return [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]


def _agent_messages(run: CliRun) -> list[str]:
    return [
        str(event["item"]["text"])
        for event in _events(run)
        if event["type"] == "item.completed" and event["item"]["type"] == "agent_message"
    ]


@pytest.fixture(scope="session")
def codex(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned CLI. Missing or stale means the suite was not set up: fail, never skip."""
    home = tmp_path_factory.mktemp("codex-version")
    check_installed(
        "Codex CLI",
        CODEX,
        pinned=f"@openai/codex {PINNED}",
        accepts=lambda printed: printed.strip() == f"codex-cli {PINNED}",
        env=_environment(home),
        cwd=home,
    )
    return CODEX


def run_codex(
    codex: Path,
    home: Path,
    workdir: Path,
    base_url: str,
    args: list[str],
    config: str = "",
    key: str = "",
    provider: str = "",
) -> CliRun:
    """``codex exec <args>`` in ``workdir``, against the gateway at ``base_url``;
    ``config`` is more of config.toml, ``provider`` more of its model provider's table,
    ``key`` the gateway's key (in ``KEY_VARIABLE``)."""
    _write_config(home, base_url, config, KEY_VARIABLE if key else "", provider)
    argv = ["exec", "--skip-git-repo-check", "--cd", str(workdir), *args]
    environment = _environment(home, **({KEY_VARIABLE: key} if key else {}))
    return run_cli("Codex", codex, argv, env=environment, cwd=workdir)


# -- the gateway ----------------------------------------------------------------------


def recorded_gateway(backend: ScriptedBackend) -> AbstractContextManager[Served]:
    """The recorded gateway over ``backend`` with Codex's model name routed to it
    (tests/profiler/test_codex_profile.py serves Codex with it too)."""
    return cli_harness.recorded_gateway(backend, MODEL, BACKEND_MODEL)


def _report(run: CliRun, recorder: Recorder, backend: ScriptedBackend) -> str:
    exchanges = [(e.method, e.path, e.status) for e in recorder.exchanges]
    return failure_report(run, exchanges=exchanges, received=backend.requests)


def _items(call: Exchange, kind: str) -> list[dict[str, Any]]:
    """The ``input`` items of type ``kind`` in a ``/v1/responses`` request."""
    items = call.body()["input"]
    assert isinstance(items, list)
    return [item for item in items if item.get("type") == kind]


def _completed_usage(call: Exchange) -> dict[str, Any]:
    """``usage`` of the ``response.completed`` event the gateway streamed back."""
    completed = [e for e in call.sse_events() if e.get("type") == "response.completed"]
    assert len(completed) == 1, call.response.decode(errors="replace")
    usage: dict[str, Any] = completed[0]["response"]["usage"]
    return usage


# -- a plain answer -------------------------------------------------------------------

ANSWER = "The gateway answered Codex."


def test_prints_the_backends_answer(codex: Path, tmp_path: Path) -> None:
    """``codex exec "<prompt>"`` prints what the backend said, exits 0, and its real
    request (tools, hosted tools, namespaces, ``store: false``) was served as is."""
    backend = ScriptedBackend("scripted", default=Script(text=["The gateway", " answered Codex."]))
    workdir = tmp_path / "work"
    workdir.mkdir()
    prompt = "Say something"
    with recorded_gateway(backend) as (server, recorder):
        run = run_codex(codex, tmp_path, workdir, server.url, [prompt])
    report = _report(run, recorder, backend)

    assert run.returncode == 0, report
    assert run.stdout.strip() == ANSWER, report  # exec prints the last message on stdout

    # Codex's only traffic: one streamed POST /v1/responses, answered 200.
    assert [(e.method, e.path, e.status) for e in recorder.exchanges] == [
        ("POST", "/v1/responses", 200)
    ], report
    call = recorder.exchanges[0]
    assert call.headers["user-agent"].startswith(f"codex_exec/{PINNED} "), report
    assert call.response_headers["content-type"].startswith("text/event-stream"), report
    body = call.body()
    assert body["model"] == MODEL and body["stream"] is True and body["store"] is False
    assert "previous_response_id" not in body  # Codex sends the whole conversation
    tools = body["tools"]
    assert isinstance(tools, list)
    kinds = {tool["type"] for tool in tools}
    assert {"function", "namespace", "web_search"} <= kinds, kinds
    assert any(t["type"] == "function" and t["name"] == SHELL_TOOL for t in tools), tools
    user_texts = [
        part["text"]
        for item in _items(call, "message")
        if item["role"] == "user"
        for part in item["content"]
    ]
    assert user_texts[-1] == prompt, user_texts
    # The hosted tool no backend here runs is left out, and the reply says so.
    assert "web_search" in call.response_headers["x-llmbridge-ignored-tools"].split(","), report

    # What the backend got: Codex's tools as functions, namespaces flattened, no hosted
    # tool, the routed model name, the prompt last.
    assert len(backend.requests) == 1, report
    seen = backend.requests[0]
    assert seen.model == BACKEND_MODEL, report
    names = [tool.name for tool in seen.tools]
    assert SHELL_TOOL in names and "web_search" not in names, names
    namespace = next(t for t in tools if t["type"] == "namespace")
    assert {f"{namespace['name']}__{t['name']}" for t in namespace["tools"]} <= set(names)
    assert seen.messages[-1].role == "user" and seen.messages[-1].text == prompt, report


# -- a tool turn: the backend calls Codex's shell tool, Codex runs it sandboxed ---------

MARKER = "llmbridge-e2e-42"  # only a shell that ran the command prints 42
FINAL_TEXT = "The command wrote out.txt."


def test_runs_the_shell_command_the_model_asks_for_in_its_sandbox(
    codex: Path, tmp_path: Path
) -> None:
    """The backend calls ``exec_command``; Codex runs it in its workspace-write sandbox
    (bubblewrap) in a temporary working directory, sends the output back as a
    ``function_call_output``, and prints the backend's final answer. The sandbox is
    real: the same command's write beside the working directory is refused."""
    workdir = tmp_path / "work"
    outside = tmp_path / "outside"
    workdir.mkdir()
    outside.mkdir()
    escape = outside / "escape.txt"
    command = f"echo llmbridge-e2e-$((6*7)) | tee out.txt; echo escaped > {escape}"
    backend = ToolLoopBackend(SHELL_TOOL, {"cmd": command}, [FINAL_TEXT])
    with recorded_gateway(backend) as (server, recorder):
        run = run_codex(
            codex,
            tmp_path,
            workdir,
            server.url,
            ["--json", "--sandbox", "workspace-write", "Run the marker command"],
        )
    report = _report(run, recorder, backend)

    assert run.returncode == 0, report
    assert _agent_messages(run)[-1:] == [FINAL_TEXT], report
    # The command ran, in the working directory, and nowhere else.
    assert (workdir / "out.txt").read_text(encoding="utf-8") == MARKER + "\n", report
    assert not escape.exists(), f"the sandbox let a write outside the workspace through\n{report}"

    calls = recorder.calls("/v1/responses")
    assert [e.status for e in recorder.exchanges] == [200, 200], report
    assert len(calls) == 2 and len(backend.requests) == 2, report

    # The second request, on the wire: the call as the gateway streamed it, then its
    # output with the same call_id, carrying what the shell printed.
    follow_up = calls[1]
    (sent_call,) = _items(follow_up, "function_call")
    (sent_output,) = _items(follow_up, "function_call_output")
    assert sent_call["name"] == SHELL_TOOL, sent_call
    assert json.loads(sent_call["arguments"]) == {"cmd": command}, sent_call
    assert sent_output["call_id"] == sent_call["call_id"], sent_output
    assert MARKER in sent_output["output"], sent_output
    streamed = [e for e in calls[0].sse_events() if e.get("type") == "response.output_item.done"]
    assert [e["item"]["call_id"] for e in streamed] == [sent_call["call_id"]], streamed

    # The same, as the backend got it: the assistant's call, then the tool's result.
    tool_call, result = tool_round(backend.requests[1], report)
    assert tool_call.name == SHELL_TOOL and tool_call.arguments == {"cmd": command}
    assert MARKER in result.content, report

    # What Codex counted for the turn is what the gateway reported, summed.
    (turn,) = [e for e in _events(run) if e["type"] == "turn.completed"]
    usages = [_completed_usage(call) for call in calls]
    assert turn["usage"]["input_tokens"] == sum(u["input_tokens"] for u in usages), report
    assert turn["usage"]["output_tokens"] == sum(u["output_tokens"] for u in usages), report


# -- a gateway MCP tool, through [mcp_servers.gw] -----------------------------------

MCP_NAMESPACE = "mcp__gw"  # Codex sends a server's tools as a namespace: mcp__<its name>
MCP_TOOL = f"{MCP_NAMESPACE}__{GATEWAY_TOOL}"  # as the gateway flattens it for the backend


def test_calls_a_gateway_mcp_tool(codex: Path, tmp_path: Path) -> None:
    """Codex with the gateway's ``/mcp`` as ``[mcp_servers.gw]`` (``url`` and
    ``bearer_token_env_var``; keys on, one database key for the model provider's
    ``env_key`` and for MCP) calls ``files__read_text_file`` on server-filesystem when
    the model asks for ``mcp__gw__files__read_text_file``: the namespace Codex sent it
    in, flattened by the gateway, and put back on the call it streams."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    arguments = {"path": ""}  # set once the note's path is known
    backend = McpToolBackend(MCP_TOOL, arguments)
    with mcp_gateway(backend, MODEL, BACKEND_MODEL, tmp_path) as served:
        arguments["path"] = str(served.note)
        config = f"""
[mcp_servers.gw]
url = "{served.mcp_url}"
bearer_token_env_var = "{KEY_VARIABLE}"
"""
        args = ["--json", "Read the note"]
        run = run_codex(codex, tmp_path, workdir, served.server.url, args, config, served.key)
    report = failure_report(run, exchanges=served.exchange_lines(), received=backend.requests)

    assert run.returncode == 0, report
    assert _agent_messages(run)[-1:] == [MCP_FINAL_TEXT], report
    assert all(e.status is not None and e.status < 400 for e in served.recorder.exchanges), report
    check_the_tool_ran(served, backend.requests, MCP_TOOL, report)
    (item,) = [
        e["item"]
        for e in _events(run)
        if e["type"] == "item.completed" and e["item"]["type"] == "mcp_tool_call"
    ]
    assert (item["server"], item["tool"], item["status"]) == ("gw", GATEWAY_TOOL, "completed")

    # On the wire: the server's tools in a namespace, the call back in it, its output.
    first, second = served.recorder.calls("/v1/responses")
    tools = first.body()["tools"]
    assert isinstance(tools, list)
    (namespace,) = [t for t in tools if t.get("name") == MCP_NAMESPACE]
    assert namespace["type"] == "namespace", namespace
    assert GATEWAY_TOOL in [t["name"] for t in namespace["tools"]], namespace
    (sent_call,) = _items(second, "function_call")
    assert (sent_call["namespace"], sent_call["name"]) == (MCP_NAMESPACE, GATEWAY_TOOL)
    (output,) = _items(second, "function_call_output")
    assert output["call_id"] == sent_call["call_id"] and MCP_MARKER in output["output"], output
    # Codex speaks the handshake (2025-06-18) with its key on every /mcp request.
    (initialize,) = [e for e in served.mcp_calls() if e.body().get("method") == "initialize"]
    assert initialize.headers["authorization"] == f"Bearer {served.key}", report


# -- Responses over a WebSocket, and Codex's remote compaction ---------------------------

WS_FINAL = "Done over the socket."
COMPACTED_FINAL = "Done after compacting."
SUMMARY = "The user asked for a marker; echo ran it."


def test_runs_a_tool_turn_over_a_websocket(codex: Path, tmp_path: Path) -> None:
    """With ``supports_websockets = true`` Codex opens ``/v1/responses`` as a socket
    (``OpenAI-Beta: responses_websockets=2026-02-06``): a warm-up (``generate: false``,
    which calls no model), the turn, then the tool's output continuing it by
    ``previous_response_id`` with only the new items, ``store: false`` throughout; the
    socket holds the conversation, so the backend still sees all of it."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    backend = ToolLoopBackend(SHELL_TOOL, {"cmd": "echo llmbridge-e2e-$((6*7))"}, [WS_FINAL])
    with recorded_gateway(backend) as (server, recorder):
        run = run_codex(
            codex,
            tmp_path,
            workdir,
            server.url,
            ["--json", "Run the marker command"],
            provider="supports_websockets = true\n",
        )
    report = _report(run, recorder, backend)

    assert run.returncode == 0, report
    assert _agent_messages(run)[-1:] == [WS_FINAL], report
    assert not recorder.calls("/v1/responses"), report  # no HTTP fallback was needed
    (socket,) = recorder.sockets("/v1/responses")
    assert socket.headers["openai-beta"] == "responses_websockets=2026-02-06", report
    frames = socket.frames()
    assert [f["type"] for f in frames] == ["response.create"] * 3, report
    assert frames[0]["generate"] is False and "previous_response_id" not in frames[0]
    assert all(f["store"] is False for f in frames)
    outputs = [item for item in frames[2]["input"] if item["type"] == "function_call_output"]
    assert frames[2]["previous_response_id"] and len(outputs) == 1, report
    assert MARKER in outputs[0]["output"], report
    # Two model calls (the warm-up made none); the second holds the whole turn.
    assert len(backend.requests) == 2, report
    tool_call, result = tool_round(backend.requests[1], report)
    assert tool_call.name == SHELL_TOOL and MARKER in result.content, report


class _CompactingBackend(ScriptedBackend):
    """The shell call (its usage over Codex's limit, so Codex compacts mid-turn), the
    summary when asked for one, and the final answer once the summary is the history."""

    def __init__(self) -> None:
        super().__init__("scripted", default=Script(text=["(unscripted)"]))

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        texts = [message.text for message in request.messages]
        if texts and texts[-1] == SUMMARY_PROMPT:
            self.enqueue(Script(text=[SUMMARY]))
        elif any(text.startswith(SUMMARY_INTRO) for text in texts):
            self.enqueue(Script(text=[COMPACTED_FINAL]))
        elif any(tool.name == SHELL_TOOL for tool in request.tools):
            call = (SHELL_TOOL, {"cmd": "echo llmbridge-e2e-$((6*7))"})
            usage = Usage(input_tokens=5000, output_tokens=10)
            self.enqueue(Script(text=[], tool_calls=[call], usage=usage))
        async for event in super().chat(request):
            yield event


def test_remote_compaction_through_the_gateway(codex: Path, tmp_path: Path) -> None:
    """Codex's built-in ``openai`` provider pointed at the gateway (``openai_base_url``)
    compacts remotely: past ``model_auto_compact_token_limit`` it ends a request with
    ``compaction_trigger`` and wants one ``compaction`` item back. The scripted backend
    cannot compact, so the gateway asks it for a summary; Codex's next request carries
    the item, which the backend sees as that summary."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    codex_home = tmp_path / "codex"
    codex_home.mkdir()
    backend = _CompactingBackend()
    with recorded_gateway(backend) as (server, recorder):
        (codex_home / "config.toml").write_text(
            f"""\
model = "{MODEL}"
approval_policy = "never"
check_for_update_on_startup = false
model_auto_compact_token_limit = 1000
openai_base_url = "{server.url}/v1"

[features]
plugins = false

[analytics]
enabled = false
""",
            encoding="utf-8",
        )
        argv = ["exec", "--skip-git-repo-check", "--cd", str(workdir), "--json", "Go"]
        environment = _environment(tmp_path, CODEX_API_KEY="sk-unused-by-the-gateway")
        run = run_cli("Codex", codex, argv, env=environment, cwd=workdir)
    report = _report(run, recorder, backend)

    assert run.returncode == 0, report
    assert _agent_messages(run)[-1:] == [COMPACTED_FINAL], report
    frames = [f for socket in recorder.sockets("/v1/responses") for f in socket.frames()]
    frames += [call.body() for call in recorder.calls("/v1/responses")]
    triggers = [f for f in frames if f["input"] and f["input"][-1]["type"] == "compaction_trigger"]
    assert len(triggers) == 1, report
    carried = [item for f in frames for item in f["input"] if item["type"] == "compaction"]
    assert len(carried) == 1 and carried[0]["encrypted_content"], report
    asked = [r for r in backend.requests if r.messages[-1].text == SUMMARY_PROMPT]
    assert len(asked) == 1, report
    last = backend.requests[-1]
    assert any(m.text == SUMMARY_INTRO + SUMMARY for m in last.messages), report


# -- the pass-through path: a Responses backend relays Codex's requests ----------------


def test_runs_the_shell_command_on_the_pass_through_path(codex: Path, tmp_path: Path) -> None:
    """Codex in front of a gateway whose backend speaks the Responses API (another
    gateway, serving the scripted tool loop): each of its requests is relayed as bytes
    (docs/PASSTHROUGH.md), and the shell round trip works as on the translated path."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = "echo llmbridge-e2e-$((6*7)) | tee out.txt"
    backend = ToolLoopBackend(SHELL_TOOL, {"cmd": command}, [FINAL_TEXT])
    with (
        recorded_gateway(backend) as (inner, _),
        relaying_gateway(inner.url, "openai_responses") as (front, recorder),
    ):
        # No hosted web search: a tool only OpenAI runs, which the gateway leaves out
        # (x-llmbridge-ignored-tools) for a backend that is not OpenAI's, so translates.
        args = ["-c", 'web_search="disabled"', "--json", "--sandbox", "workspace-write", "Go"]
        run = run_codex(codex, tmp_path, workdir, front.url, args)
    report = _report(run, recorder, backend)
    assert run.returncode == 0, report
    assert _agent_messages(run)[-1:] == [FINAL_TEXT], report
    assert (workdir / "out.txt").read_text(encoding="utf-8") == MARKER + "\n", report
    served = paths_served(recorder)
    assert len(served) == 2 and set(served) == {"passthrough"}, (served, report)
