"""``llmbridge agent``: the agent service from the terminal, on its database.

``personas list|create``, ``sessions list|create``, ``facts list|add|edit|delete``
(a session's durable facts) and ``chat`` (an interactive
conversation on a session: streamed replies, ``/pin TEXT``, ``/quit``). They open the
same database as the gateway (``--db`` / ``LLMBRIDGE_DB`` / ``agent.database`` in
``--config``) directly, unscoped (the CLI sees every session and writes shared
personas), and ``chat`` generates through the configured backends exactly as the
gateway does (``agent.runtime``), so with no flags it talks to the embedded model.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import IO, TYPE_CHECKING, Any, TypeVar

import click

from llmbridge.cli.options import config_options, load_from_options

if TYPE_CHECKING:
    from llmbridge.agent.runtime import AgentRuntime
    from llmbridge.agent.store import AgentStore
    from llmbridge.gateway.config import GatewayConfig

__all__ = ["agent"]

T = TypeVar("T")

HELP_LINE = "Type a message; /pin TEXT keeps a fact in every context; /quit leaves."


@click.group()
def agent() -> None:
    """The agent service: personas, sessions and chat, on the agent database."""


@agent.group()
def personas() -> None:
    """List and create personas (a system prompt plus generation settings)."""


@agent.group()
def sessions() -> None:
    """List and create conversation sessions."""


def _run(work: Callable[[], Awaitable[T]]) -> T:
    """Run ``work``, turning the agent's own failures into CLI errors."""
    from llmbridge.core.errors import LLMBridgeError

    try:
        return asyncio.run(_as_coroutine(work))
    except LLMBridgeError as exc:  # the store's too (store/errors.py)
        raise click.ClickException(exc.message) from exc
    except ValueError as exc:
        raise click.ClickException(str(exc)) from exc


async def _as_coroutine(work: Callable[[], Awaitable[T]]) -> T:
    return await work()


@contextlib.asynccontextmanager
async def _store(config: GatewayConfig) -> AsyncIterator[AgentStore]:
    from llmbridge.agent.store import AgentStore

    store = await AgentStore.open(config.agent.database)
    try:
        yield store
    finally:
        await store.close()


def _print_json(value: Any) -> None:
    import orjson

    click.echo(orjson.dumps(value, option=orjson.OPT_INDENT_2).decode())


# -- personas -------------------------------------------------------------------------


@personas.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@config_options
def personas_list(as_json: bool, config_path: str | None, **shortcuts: Any) -> None:
    """List the personas."""
    from llmbridge.agent.api import persona_view

    config = load_from_options(config_path, **shortcuts)

    async def work() -> None:
        async with _store(config) as store:
            found = await store.list_personas()
        if as_json:
            _print_json([persona_view(p) for p in found])
            return
        click.echo(f"{'ID':<34} {'NAME':<24} SETTINGS")
        for p in found:
            settings = json.dumps(p.settings, separators=(",", ":")) if p.settings else "-"
            click.echo(f"{p.id:<34} {p.name:<24} {settings}")

    _run(work)


def _setting(raw: str) -> tuple[str, Any]:
    key, sep, value = raw.partition("=")
    if not sep or not key.strip():
        raise click.BadParameter(f"{raw!r} is not KEY=VALUE", param_hint="--set")
    try:
        parsed: Any = json.loads(value)
    except ValueError:
        parsed = value
    return key.strip(), parsed


@personas.command("create")
@click.argument("name")
@click.option("--prompt", default="", help="The persona's system prompt.")
@click.option("--id", "persona_id", help="Choose the id (default: a new one).")
@click.option(
    "--set",
    "settings",
    multiple=True,
    metavar="KEY=VALUE",
    help="A generation setting, e.g. temperature=0.7 or repeat_penalty=1.1 (repeatable).",
)
@config_options
def personas_create(
    name: str,
    prompt: str,
    persona_id: str | None,
    settings: tuple[str, ...],
    config_path: str | None,
    **shortcuts: Any,
) -> None:
    """Create a persona named NAME; prints its id."""
    from pydantic import ValidationError

    from llmbridge.agent.persona_settings import AgentSettings

    try:
        values = AgentSettings.model_validate(dict(_setting(s) for s in settings))
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(p) for p in error["loc"])
        raise click.BadParameter(f"{where}: {error['msg']}", param_hint="--set") from None
    config = load_from_options(config_path, **shortcuts)

    async def work() -> str:
        async with _store(config) as store:
            persona = await store.create_persona(
                persona_id, name=name, prompt=prompt, settings=values.set_values()
            )
        return persona.id

    click.echo(_run(work))


# -- sessions -------------------------------------------------------------------------


@sessions.command("list")
@click.option("--limit", type=click.IntRange(1, 10_000), default=50, show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@config_options
def sessions_list(as_json: bool, limit: int, config_path: str | None, **shortcuts: Any) -> None:
    """List sessions, newest first."""
    from llmbridge.agent.api import session_view

    config = load_from_options(config_path, **shortcuts)

    async def work() -> None:
        async with _store(config) as store:
            found = await store.list_sessions(limit)
        if as_json:
            _print_json([session_view(s) for s in found])
            return
        click.echo(f"{'ID':<34} {'UPDATED':<20} {'PERSONA':<20} TITLE")
        for s in found:
            updated = s.updated_at.strftime("%Y-%m-%d %H:%M:%S")
            click.echo(f"{s.id:<34} {updated:<20} {s.persona_id or '-':<20} {s.name}")

    _run(work)


@sessions.command("create")
@click.option("--persona", "persona_id", help="The persona's id.")
@click.option("--title", default="", help="The session's title.")
@config_options
def sessions_create(
    persona_id: str | None, title: str, config_path: str | None, **shortcuts: Any
) -> None:
    """Create a session; prints its id."""
    config = load_from_options(config_path, **shortcuts)

    async def work() -> str:
        async with _store(config) as store:
            if persona_id:
                await store.get_persona(persona_id)  # NotFoundError: "no persona ..."
            session = await store.create_session(name=title, persona_id=persona_id)
        return session.id

    click.echo(_run(work))


# -- facts ----------------------------------------------------------------------------


@agent.group()
def facts() -> None:
    """List, add, correct and delete a session's durable facts (kept in every context)."""


@facts.command("list")
@click.argument("session_id")
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
@config_options
def facts_list(session_id: str, as_json: bool, config_path: str | None, **shortcuts: Any) -> None:
    """List SESSION_ID's facts (its own and its subject's), oldest first."""
    from llmbridge.agent.api import fact_view

    config = load_from_options(config_path, **shortcuts)

    async def work() -> None:
        async with _store(config) as store:
            session = await store.get_session(session_id)
            found = await store.memory.facts(session.id, subject_id=session.subject_id)
        if as_json:
            _print_json([fact_view(f) for f in found])
            return
        click.echo(f"{'ID':<8} {'SOURCE':<10} FACT")
        for f in found:
            click.echo(f"{f.id:<8} {f.source:<10} {f.content}")

    _run(work)


@facts.command("add")
@click.argument("session_id")
@click.argument("text")
@config_options
def facts_add(session_id: str, text: str, config_path: str | None, **shortcuts: Any) -> None:
    """Add a fact to SESSION_ID; prints its id."""
    if not text.strip():
        raise click.BadParameter("must not be blank", param_hint="TEXT")
    config = load_from_options(config_path, **shortcuts)

    async def work() -> int:
        async with _store(config) as store:
            session = await store.get_session(session_id)
            fact = await store.memory.add_fact(
                session.id, text, source="user", subject_id=session.subject_id
            )
        return fact.id

    click.echo(_run(work))


@facts.command("edit")
@click.argument("session_id")
@click.argument("fact_id", type=int)
@click.argument("text")
@config_options
def facts_edit(
    session_id: str, fact_id: int, text: str, config_path: str | None, **shortcuts: Any
) -> None:
    """Correct fact FACT_ID of SESSION_ID to TEXT."""
    from llmbridge.core.errors import NotFoundError

    if not text.strip():
        raise click.BadParameter("must not be blank", param_hint="TEXT")
    config = load_from_options(config_path, **shortcuts)

    async def work() -> None:
        async with _store(config) as store:
            if await store.memory.update_fact(session_id, fact_id, text) is None:
                raise NotFoundError(f"no fact {fact_id} in session {session_id!r}")

    _run(work)
    click.echo("corrected.")


@facts.command("delete")
@click.argument("session_id")
@click.argument("fact_id", type=int)
@config_options
def facts_delete(session_id: str, fact_id: int, config_path: str | None, **shortcuts: Any) -> None:
    """Delete fact FACT_ID of SESSION_ID."""
    from llmbridge.core.errors import NotFoundError

    config = load_from_options(config_path, **shortcuts)

    async def work() -> None:
        async with _store(config) as store:
            if not await store.memory.delete_fact(session_id, fact_id):
                raise NotFoundError(f"no fact {fact_id} in session {session_id!r}")

    _run(work)
    click.echo("deleted.")


# -- chat -----------------------------------------------------------------------------


@agent.command()
@click.option("--session", "session_id", help="Continue this session (default: a new one).")
@click.option("--persona", "persona_id", help="The persona of a new session (or this turn on).")
@click.option("--title", default="", help="The title of a new session.")
@click.option("--model", help="The model to talk to (default: agent.model, else the backend's).")
@config_options
def chat(
    session_id: str | None,
    persona_id: str | None,
    title: str,
    model: str | None,
    config_path: str | None,
    **shortcuts: Any,
) -> None:
    """Talk with a persona on a session: replies stream as they are written, and the
    conversation (with its pins and summaries) is kept in the agent database."""
    config = load_from_options(config_path, **shortcuts)
    stdin = sys.stdin  # CliRunner (tests) swaps it for its input
    _run(lambda: _chat(config, stdin, session_id, persona_id, title, model))


async def _chat(
    config: GatewayConfig,
    stdin: IO[str],
    session_id: str | None,
    persona_id: str | None,
    title: str,
    model: str | None,
) -> None:
    from llmbridge.agent.runtime import AgentRuntime
    from llmbridge.serving.models import open_models

    async with open_models(config, host=config.server.serving_host()) as models:
        for name, exc in models.failed_to_start.items():
            click.echo(f"backend {name} failed to start: {exc.message}", err=True)
        runtime = await AgentRuntime.open(config.agent, models)
        try:
            await _converse(runtime, stdin, session_id, persona_id, title, model)
        finally:
            await runtime.aclose()


async def _converse(
    runtime: AgentRuntime,
    stdin: IO[str],
    session_id: str | None,
    persona_id: str | None,
    title: str,
    model: str | None,
) -> None:
    """The conversation loop: a line in, the reply streamed out, until /quit or EOF."""
    service = runtime.service
    if session_id:
        session = await service.get_session(session_id)
    else:
        session = await service.create_session(name=title, persona_id=persona_id)
    model_name = await runtime.model_for(model)
    persona = session.persona_id or persona_id or "-"
    click.echo(f"session {session.id}  model {model_name}  persona {persona}", err=True)
    click.echo(HELP_LINE, err=True)
    lines = _LineReader(stdin)
    while True:
        click.echo("you> ", nl=False)
        line = await lines.next()
        if line is None:
            click.echo()
            break
        text = line.strip()
        if not text:
            continue
        if text in ("/quit", "/exit"):
            break
        if text == "/pin" or text.startswith("/pin "):
            fact = text[4:].strip()
            if not fact:
                click.echo("usage: /pin TEXT", err=True)
                continue
            await service.add_pin(session.id, fact)
            click.echo("pinned.")
            continue
        if text.startswith("/"):
            click.echo(f"unknown command {text.split()[0]}. {HELP_LINE}", err=True)
            continue
        await _turn(runtime, session.id, persona_id, model_name, text)
        if not session.name:  # name an untitled session after its first message
            session = await service.update_session(session.id, name=text[:80])


async def _turn(
    runtime: AgentRuntime, session_id: str, persona_id: str | None, model: str, text: str
) -> None:
    """One turn, its reply printed as it streams. A failure is reported and the
    conversation goes on (the partial answer is stored, marked incomplete)."""
    from llmbridge.agent.service import AgentDelta, AgentDone, AgentRequest, AgentToolCall
    from llmbridge.core.errors import LLMBridgeError

    request = AgentRequest(text, model=model, session_id=session_id, persona_id=persona_id)
    click.echo("assistant> ", nl=False)
    try:
        async with contextlib.aclosing(runtime.service.run_agent_stream(request)) as events:
            async for event in events:
                if isinstance(event, AgentDelta):
                    click.echo(event.text, nl=False)
                elif isinstance(event, AgentToolCall):
                    arguments = json.dumps(event.arguments, ensure_ascii=False)
                    click.echo(f"[{event.name} {arguments}]", nl=False)
                elif isinstance(event, AgentDone):
                    click.echo()
                    click.echo(f"({event.total_tokens} tokens)", err=True)
    except LLMBridgeError as exc:
        click.echo()
        click.echo(f"error: {exc.message}", err=True)


class _LineReader:
    """Lines of ``stream`` read by a daemon thread, so the event loop (background
    summaries) runs while the user types, and Ctrl-C never waits for a line."""

    def __init__(self, stream: IO[str]) -> None:
        self._loop = asyncio.get_running_loop()
        self._queue: asyncio.Queue[str | None] = asyncio.Queue()
        self._wanted = threading.Semaphore(0)
        thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        thread.start()

    def _read(self, stream: IO[str]) -> None:
        while True:
            self._wanted.acquire()  # read a line only when one is asked for
            try:
                line: str | None = stream.readline() or None
            except (OSError, ValueError):
                line = None
            try:
                self._loop.call_soon_threadsafe(self._queue.put_nowait, line)
            except RuntimeError:  # the loop is closed: the chat has ended
                return
            if line is None:
                return

    async def next(self) -> str | None:
        """The next line, ``None`` at the end of the input."""
        self._wanted.release()
        return await self._queue.get()
