"""The agent service's HTTP API under ``/agent/`` (docs/AGENT.md), JSON in and out.

The gateway mounts ``routes`` and puts a ``MountedAgent`` on ``app.state.agent``:
the runtime once its database is open (or why it could not be), and the request
limits. Nothing here imports the gateway: only ``core``, ``dialects``, ``web`` and
the agent's own modules.

Here: personas, sessions, a session's messages (a turn: ``POST .../messages``,
streamed as Server-Sent Events when asked), pins and summaries, facts (listed, added,
corrected, deleted) and the long-range summary. ``routes`` also carries
``agent.document_routes``' documents; ``mounted_routes(config)`` adds the routes of
each domain ``agent.domains`` turns on (``DOMAIN_ROUTES``: eldercare's patients and
their caregivers, medications, vitals, appointments). The guard and the readers every
handler shares are in ``agent.route_plumbing``.

A session's subject is ``subject_id``, also read and written as ``patient_id``
(``agent.api.subject_fields``): existing clients keep working, and one body naming two
different subjects is a 400.

Ownership (``agent.store.access``): with API keys on, the key a request matched
(``auth.caller_identity``) owns what it creates. Sessions are private: another
key's session answers 404, exactly like one that does not exist, so its existence
never leaks. Personas, documents and patients (a domain's records) created without a
key are shared: visible to every key, writable only with auth off or through the CLI
(403).

Errors are OpenAI-shaped, ``{"error": {"message", "type", "param", "code"}}``: 400
for bad input (naming the field), 403, 404, 409 (an id in use), 413 (body over the
limit, or a document over ``agent.max_document_bytes``), 503 when a backend or the
agent's database is down. Input is checked here before any handler runs: a path or
query parameter holding U+0000, an integer path id beyond 64 bits, or a query
integer that is not plain ASCII digits (``"²"`` passes ``str.isdigit``) is a 400
naming the parameter; bodies are checked by ``agent.api.parse``. Nothing is
classified here: the store, the documents and the service raise ``core.errors``
already (``store/errors.py`` maps the database's failures, once), and
``web.render`` renders them; anything else is a bug, logged there and answered as a
500. In a stream, a failure after the first event is an ``event: error``; the
partial answer is stored marked ``incomplete``, as it is when the client
disconnects (which stops generation).

Requests that call a model (a turn, an on-demand summary) pass ``MountedAgent.gate``
first (``agent.gate``; the gateway's counts them against the caller's key and in the
usage ledger, ``gateway/exchange/agent_gate.py``): the model is known, the session checked,
and nothing stored before it, so a refusal (403, 429 with ``Retry-After`` and
``x-ratelimit-*``) is a plain HTTP error, never an SSE event, and leaves nothing
behind. The pass is finished however the request ends: the reply (200), an error
(its status), a client gone (499).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.agent.api import (
    FactIn,
    MessageIn,
    PersonaIn,
    PersonaPatch,
    PinIn,
    SessionIn,
    SessionPatch,
    SummaryIn,
    fact_view,
    long_summary_view,
    message_view,
    parse,
    persona_view,
    pin_view,
    reply_view,
    session_view,
    subject_fields,
    summary_view,
    usage_view,
)
from llmbridge.agent.config import AgentConfig, DomainName
from llmbridge.agent.document_routes import document_routes
from llmbridge.agent.domains.eldercare.routes import eldercare_routes
from llmbridge.agent.gate import ModelPass
from llmbridge.agent.mcp_tools import TurnCaller
from llmbridge.agent.route_plumbing import (
    MAX_PAGE,
    MountedAgent,
    int_query,
    json_response,
    mounted_agent,
    opt_int_query,
    page_of,
    read_body,
    route,
    runtime_of,
)
from llmbridge.agent.runtime import AgentRuntime
from llmbridge.agent.service import (
    AgentDelta,
    AgentDone,
    AgentEvent,
    AgentRequest,
    AgentStart,
    AgentToolCall,
    AgentToolResult,
)
from llmbridge.core.errors import (
    InvalidRequestError,
    NotFoundError,
)
from llmbridge.dialects.framing import sse_event
from llmbridge.dialects.openai.errors import error_type
from llmbridge.web.render import to_bridge_error
from llmbridge.web.streaming import ClientDisconnected, StreamingBody, run_until_disconnect

__all__ = ["DOMAIN_ROUTES", "MountedAgent", "mounted_routes", "routes"]

# -- personas -------------------------------------------------------------------------


async def create_persona(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(PersonaIn, await read_body(request))
    persona = await runtime.service.create_persona(
        name=body.name,
        prompt=body.prompt,
        settings=body.settings,
        persona_id=body.id,
        owner=owner,
    )
    return json_response(persona_view(persona), 201)


async def list_personas(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    personas = await runtime.service.personas(owner=owner)
    return json_response({"personas": [persona_view(p) for p in personas]})


async def get_persona(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    persona = await runtime.service.get_persona(request.path_params["persona_id"], owner=owner)
    return json_response(persona_view(persona))


async def update_persona(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(PersonaPatch, await read_body(request))
    persona = await runtime.service.update_persona(
        request.path_params["persona_id"],
        owner=owner,
        name=body.name,
        prompt=body.prompt,
        settings=body.settings,
    )
    return json_response(persona_view(persona))


async def delete_persona(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    await runtime.service.delete_persona(request.path_params["persona_id"], owner=owner)
    return Response(status_code=204)


# -- sessions -------------------------------------------------------------------------


async def create_session(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(SessionIn, await read_body(request))
    subject = subject_fields(body).get("subject_id")
    session = await runtime.service.create_session(
        name=body.title, persona_id=body.persona_id, subject_id=subject, owner=owner
    )
    return json_response(session_view(session), 201)


async def list_sessions(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    limit, offset = page_of(request)
    sessions = await runtime.service.list_sessions(limit, offset, owner=owner)
    return json_response({"sessions": [session_view(s) for s in sessions]})


async def get_session(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    return json_response(session_view(session))


async def update_session(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    raw = await read_body(request)
    body = parse(SessionPatch, raw)
    named = {"title": "name", "persona_id": "persona_id"}
    fields = {named[k]: getattr(body, k) for k in raw if k in named}
    fields.update(subject_fields(body))
    if fields.get("name", "") is None:
        raise InvalidRequestError("title: must be a string", param="title")
    session = await runtime.service.update_session(
        request.path_params["session_id"], owner=owner, **fields
    )
    return json_response(session_view(session))


async def delete_session(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    await runtime.service.delete_session(request.path_params["session_id"], owner=owner)
    return Response(status_code=204)


# -- messages: a turn -----------------------------------------------------------------


async def list_messages(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    session_id = request.path_params["session_id"]
    limit = int_query(request, "limit", 100)
    after = opt_int_query(request, "after")
    messages = await runtime.service.messages(session_id, owner=owner, after_id=after, limit=limit)
    return json_response({"messages": [message_view(m) for m in messages]})


async def _admitted(
    request: Request, model: str, endpoint: str, *, streamed: bool, prompt: str
) -> ModelPass:
    """The gate's pass for a request that calls ``model`` (module docstring)."""
    gate = mounted_agent(request).gate
    return await gate.admit(request, model, endpoint=endpoint, streamed=streamed, prompt=prompt)


async def _finished(model_pass: ModelPass, error: BaseException) -> None:
    """Finish ``model_pass`` for a request that ended with ``error``."""
    if isinstance(error, Exception) and not isinstance(error, ClientDisconnected):
        await model_pass.finish(to_bridge_error(error).status_code)
    else:  # the client left (a cancelled request too: nobody is there to answer)
        await model_pass.finish(499)


async def post_message(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(MessageIn, await read_body(request))
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    runtime.service.offered_tools(body.tools)  # an unknown tool is a 400 before admission
    turn = AgentRequest(
        input=body.input,
        model=await runtime.model_for(body.model),
        session_id=session.id,
        settings=body.settings,
        system_prompt=body.system_prompt,
        document_ids=tuple(body.document_ids) if body.document_ids is not None else None,
        tools=body.tools,
        history_budget=body.history_budget,
        owner=owner,
        # The turn's MCP tool calls are made with this request's key (agent/mcp_tools.py).
        caller=TurnCaller(request.scope, _SESSION + "/messages"),
    )
    # Admitted last before the turn runs: a refusal stores nothing (module docstring).
    model_pass = await _admitted(
        request, turn.model, _SESSION + "/messages", streamed=body.stream, prompt=body.input
    )
    if not body.stream:
        try:
            # A client that leaves cancels the turn; its partial answer is stored.
            work = runtime.service.run_agent(turn, meter=model_pass)
            reply = await run_until_disconnect(request.receive, work)
        except BaseException as exc:
            await _finished(model_pass, exc)
            raise
        await model_pass.finish(200)
        return json_response(reply_view(reply), headers=model_pass.headers())
    return await _stream(request, runtime, turn, model_pass)


async def _stream(
    request: Request, runtime: AgentRuntime, turn: AgentRequest, model_pass: ModelPass
) -> Response:
    """The turn as Server-Sent Events. Everything up to the first output (the model,
    persona and session checks, storing the question, the backend's first event) is
    awaited before answering, so those failures are still HTTP errors (a backend
    that is down: 503). ``model_pass`` is finished when the stream closes: 200, the
    status of an error event, or 499 for a client that left."""
    events = runtime.service.run_agent_stream(turn, meter=model_pass)

    async def opening() -> list[AgentEvent]:
        head: list[AgentEvent] = []
        async for event in events:
            head.append(event)
            if not isinstance(event, AgentStart):
                break
        return head

    try:
        head = await run_until_disconnect(request.receive, opening())
    except BaseException as exc:
        await events.aclose()
        await _finished(model_pass, exc)
        raise
    status = 200

    async def body() -> AsyncIterator[bytes]:
        nonlocal status
        try:
            for event in head:
                yield _sse(event)
            async for event in events:
                yield _sse(event)
        except Exception as exc:  # noqa: BLE001 - the stream's own error event
            error = to_bridge_error(exc)
            status = error.status_code
            yield sse_event(
                {
                    "error": {
                        "message": error.message,
                        "type": error_type(error.status_code),
                        "code": error.code,
                        "status": error.status_code,
                    }
                },
                "error",
            )
        finally:
            await events.aclose()

    async def on_close(disconnected: bool) -> None:
        await model_pass.finish(499 if disconnected else status)

    return StreamingBody(
        body(),
        media_type="text/event-stream",
        headers={"cache-control": "no-cache", "x-accel-buffering": "no", **model_pass.headers()},
        on_close=on_close,
    )


def _sse(event: AgentEvent) -> bytes:
    if isinstance(event, AgentDelta):
        return sse_event({"text": event.text}, "delta")
    if isinstance(event, AgentStart):
        data = {"session_id": event.session_id, "user_message_id": event.user_message_id}
        return sse_event(data, "start")
    if isinstance(event, AgentToolCall):
        call = {"id": event.id, "name": event.name, "arguments": event.arguments}
        return sse_event({**call, "round": event.round}, "tool_call")
    if isinstance(event, AgentToolResult):
        result: dict[str, Any] = {"id": event.id, "name": event.name, "content": event.content}
        result.update(is_error=event.is_error, round=event.round)
        return sse_event(result, "tool_result")
    assert isinstance(event, AgentDone)
    usage = usage_view(event.usage)
    done = {
        "session_id": event.session_id,
        "message_id": event.message_id,
        "reply": event.text,
        "token_usage": event.total_tokens,
        "usage": usage,
        "rounds": event.rounds,
    }
    return sse_event(done, "done")


# -- pins and summaries ---------------------------------------------------------------


async def create_pin(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(PinIn, await read_body(request))
    pin = await runtime.service.add_pin(
        request.path_params["session_id"], body.content, owner=owner, message_id=body.message_id
    )
    return json_response(pin_view(pin), 201)


async def list_pins(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    limit = int_query(request, "limit", MAX_PAGE)
    pins = await runtime.service.pins(request.path_params["session_id"], owner=owner, limit=limit)
    return json_response({"pins": [pin_view(p) for p in pins]})


async def delete_pin(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    params = request.path_params
    await runtime.service.delete_pin(params["session_id"], params["pin_id"], owner=owner)
    return Response(status_code=204)


# -- facts and long-range memory ---------------------------------------------------------


async def list_facts(request: Request) -> Response:
    """The facts in the session's context: its own, and its subject's from other
    sessions, oldest first."""
    runtime, owner = runtime_of(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    limit = int_query(request, "limit", MAX_PAGE)
    facts = await runtime.store.memory.facts(session.id, limit, subject_id=session.subject_id)
    return json_response({"facts": [fact_view(f) for f in facts]})


async def create_fact(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    body = parse(FactIn, await read_body(request))
    fact = await runtime.store.memory.add_fact(
        session.id, body.content, source="user", subject_id=session.subject_id
    )
    return json_response(fact_view(fact), 201)


async def update_fact(request: Request) -> Response:
    """Correct a fact: it becomes the user's (``source: user``)."""
    runtime, owner = runtime_of(request)
    params = request.path_params
    session = await runtime.service.get_session(params["session_id"], owner=owner)
    body = parse(FactIn, await read_body(request))
    fact = await runtime.store.memory.update_fact(session.id, params["fact_id"], body.content)
    if fact is None:
        raise NotFoundError(f"no fact {params['fact_id']} in session {session.id!r}")
    return json_response(fact_view(fact))


async def delete_fact(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    params = request.path_params
    session = await runtime.service.get_session(params["session_id"], owner=owner)
    if not await runtime.store.memory.delete_fact(session.id, params["fact_id"]):
        raise NotFoundError(f"no fact {params['fact_id']} in session {session.id!r}")
    return Response(status_code=204)


async def get_long_summary(request: Request) -> Response:
    """The session's long-range summary in use (``null`` before the first compaction)."""
    runtime, owner = runtime_of(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    long = await runtime.store.memory.long_summary(session.id)
    return json_response({"long_summary": long_summary_view(long) if long is not None else None})


async def list_summaries(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    limit = int_query(request, "limit", 100)
    summaries = await runtime.service.summaries(
        request.path_params["session_id"], owner=owner, limit=limit
    )
    return json_response({"summaries": [summary_view(s) for s in summaries]})


async def create_summary(request: Request) -> Response:
    """Summarise the session's older messages now (the body, ``{"model"?}``, may be
    left out): 201 with ``{"summary": ...}``, or 200 with ``{"summary": null}`` when
    everything but the last exchange is summarised already."""
    runtime, owner = runtime_of(request)
    raw: Any = {}
    if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers:
        raw = await read_body(request)
    body = parse(SummaryIn, raw)
    session_id = request.path_params["session_id"]
    service = runtime.service
    model = await service.summary_model(
        session_id, owner=owner, model=body.model, default_model=runtime.model_for
    )
    model_pass = await _admitted(request, model, _SESSION + "/summaries", streamed=False, prompt="")
    try:
        summary = await service.summarise(session_id, owner=owner, model=model, meter=model_pass)
    except BaseException as exc:
        await _finished(model_pass, exc)
        raise
    status = 200 if summary is None else 201
    await model_pass.finish(status)
    if summary is None:
        return json_response({"summary": None}, headers=model_pass.headers())
    return json_response({"summary": summary_view(summary)}, status, headers=model_pass.headers())


_SESSION = "/agent/sessions/{session_id}"

routes = [
    route("/agent/personas", create_persona, "POST"),
    route("/agent/personas", list_personas, "GET"),
    route("/agent/personas/{persona_id}", get_persona, "GET"),
    route("/agent/personas/{persona_id}", update_persona, "PATCH"),
    route("/agent/personas/{persona_id}", delete_persona, "DELETE"),
    route("/agent/sessions", create_session, "POST"),
    route("/agent/sessions", list_sessions, "GET"),
    route(_SESSION, get_session, "GET"),
    route(_SESSION, update_session, "PATCH"),
    route(_SESSION, delete_session, "DELETE"),
    route(_SESSION + "/messages", post_message, "POST"),
    route(_SESSION + "/messages", list_messages, "GET"),
    route(_SESSION + "/pins", create_pin, "POST"),
    route(_SESSION + "/pins", list_pins, "GET"),
    route(_SESSION + "/pins/{pin_id:int}", delete_pin, "DELETE"),
    route(_SESSION + "/summaries", list_summaries, "GET"),
    route(_SESSION + "/summaries", create_summary, "POST"),
    route(_SESSION + "/facts", list_facts, "GET"),
    route(_SESSION + "/facts", create_fact, "POST"),
    route(_SESSION + "/facts/{fact_id:int}", update_fact, "PATCH"),
    route(_SESSION + "/facts/{fact_id:int}", delete_fact, "DELETE"),
    route(_SESSION + "/long-summary", get_long_summary, "GET"),
    *document_routes,
]
"""The agent API with no domain."""

DOMAIN_ROUTES: dict[DomainName, list[Route]] = {
    "eldercare": eldercare_routes,
}
"""Each domain's routes, by its configuration name. Beside ``routes`` rather than in
``agent.domains.registry``: the handlers read the runtime, which opens the registry's
domains, so the registry cannot hold them without an import circle."""


def mounted_routes(config: AgentConfig) -> list[Route]:
    """``routes`` and the routes of each domain ``config.domains`` turns on."""
    return [*routes, *(r for name in config.domains for r in DOMAIN_ROUTES[name])]
