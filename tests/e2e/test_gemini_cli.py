"""Google's Gemini CLI end to end: the real ``gemini -p``, pinned in
``tests/e2e/package.json`` (``@google/gemini-cli``) and installed by ``make test``,
against the gateway's Gemini API (``/v1beta/models/{model}:streamGenerateContent``) on
loopback.

Gemini CLI is configured as a user would point it at llmbridge (docs/GEMINI.md, "Gemini
CLI"): ``GOOGLE_GEMINI_BASE_URL`` is the gateway, ``GEMINI_API_KEY`` any key, and
``security.auth.selectedType: "gemini-api-key"`` in ``~/.gemini/settings.json``, with a
fresh temporary ``HOME``. It runs fully offline: the one thing that reaches for another
host in 0.61.0 is the usage statistics logger (a DNS lookup of ``play.googleapis.com``,
seen with ``strace -f -e connect,sendmmsg``), switched off with
``privacy.usageStatisticsEnabled: false``; telemetry, update checks, IDE integration and
the sandbox are off too. With that, its only connection is to the gateway.

The model is named (``--model``) except in the test of the CLI's default, ``auto``: with
``auto``, 0.61.0 first asks ``gemini-3.5-flash-lite:generateContent`` for a JSON
"complexity score" to choose between its Pro and Flash models (and retries five times,
with backoff, when the reply is not that JSON). A named model skips that router: one
``streamGenerateContent?alt=sse`` per turn.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

import httpx
import pytest

from llmbridge.backends.scripted import Script, ScriptedBackend
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import load_config
from llmbridge.profiler.providers.cli_agent import merge_settings
from llmbridge.profiler.providers.gemini_cli import gemini_settings
from tests.conftest import RunningServer
from tests.e2e.cli_harness import (
    TIMEOUT,
    CliRun,
    ToolLoopBackend,
    check_installed,
    clean_environment,
    failure_report,
    recorded_gateway,
    run_cli,
    tool_round,
)
from tests.e2e.clients import BIN, expected_version
from tests.e2e.mcp_gateway import FINAL_TEXT as MCP_FINAL_TEXT
from tests.e2e.mcp_gateway import GATEWAY_TOOL, McpToolBackend, check_the_tool_ran, mcp_gateway
from tests.e2e.mcp_gateway import MARKER as MCP_MARKER
from tests.e2e.recording import Exchange, Recorder
from tests.e2e.relaying import paths_served, relaying_gateway

GEMINI = BIN / "gemini"
PINNED: str = expected_version("@google/gemini-cli")  # the newest under make compat
MODEL = "gemini-e2e"  # what the CLI asks for (--model); not "auto", so no router call
API_KEY = "llmbridge-e2e-key"  # the gateway takes no key; the CLI needs one to start
STREAM_PATH = f"/v1beta/models/{MODEL}:streamGenerateContent"
SHELL_TOOL = "run_shell_command"  # Gemini CLI 0.61.0's shell tool: {"command": "<shell>"}


# -- the CLI --------------------------------------------------------------------------


def _environment(home: Path, base_url: str, **extra: str) -> dict[str, str]:
    """Gemini CLI's variables in a clean environment (cli_harness.clean_environment):
    the gateway, its key, and no folder trust prompt or sandbox."""
    variables = {
        "GOOGLE_GEMINI_BASE_URL": base_url,  # http is allowed for 127.0.0.1 only
        "GEMINI_API_KEY": API_KEY,
        "GEMINI_CLI_TRUST_WORKSPACE": "true",  # headless: no folder trust prompt
        "GEMINI_SANDBOX": "false",  # tools run here, not in the Docker sandbox
    }
    return clean_environment(home, **{**variables, **extra})


def _settings(**extra: Any) -> dict[str, Any]:
    """``~/.gemini/settings.json``: the API-key auth (required for
    ``GOOGLE_GEMINI_BASE_URL`` to apply), and everything that would reach other hosts
    off; the profiler's Gemini CLI provider writes the same (``gemini_settings``)."""
    return merge_settings(gemini_settings(), extra)


@pytest.fixture(scope="session")
def gemini(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The pinned CLI. Missing or stale means the suite was not set up: fail, never skip."""
    home = tmp_path_factory.mktemp("gemini-version")
    check_installed(
        "Gemini CLI",
        GEMINI,
        pinned=f"@google/gemini-cli {PINNED}",
        accepts=lambda printed: printed.strip() == PINNED,
        env=_environment(home, "http://127.0.0.1:9"),
        cwd=home,
    )
    return GEMINI


def run_gemini(
    gemini: Path,
    home: Path,
    workdir: Path,
    base_url: str,
    args: list[str],
    settings: dict[str, Any],
    model: str | None = MODEL,
    **env: str,
) -> CliRun:
    """``gemini --model <model> <args>`` in ``workdir``, against the gateway at
    ``base_url``; ``model`` None leaves the CLI's default, ``auto``."""
    config_dir = home / ".gemini"
    config_dir.mkdir(parents=True, exist_ok=True)
    (config_dir / "settings.json").write_text(json.dumps(settings, indent=2), encoding="utf-8")
    argv = [*(["--model", model] if model else []), *args]
    environment = _environment(home, base_url, **env)
    return run_cli("Gemini CLI", gemini, argv, env=environment, cwd=workdir)


# -- what went over the wire ----------------------------------------------------------


def _exchanges(recorder: Recorder) -> list[tuple[str, str, str, int | None]]:
    return [(e.method, e.path, e.query, e.status) for e in recorder.exchanges]


def _streamed_parts(call: Exchange) -> list[dict[str, Any]]:
    """The parts of every chunk of a ``streamGenerateContent?alt=sse`` reply, in order
    (an error event, ``{"error": ...}``, has none)."""
    return [
        part
        for chunk in call.sse_events()
        for candidate in chunk.get("candidates", [])
        for part in candidate.get("content", {}).get("parts", [])
    ]


def _streamed_text(call: Exchange) -> str:
    """The answer's text as streamed: text parts that are not thoughts."""
    return "".join(
        part["text"] for part in _streamed_parts(call) if "text" in part and not part.get("thought")
    )


def _finish_reasons(call: Exchange) -> list[str]:
    return [
        candidate["finishReason"]
        for chunk in call.sse_events()
        for candidate in chunk.get("candidates", [])
        if "finishReason" in candidate
    ]


def _usage(call: Exchange) -> dict[str, Any]:
    """The ``usageMetadata`` of a streamed reply: on its last chunk only."""
    usages = [chunk["usageMetadata"] for chunk in call.sse_events() if "usageMetadata" in chunk]
    assert len(usages) == 1, call.response.decode()
    usage: dict[str, Any] = usages[0]
    return usage


def _parts_of(body: dict[str, Any], key: str) -> list[tuple[str, dict[str, Any]]]:
    """``(role, part[key])`` for every part of ``body["contents"]`` that has ``key``."""
    return [
        (content["role"], part[key])
        for content in body["contents"]
        for part in content["parts"]
        if key in part
    ]


# -- the zero-configuration gateway: the embedded model answers ---------------------

SYSTEM_PROMPT = "Answer in one short sentence."


@pytest.mark.embedded
def test_prints_the_embedded_models_answer(gemini: Path, tmp_path: Path) -> None:
    """``gemini -p`` on the zero-config gateway prints what the embedded model said.

    Gemini CLI's own system prompt (about 30,000 characters) and tool declarations do
    not fit the embedded model's 8192-token context, so the prompt is replaced with a
    short one (``GEMINI_SYSTEM_MD``, the CLI's documented override) and the built-in
    tools are switched off (``tools.core: []``); ``modelConfigs`` sets temperature 0 and
    a short ``maxOutputTokens`` for the model, as a user tunes the CLI. What the model
    says still depends on the CPU and the llama.cpp build, so the answer is
    compared with what the same request body gives, not streamed, from a fresh gateway.
    """
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    workdir.mkdir()
    system_md = tmp_path / "system.md"
    system_md.write_text(SYSTEM_PROMPT, encoding="utf-8")
    settings = _settings(
        tools={"sandbox": False, "core": []},
        context={"includeDirectoryTree": False},
        modelConfigs={
            "overrides": [
                {
                    "match": {"model": MODEL},
                    "modelConfig": {
                        "generateContentConfig": {"temperature": 0, "maxOutputTokens": 64}
                    },
                }
            ]
        },
    )
    prompt = "Say hello to the gateway."
    app = create_app(load_config(None))
    recorder = Recorder(app)
    with RunningServer(recorder, http=http_protocol(app)) as server:
        run = run_gemini(
            gemini,
            home,
            workdir,
            server.url,
            ["-p", prompt],
            settings,
            GEMINI_SYSTEM_MD=str(system_md),
        )
    report = f"{run.report()}\n--- exchanges ---\n{_exchanges(recorder)}"

    assert run.returncode == 0, report
    # The CLI's only traffic: one streamed generateContent, answered 200.
    assert _exchanges(recorder) == [("POST", STREAM_PATH, "alt=sse", 200)], report
    call = recorder.exchanges[0]
    assert call.response_headers["content-type"].startswith("text/event-stream"), report
    assert call.headers["x-goog-api-key"] == API_KEY, report
    assert f"/{PINNED}/" in call.headers["user-agent"], call.headers
    body = call.body()
    # What the gateway has to cope with: the system prompt as systemInstruction, the
    # CLI's session context and the prompt as parts of one user turn, an empty tool
    # list, thoughts asked for.
    assert body["systemInstruction"] == {"parts": [{"text": SYSTEM_PROMPT}], "role": "user"}
    assert body["tools"] == [{"functionDeclarations": []}], body["tools"]
    config = body["generationConfig"]
    assert isinstance(config, dict)
    assert config["temperature"] == 0 and config["maxOutputTokens"] == 64, config
    assert config["thinkingConfig"] == {"includeThoughts": True}, config
    contents = body["contents"]
    assert isinstance(contents, list) and len(contents) == 1, contents
    assert contents[0]["role"] == "user" and contents[0]["parts"][-1] == {"text": prompt}

    answer = _streamed_text(call).strip()
    assert answer, report
    assert _finish_reasons(call) in (["STOP"], ["MAX_TOKENS"]), call.response.decode()
    assert run.stdout.strip() == answer, report
    # The same body through the non-streaming :generateContent of a fresh zero-config
    # gateway (a fresh model, as this one was when the CLI asked): the same answer.
    with RunningServer(create_app(load_config(None))) as fresh:
        replayed = httpx.post(
            f"{fresh.url}/v1beta/models/{MODEL}:generateContent",
            json=body,
            headers={"x-goog-api-key": API_KEY},
            timeout=TIMEOUT,
        )
    assert replayed.status_code == 200, replayed.text
    parts = replayed.json()["candidates"][0]["content"]["parts"]
    text = "".join(p["text"] for p in parts if "text" in p and not p.get("thought")).strip()
    assert text == answer, f"not streamed: {text!r}\n{report}"


# -- a tool turn: the backend calls the CLI's shell tool, the CLI runs it -------------

# The CLI refuses commands with $(...), backticks or $((...)) ("Command injection
# detected"), so the proof that a shell ran is a pipe: only tr upper-cases the marker.
COMMAND = "echo llmbridge-e2e | tr a-z A-Z | tee out.txt"
MARKER = "LLMBRIDGE-E2E"
FINAL_TEXT = "The command wrote out.txt."


def test_runs_the_shell_command_the_model_asks_for(gemini: Path, tmp_path: Path) -> None:
    """The backend calls ``run_shell_command``; the CLI (``--approval-mode yolo``, the
    non-interactive way to approve it) runs it in its temporary workspace, sends the
    output back as a ``functionResponse`` and prints the backend's final answer
    (``--output-format json``: the answer, and the tokens it counted from the gateway's
    ``usageMetadata``)."""
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    workdir.mkdir()
    command = {"command": COMMAND}
    backend = ToolLoopBackend(SHELL_TOOL, command, ["The command", " wrote out.txt."])
    with recorded_gateway(backend, MODEL) as (server, recorder):
        run = run_gemini(
            gemini,
            home,
            workdir,
            server.url,
            ["--approval-mode", "yolo", "--output-format", "json", "-p", "Run the marker command"],
            _settings(),
        )
    report = failure_report(run, exchanges=_exchanges(recorder), received=backend.requests)

    assert run.returncode == 0, report
    printed = json.loads(run.stdout)
    assert printed["response"] == FINAL_TEXT, report
    # The command ran, in the workspace.
    assert (workdir / "out.txt").read_text(encoding="utf-8") == MARKER + "\n", report

    # Two turns, both streamed, both 200, and nothing else.
    assert _exchanges(recorder) == [("POST", STREAM_PATH, "alt=sse", 200)] * 2, report
    first, second = recorder.exchanges
    tools = first.body()["tools"]
    assert isinstance(tools, list)
    offered = [d["name"] for tool in tools for d in tool["functionDeclarations"]]
    assert SHELL_TOOL in offered, offered  # yolo mode offers the shell tool headless

    # The call as the gateway streamed it: whole, with its arguments as an object.
    (streamed_call,) = [p["functionCall"] for p in _streamed_parts(first) if "functionCall" in p]
    assert streamed_call["name"] == SHELL_TOOL, streamed_call
    assert streamed_call["args"] == {"command": COMMAND}, streamed_call
    assert _finish_reasons(first) == ["STOP"], first.response.decode()

    # The second request, on the wire: the model's call, then the user turn with its
    # functionResponse (same id, the CLI's own), carrying what the shell printed.
    body = second.body()
    (call_role, sent_call), *more_calls = _parts_of(body, "functionCall")
    (result_role, sent_result), *more_results = _parts_of(body, "functionResponse")
    assert not more_calls and not more_results, body["contents"]
    assert call_role == "model" and result_role == "user", body["contents"]
    assert sent_call["name"] == SHELL_TOOL and sent_call["args"] == {"command": COMMAND}
    assert sent_result["name"] == SHELL_TOOL, sent_result
    assert sent_result["id"] == sent_call["id"], (sent_call, sent_result)
    assert MARKER in sent_result["response"]["output"], sent_result

    # The same, as the backend got it: the assistant's call, then the tool's result.
    assert len(backend.requests) == 2, report
    tool_call, result = tool_round(backend.requests[1], report)
    assert tool_call.name == SHELL_TOOL and tool_call.arguments == {"command": COMMAND}
    assert result.name == SHELL_TOOL and not result.is_error, report
    assert MARKER in result.content, report

    # The final answer as streamed, which is what the CLI printed.
    assert _streamed_text(second) == FINAL_TEXT, second.response.decode()
    assert _finish_reasons(second) == ["STOP"], second.response.decode()

    # What the CLI counted: one successful shell call, and the two replies' usage summed.
    stats = printed["stats"]
    assert stats["tools"]["byName"][SHELL_TOOL]["success"] == 1, stats["tools"]
    usages = [_usage(first), _usage(second)]
    tokens = stats["models"][MODEL]["tokens"]
    assert tokens["prompt"] == sum(u["promptTokenCount"] for u in usages), (tokens, usages)
    assert tokens["candidates"] == sum(u["candidatesTokenCount"] for u in usages), tokens
    assert tokens["total"] == sum(u["totalTokenCount"] for u in usages), (tokens, usages)


# -- a gateway that wants a key: the CLI's GEMINI_API_KEY is it ------------------------

GATEWAY_KEY = "sk-gemini-e2e"


def test_the_gateways_key_is_the_clis_api_key(gemini: Path, tmp_path: Path) -> None:
    """With ``server.api_keys`` set, the CLI's ``GEMINI_API_KEY`` (sent as
    ``x-goog-api-key``) is what the gateway checks: the right key is answered; a wrong
    one is a 401 ``UNAUTHENTICATED`` in Google's shape, which the CLI reports (without
    retrying) and exits non-zero, and the backend never sees the request."""
    backend = ScriptedBackend("scripted", default=Script(text=["The key", " was accepted."]))
    runs: dict[str, CliRun] = {}
    keys = {"api_keys": [GATEWAY_KEY]}
    with recorded_gateway(backend, MODEL, server=keys) as (server, recorder):
        for key in (GATEWAY_KEY, "not-the-key"):
            workdir = tmp_path / key / "work"
            workdir.mkdir(parents=True)
            runs[key] = run_gemini(
                gemini,
                tmp_path / key / "home",
                workdir,
                server.url,
                ["-p", "Say something"],
                _settings(),
                GEMINI_API_KEY=key,
            )
    accepted, refused = runs[GATEWAY_KEY], runs["not-the-key"]
    report = failure_report(accepted, refused, exchanges=_exchanges(recorder))

    assert accepted.returncode == 0, report
    assert accepted.stdout.strip() == "The key was accepted.", report
    assert refused.returncode != 0, report
    assert _exchanges(recorder) == [
        ("POST", STREAM_PATH, "alt=sse", 200),
        ("POST", STREAM_PATH, "alt=sse", 401),
    ], report
    first, second = recorder.exchanges
    assert first.headers["x-goog-api-key"] == GATEWAY_KEY, first.headers
    assert second.headers["x-goog-api-key"] == "not-the-key", second.headers
    error = json.loads(second.response)["error"]
    assert error["code"] == 401 and error["status"] == "UNAUTHENTICATED", error
    assert "UNAUTHENTICATED" in refused.stderr, report
    assert len(backend.requests) == 1, report


# -- the CLI's default model, auto: a router call first, then the routed turn ----------

ROUTER_MODEL = "gemini-3.5-flash-lite"  # 0.61.0's NumericalClassifierStrategy
ROUTER_FIELDS = ["complexity_reasoning", "complexity_score"]


class RouterBackend(ScriptedBackend):
    """Answers the CLI's routing request (the only one asking for a JSON schema) with
    the JSON it asks for, scoring the task as simple; every other request gets the
    default script's text."""

    def __init__(self) -> None:
        super().__init__("scripted", default=Script(text=["Routed", " and answered."]))

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        if request.response_format is not None and request.response_format.type == "json_schema":
            verdict = {"complexity_reasoning": "A greeting.", "complexity_score": 5}
            self.enqueue(Script(text=[json.dumps(verdict)]))
        async for event in super().chat(request):
            yield event


def test_the_default_auto_model_routes_through_the_gateway(gemini: Path, tmp_path: Path) -> None:
    """Without ``--model`` (the CLI's ``auto``) and with the ``gemini-*`` names routed
    to a backend, the CLI's router request (``:generateContent`` with a JSON schema) is
    answered with that JSON, and the turn goes to the model the CLI chose from it."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    backend = RouterBackend()
    routes = [{"name": "gemini-*", "backend": "scripted", "model": "scripted"}]
    with recorded_gateway(backend, MODEL, models=routes) as (server, recorder):
        run = run_gemini(
            gemini, tmp_path / "home", workdir, server.url, ["-p", "Say hi"], _settings(), None
        )
    report = failure_report(run, exchanges=_exchanges(recorder), received=backend.requests)

    assert run.returncode == 0, report
    assert run.stdout.strip() == "Routed and answered.", report
    exchanges = _exchanges(recorder)
    assert len(exchanges) == 2, report
    assert exchanges[0] == ("POST", f"/v1beta/models/{ROUTER_MODEL}:generateContent", "", 200)
    method, path, query, status = exchanges[1]
    chosen = path.removeprefix("/v1beta/models/").removesuffix(":streamGenerateContent")
    assert (method, query, status) == ("POST", "alt=sse", 200), report
    assert chosen.startswith("gemini-") and chosen != ROUTER_MODEL, report

    # The router request: JSON output with a schema, answered with that JSON.
    router_call = recorder.exchanges[0]
    config = router_call.body()["generationConfig"]
    assert isinstance(config, dict)
    assert config["responseMimeType"] == "application/json", config
    assert config["responseJsonSchema"]["required"] == ROUTER_FIELDS, config
    (candidate,) = json.loads(router_call.response)["candidates"]
    verdict = json.loads("".join(part["text"] for part in candidate["content"]["parts"]))
    assert sorted(verdict) == ROUTER_FIELDS, verdict

    # As the backend got them: the schema as the JSON-schema response format, then the
    # turn (no response format) under the backend's model name.
    first, second = backend.requests
    assert first.response_format is not None, report
    assert first.response_format.type == "json_schema", first.response_format
    assert first.response_format.schema is not None
    assert first.response_format.schema["required"] == ROUTER_FIELDS, first.response_format
    assert second.response_format is None and second.model == "scripted", report


# -- a gateway MCP tool, through mcpServers in settings.json ----------------------------

MCP_TOOL = f"mcp_gw_{GATEWAY_TOOL}"  # the CLI's name: mcp_<server in its settings>_<tool>


def test_calls_a_gateway_mcp_tool(gemini: Path, tmp_path: Path) -> None:
    """Gemini CLI with the gateway's ``/mcp`` in ``settings.json`` (``mcpServers.gw``:
    ``httpUrl`` and ``headers``; keys on, one database key as ``GEMINI_API_KEY`` and
    the MCP bearer) calls ``files__read_text_file`` on server-filesystem when the model
    asks for ``mcp_gw_files__read_text_file`` (``--approval-mode yolo`` approves it)."""
    workdir = tmp_path / "work"
    workdir.mkdir()
    arguments = {"path": ""}  # set once the note's path is known
    backend = McpToolBackend(MCP_TOOL, arguments)
    with mcp_gateway(backend, MODEL, "scripted", tmp_path) as served:
        arguments["path"] = str(served.note)
        gw = {"httpUrl": served.mcp_url, "headers": served.bearer()}
        args = ["--approval-mode", "yolo", "--output-format", "json", "-p", "Read the note"]
        run = run_gemini(
            gemini,
            tmp_path / "home",
            workdir,
            served.server.url,
            args,
            _settings(mcpServers={"gw": gw}),
            GEMINI_API_KEY=served.key,
        )
    report = failure_report(run, exchanges=served.exchange_lines(), received=backend.requests)

    assert run.returncode == 0, report
    printed = json.loads(run.stdout)
    assert printed["response"] == MCP_FINAL_TEXT, report
    assert all(e.status is not None and e.status < 400 for e in served.recorder.exchanges), report
    check_the_tool_ran(served, backend.requests, MCP_TOOL, report)
    assert printed["stats"]["tools"]["byName"][MCP_TOOL]["success"] == 1, printed["stats"]

    # On the wire: the tool declared under the CLI's name, called, its result sent back.
    first, second = served.recorder.calls(STREAM_PATH)
    tools = first.body()["tools"]
    assert isinstance(tools, list)
    assert MCP_TOOL in [d["name"] for tool in tools for d in tool["functionDeclarations"]]
    (result_role, sent_result), *more = _parts_of(second.body(), "functionResponse")
    assert not more and result_role == "user" and sent_result["name"] == MCP_TOOL, sent_result
    assert MCP_MARKER in json.dumps(sent_result["response"]), sent_result


# -- the pass-through path: a Gemini backend relays the CLI's requests -----------------


def test_runs_the_shell_command_on_the_pass_through_path(gemini: Path, tmp_path: Path) -> None:
    """Gemini CLI in front of a gateway whose backend speaks Gemini's generateContent
    (another gateway, serving the scripted tool loop): the first request is relayed as
    bytes (docs/PASSTHROUGH.md), the one with the call's result translated, and the
    shell round trip works across both."""
    home = tmp_path / "home"
    workdir = tmp_path / "work"
    workdir.mkdir()
    backend = ToolLoopBackend(SHELL_TOOL, {"command": COMMAND}, ["The command", " wrote out.txt."])
    with (
        recorded_gateway(backend, MODEL) as (inner, _),
        relaying_gateway(inner.url, "gemini") as (front, recorder),
    ):
        run = run_gemini(
            gemini,
            home,
            workdir,
            front.url,
            ["--approval-mode", "yolo", "--output-format", "json", "-p", "Run the marker command"],
            _settings(),
        )
    report = failure_report(run, exchanges=_exchanges(recorder), received=backend.requests)
    assert run.returncode == 0, report
    assert json.loads(run.stdout)["response"] == FINAL_TEXT, report
    assert (workdir / "out.txt").read_text(encoding="utf-8") == MARKER + "\n", report
    # The first turn relays; the second carries the CLI's own call ids on its
    # functionCall and functionResponse, which Google refuses from anyone but itself and
    # only the translated path leaves out (docs/PASSTHROUGH.md): one conversation
    # across both paths.
    assert paths_served(recorder) == ["passthrough", "translated"], report
