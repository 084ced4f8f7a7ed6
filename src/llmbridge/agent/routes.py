"""The agent service's HTTP API under ``/agent/`` (docs/AGENT.md), JSON in and out.

The gateway mounts ``routes`` and puts a ``MountedAgent`` on ``app.state.agent``:
the runtime once its database is open (or why it could not be), and the request
limits. Nothing here imports the gateway: only ``core``, ``dialects``, ``web`` and
the agent's own modules.

Personas, sessions, a session's messages (a turn: ``POST .../messages``, streamed as
Server-Sent Events when asked), pins and summaries, facts (listed, added, corrected,
deleted) and the long-range summary (issue 29), documents, and the eldercare records
(patients and their caregivers, medications, vitals, appointments).

Ownership (``agent.store.access``): with API keys on, the key a request matched
(``auth.caller_identity``) owns what it creates. Sessions are private: another
key's session answers 404, exactly like one that does not exist, so its existence
never leaks. Personas, documents and patients created without a key are shared:
visible to every key, writable only with auth off or through the CLI (403).

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
usage ledger, ``gateway/agent_gate.py``): the model is known, the session checked,
and nothing stored before it, so a refusal (403, 429 with ``Retry-After`` and
``x-ratelimit-*``) is a plain HTTP error, never an SSE event, and leaves nothing
behind. The pass is finished however the request ends: the reply (200), an error
(its status), a client gone (499).
"""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any

from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from llmbridge.agent.api import (
    RECORD_BODIES,
    DocumentIn,
    DocumentPatch,
    FactIn,
    MessageIn,
    PatientIn,
    PersonaIn,
    PersonaPatch,
    PinIn,
    SessionIn,
    SessionPatch,
    SummaryIn,
    document_view,
    fact_view,
    hit_view,
    long_summary_view,
    message_view,
    parse,
    persona_view,
    pin_view,
    record_view,
    reply_view,
    session_view,
    summary_view,
    unstorable_field,
    usage_view,
)
from llmbridge.agent.eldercare import RECORD_KINDS
from llmbridge.agent.gate import OPEN_GATE, ModelGate, ModelPass
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
    LLMBridgeError,
    NotFoundError,
    ServiceUnavailableError,
)
from llmbridge.core.limits import RequestLimits
from llmbridge.dialects.framing import dumps, sse_event
from llmbridge.dialects.openai.errors import error_type
from llmbridge.store.values import MAX_ID
from llmbridge.web.auth import caller_identity
from llmbridge.web.bodies import read_json
from llmbridge.web.render import Dialect, error_response, new_request_id, to_bridge_error
from llmbridge.web.streaming import ClientDisconnected, StreamingBody, run_until_disconnect

__all__ = ["MountedAgent", "routes"]

Handler = Callable[[Request], Awaitable[Response]]

MAX_PAGE = 1000


# -- plumbing -------------------------------------------------------------------------


@dataclass(slots=True)
class MountedAgent:
    """What an app that mounts ``routes`` puts on ``app.state.agent``."""

    limits: RequestLimits
    """What one request may hold (the gateway's ``server.max_body_bytes`` and limits)."""
    runtime: AgentRuntime | None = None
    """The agent service, once its database is open (``None`` until then, or for good
    when it could not be opened)."""
    error: str | None = None
    """Why ``runtime`` is not there: the kind of failure only (its details, which may
    name the database server, are in the log)."""
    gate: ModelGate = OPEN_GATE
    """What a request that calls a model passes first (``agent.gate``): the gateway's
    keys, limits and usage ledger; by default nothing is counted."""


def _mounted(request: Request) -> MountedAgent:
    mounted: MountedAgent = request.app.state.agent
    return mounted


def _endpoint(handler: Handler) -> Handler:
    """``handler`` with every failure rendered as a JSON error (never a traceback)."""

    async def endpoint(request: Request) -> Response:
        try:
            _check_parameters(request)
            return await handler(request)
        except ClientDisconnected:
            return Response(status_code=499)
        except Exception as exc:  # noqa: BLE001 - every failure becomes a JSON error
            # A key's refusal carries Retry-After and x-ratelimit-* (agent.gate).
            refused = (
                _mounted(request).gate.refusal_headers(exc)
                if isinstance(exc, LLMBridgeError)
                else None
            )
            return error_response(Dialect.OPENAI, exc, new_request_id(), headers=refused or None)

    return endpoint


def _json(
    body: object, status_code: int = 200, *, headers: Mapping[str, str] | None = None
) -> Response:
    return Response(
        dumps(body), status_code=status_code, media_type="application/json", headers=headers
    )


def _runtime(request: Request) -> tuple[AgentRuntime, str | None]:
    """The agent service and the caller's identity (the owner of what it creates)."""
    mounted = _mounted(request)
    if mounted.runtime is None:
        reason = f" ({mounted.error}; see the gateway log)" if mounted.error else ""
        raise ServiceUnavailableError(
            f"the agent service is unavailable: its database could not be opened{reason}"
        )
    return mounted.runtime, caller_identity(request)


async def _body(request: Request) -> Any:
    return await read_json(request, _mounted(request).limits)


def _check_parameters(request: Request) -> None:
    """A 400 naming the path or query parameter the store could not take: U+0000 in
    any of them (PostgreSQL's text cannot hold it), or an id beyond 64 bits."""
    for name, value in request.path_params.items():
        if isinstance(value, int) and value > MAX_ID:
            raise InvalidRequestError(f"{name}: must be at most {MAX_ID}", param=name)
    for name, value in [*request.path_params.items(), *request.query_params.multi_items()]:
        found = unstorable_field(value, name) if isinstance(value, str) else None
        if found is not None:
            raise InvalidRequestError(f"{name}: {found[1]}", param=name)


_DIGITS = re.compile(r"[0-9]{1,19}")
"""An integer query parameter: ASCII digits only (``str.isdigit`` also takes ``"²"``,
which ``int`` refuses), and no more than 19 of them (``MAX_ID`` has 19)."""


def _int_query(request: Request, name: str, default: int, high: int = MAX_PAGE) -> int:
    raw = request.query_params.get(name)
    if raw is None:
        return default
    if not _DIGITS.fullmatch(raw) or int(raw) > high:
        raise InvalidRequestError(f"{name}: must be an integer from 0 to {high}", param=name)
    return int(raw)


def _opt_int_query(request: Request, name: str) -> int | None:
    if request.query_params.get(name) is None:
        return None
    return _int_query(request, name, 0, high=MAX_ID)


def _page(request: Request) -> tuple[int, int]:
    return _int_query(request, "limit", 100), _int_query(request, "offset", 0, high=2**31)


def _patch(body: Any, model: type[Any], current: dict[str, Any]) -> dict[str, Any]:
    """The fields a PATCH sets, validated as ``model`` over the stored ones."""
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    editable = {k: v for k, v in current.items() if k in model.model_fields}
    merged = parse(model, {**editable, **body})
    return {name: getattr(merged, name) for name in body}


# -- personas -------------------------------------------------------------------------


async def create_persona(request: Request) -> Response:
    runtime, owner = _runtime(request)
    body = parse(PersonaIn, await _body(request))
    persona = await runtime.service.create_persona(
        name=body.name,
        prompt=body.prompt,
        settings=body.settings,
        persona_id=body.id,
        owner=owner,
    )
    return _json(persona_view(persona), 201)


async def list_personas(request: Request) -> Response:
    runtime, owner = _runtime(request)
    personas = await runtime.service.personas(owner=owner)
    return _json({"personas": [persona_view(p) for p in personas]})


async def get_persona(request: Request) -> Response:
    runtime, owner = _runtime(request)
    persona = await runtime.service.get_persona(request.path_params["persona_id"], owner=owner)
    return _json(persona_view(persona))


async def update_persona(request: Request) -> Response:
    runtime, owner = _runtime(request)
    body = parse(PersonaPatch, await _body(request))
    persona = await runtime.service.update_persona(
        request.path_params["persona_id"],
        owner=owner,
        name=body.name,
        prompt=body.prompt,
        settings=body.settings,
    )
    return _json(persona_view(persona))


async def delete_persona(request: Request) -> Response:
    runtime, owner = _runtime(request)
    await runtime.service.delete_persona(request.path_params["persona_id"], owner=owner)
    return Response(status_code=204)


# -- sessions -------------------------------------------------------------------------


async def create_session(request: Request) -> Response:
    runtime, owner = _runtime(request)
    body = parse(SessionIn, await _body(request))
    session = await runtime.service.create_session(
        name=body.title, persona_id=body.persona_id, patient_id=body.patient_id, owner=owner
    )
    return _json(session_view(session), 201)


async def list_sessions(request: Request) -> Response:
    runtime, owner = _runtime(request)
    limit, offset = _page(request)
    sessions = await runtime.service.list_sessions(limit, offset, owner=owner)
    return _json({"sessions": [session_view(s) for s in sessions]})


async def get_session(request: Request) -> Response:
    runtime, owner = _runtime(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    return _json(session_view(session))


async def update_session(request: Request) -> Response:
    runtime, owner = _runtime(request)
    raw = await _body(request)
    body = parse(SessionPatch, raw)
    fields = {("name" if k == "title" else k): getattr(body, k) for k in raw}
    if fields.get("name", "") is None:
        raise InvalidRequestError("title: must be a string", param="title")
    session = await runtime.service.update_session(
        request.path_params["session_id"], owner=owner, **fields
    )
    return _json(session_view(session))


async def delete_session(request: Request) -> Response:
    runtime, owner = _runtime(request)
    await runtime.service.delete_session(request.path_params["session_id"], owner=owner)
    return Response(status_code=204)


# -- messages: a turn -----------------------------------------------------------------


async def list_messages(request: Request) -> Response:
    runtime, owner = _runtime(request)
    session_id = request.path_params["session_id"]
    limit = _int_query(request, "limit", 100)
    after = _opt_int_query(request, "after")
    messages = await runtime.service.messages(session_id, owner=owner, after_id=after, limit=limit)
    return _json({"messages": [message_view(m) for m in messages]})


async def _admitted(
    request: Request, model: str, endpoint: str, *, streamed: bool, prompt: str
) -> ModelPass:
    """The gate's pass for a request that calls ``model`` (module docstring)."""
    gate = _mounted(request).gate
    return await gate.admit(request, model, endpoint=endpoint, streamed=streamed, prompt=prompt)


async def _finished(model_pass: ModelPass, error: BaseException) -> None:
    """Finish ``model_pass`` for a request that ended with ``error``."""
    if isinstance(error, Exception) and not isinstance(error, ClientDisconnected):
        await model_pass.finish(to_bridge_error(error).status_code)
    else:  # the client left (a cancelled request too: nobody is there to answer)
        await model_pass.finish(499)


async def post_message(request: Request) -> Response:
    runtime, owner = _runtime(request)
    body = parse(MessageIn, await _body(request))
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
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
        return _json(reply_view(reply), headers=model_pass.headers())
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
    runtime, owner = _runtime(request)
    body = parse(PinIn, await _body(request))
    pin = await runtime.service.add_pin(
        request.path_params["session_id"], body.content, owner=owner, message_id=body.message_id
    )
    return _json(pin_view(pin), 201)


async def list_pins(request: Request) -> Response:
    runtime, owner = _runtime(request)
    limit = _int_query(request, "limit", MAX_PAGE)
    pins = await runtime.service.pins(request.path_params["session_id"], owner=owner, limit=limit)
    return _json({"pins": [pin_view(p) for p in pins]})


async def delete_pin(request: Request) -> Response:
    runtime, owner = _runtime(request)
    params = request.path_params
    await runtime.service.delete_pin(params["session_id"], params["pin_id"], owner=owner)
    return Response(status_code=204)


# -- facts and long-range memory (issue 29) ---------------------------------------------


async def list_facts(request: Request) -> Response:
    """The facts in the session's context: its own, and its patient's from other
    sessions, oldest first."""
    runtime, owner = _runtime(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    limit = _int_query(request, "limit", MAX_PAGE)
    facts = await runtime.store.memory.facts(session.id, limit, patient_id=session.patient_id)
    return _json({"facts": [fact_view(f) for f in facts]})


async def create_fact(request: Request) -> Response:
    runtime, owner = _runtime(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    body = parse(FactIn, await _body(request))
    fact = await runtime.store.memory.add_fact(
        session.id, body.content, source="user", patient_id=session.patient_id
    )
    return _json(fact_view(fact), 201)


async def update_fact(request: Request) -> Response:
    """Correct a fact: it becomes the user's (``source: user``)."""
    runtime, owner = _runtime(request)
    params = request.path_params
    session = await runtime.service.get_session(params["session_id"], owner=owner)
    body = parse(FactIn, await _body(request))
    fact = await runtime.store.memory.update_fact(session.id, params["fact_id"], body.content)
    if fact is None:
        raise NotFoundError(f"no fact {params['fact_id']} in session {session.id!r}")
    return _json(fact_view(fact))


async def delete_fact(request: Request) -> Response:
    runtime, owner = _runtime(request)
    params = request.path_params
    session = await runtime.service.get_session(params["session_id"], owner=owner)
    if not await runtime.store.memory.delete_fact(session.id, params["fact_id"]):
        raise NotFoundError(f"no fact {params['fact_id']} in session {session.id!r}")
    return Response(status_code=204)


async def get_long_summary(request: Request) -> Response:
    """The session's long-range summary in use (``null`` before the first compaction)."""
    runtime, owner = _runtime(request)
    session = await runtime.service.get_session(request.path_params["session_id"], owner=owner)
    long = await runtime.store.memory.long_summary(session.id)
    return _json({"long_summary": long_summary_view(long) if long is not None else None})


async def list_summaries(request: Request) -> Response:
    runtime, owner = _runtime(request)
    limit = _int_query(request, "limit", 100)
    summaries = await runtime.service.summaries(
        request.path_params["session_id"], owner=owner, limit=limit
    )
    return _json({"summaries": [summary_view(s) for s in summaries]})


async def create_summary(request: Request) -> Response:
    """Summarise the session's older messages now (the body, ``{"model"?}``, may be
    left out): 201 with ``{"summary": ...}``, or 200 with ``{"summary": null}`` when
    everything but the last exchange is summarised already."""
    runtime, owner = _runtime(request)
    raw: Any = {}
    if request.headers.get("content-length", "0") != "0" or "transfer-encoding" in request.headers:
        raw = await _body(request)
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
        return _json({"summary": None}, headers=model_pass.headers())
    return _json({"summary": summary_view(summary)}, status, headers=model_pass.headers())


# -- documents ------------------------------------------------------------------------


async def create_document(request: Request) -> Response:
    runtime, owner = _runtime(request)
    body = parse(DocumentIn, await _body(request))
    documents = runtime.documents
    document_id = await documents.add(body.title, body.content, source=body.source, owner=owner)
    return _json(document_view(await documents.get(document_id, owner=owner)), 201)


async def list_documents(request: Request) -> Response:
    runtime, owner = _runtime(request)
    limit, offset = _page(request)
    found = await runtime.documents.documents(owner=owner, limit=limit, offset=offset)
    return _json({"documents": [document_view(d) for d in found]})


async def search_documents(request: Request) -> Response:
    runtime, owner = _runtime(request)
    query = request.query_params.get("q", "")
    if not query.strip():
        raise InvalidRequestError("q: a search query is required", param="q")
    limit = _int_query(request, "limit", 5, high=100)
    hits = await runtime.documents.search(query, limit=limit, owner=owner)
    return _json({"hits": [hit_view(h) for h in hits]})


async def get_document(request: Request) -> Response:
    runtime, owner = _runtime(request)
    found = await runtime.documents.get(request.path_params["document_id"], owner=owner)
    return _json(document_view(found))


async def update_document(request: Request) -> Response:
    runtime, owner = _runtime(request)
    body = parse(DocumentPatch, await _body(request))
    updated = await runtime.documents.update(
        request.path_params["document_id"],
        owner=owner,
        title=body.title,
        content=body.content,
        source=body.source,
    )
    return _json(document_view(updated))


async def delete_document(request: Request) -> Response:
    runtime, owner = _runtime(request)
    document_id = request.path_params["document_id"]
    if not await runtime.documents.delete(document_id, owner=owner):
        raise NotFoundError(f"no document {document_id}")
    return Response(status_code=204)


# -- eldercare ------------------------------------------------------------------------


async def create_patient(request: Request) -> Response:
    runtime, owner = _runtime(request)
    body = parse(PatientIn, await _body(request))
    created = await runtime.eldercare.create_patient(body.model_dump(), owner=owner)
    return _json(record_view(created), 201)


async def list_patients(request: Request) -> Response:
    runtime, owner = _runtime(request)
    limit, offset = _page(request)
    found = await runtime.eldercare.patients(owner=owner, limit=limit, offset=offset)
    return _json({"patients": [record_view(p) for p in found]})


async def get_patient(request: Request) -> Response:
    runtime, owner = _runtime(request)
    found = await runtime.eldercare.get_patient(request.path_params["patient_id"], owner=owner)
    return _json(record_view(found))


async def update_patient(request: Request) -> Response:
    runtime, owner = _runtime(request)
    patient_id = request.path_params["patient_id"]
    raw = await _body(request)
    current = await runtime.eldercare.get_patient(patient_id, owner=owner)
    fields = _patch(raw, PatientIn, current)
    updated = await runtime.eldercare.update_patient(patient_id, fields, owner=owner)
    return _json(record_view(updated))


async def delete_patient(request: Request) -> Response:
    runtime, owner = _runtime(request)
    await runtime.eldercare.delete_patient(request.path_params["patient_id"], owner=owner)
    return Response(status_code=204)


def _kind(request: Request) -> str:
    kind: str = request.path_params["kind"]
    if kind not in RECORD_KINDS:
        raise NotFoundError(f"no route for {request.method} {request.url.path}")
    return kind


async def create_record(request: Request) -> Response:
    runtime, owner = _runtime(request)
    kind = _kind(request)
    body = parse(RECORD_BODIES[kind], await _body(request))
    created = await runtime.eldercare.create_record(
        kind, request.path_params["patient_id"], body.model_dump(), owner=owner
    )
    return _json(record_view(created), 201)


async def list_records(request: Request) -> Response:
    runtime, owner = _runtime(request)
    kind = _kind(request)
    limit, offset = _page(request)
    found = await runtime.eldercare.records(
        kind, request.path_params["patient_id"], owner=owner, limit=limit, offset=offset
    )
    return _json({kind: [record_view(r) for r in found]})


async def get_record(request: Request) -> Response:
    runtime, owner = _runtime(request)
    kind = _kind(request)
    params = request.path_params
    found = await runtime.eldercare.get_record(
        kind, params["patient_id"], params["record_id"], owner=owner
    )
    return _json(record_view(found))


async def update_record(request: Request) -> Response:
    runtime, owner = _runtime(request)
    kind = _kind(request)
    params = request.path_params
    raw = await _body(request)
    current = await runtime.eldercare.get_record(
        kind, params["patient_id"], params["record_id"], owner=owner
    )
    fields = _patch(raw, RECORD_BODIES[kind], current)
    updated = await runtime.eldercare.update_record(
        kind, params["patient_id"], params["record_id"], fields, owner=owner
    )
    return _json(record_view(updated))


async def delete_record(request: Request) -> Response:
    runtime, owner = _runtime(request)
    kind = _kind(request)
    params = request.path_params
    await runtime.eldercare.delete_record(
        kind, params["patient_id"], params["record_id"], owner=owner
    )
    return Response(status_code=204)


def _route(path: str, handler: Handler, *methods: str) -> Route:
    return Route(path, _endpoint(handler), methods=list(methods), name=handler.__name__)


_SESSION = "/agent/sessions/{session_id}"
_PATIENT = "/agent/patients/{patient_id:int}"

routes = [
    _route("/agent/personas", create_persona, "POST"),
    _route("/agent/personas", list_personas, "GET"),
    _route("/agent/personas/{persona_id}", get_persona, "GET"),
    _route("/agent/personas/{persona_id}", update_persona, "PATCH"),
    _route("/agent/personas/{persona_id}", delete_persona, "DELETE"),
    _route("/agent/sessions", create_session, "POST"),
    _route("/agent/sessions", list_sessions, "GET"),
    _route(_SESSION, get_session, "GET"),
    _route(_SESSION, update_session, "PATCH"),
    _route(_SESSION, delete_session, "DELETE"),
    _route(_SESSION + "/messages", post_message, "POST"),
    _route(_SESSION + "/messages", list_messages, "GET"),
    _route(_SESSION + "/pins", create_pin, "POST"),
    _route(_SESSION + "/pins", list_pins, "GET"),
    _route(_SESSION + "/pins/{pin_id:int}", delete_pin, "DELETE"),
    _route(_SESSION + "/summaries", list_summaries, "GET"),
    _route(_SESSION + "/summaries", create_summary, "POST"),
    _route(_SESSION + "/facts", list_facts, "GET"),
    _route(_SESSION + "/facts", create_fact, "POST"),
    _route(_SESSION + "/facts/{fact_id:int}", update_fact, "PATCH"),
    _route(_SESSION + "/facts/{fact_id:int}", delete_fact, "DELETE"),
    _route(_SESSION + "/long-summary", get_long_summary, "GET"),
    _route("/agent/documents", create_document, "POST"),
    _route("/agent/documents", list_documents, "GET"),
    _route("/agent/documents/search", search_documents, "GET"),
    _route("/agent/documents/{document_id:int}", get_document, "GET"),
    _route("/agent/documents/{document_id:int}", update_document, "PATCH"),
    _route("/agent/documents/{document_id:int}", delete_document, "DELETE"),
    _route("/agent/patients", create_patient, "POST"),
    _route("/agent/patients", list_patients, "GET"),
    _route(_PATIENT, get_patient, "GET"),
    _route(_PATIENT, update_patient, "PATCH"),
    _route(_PATIENT, delete_patient, "DELETE"),
    _route(_PATIENT + "/{kind}", create_record, "POST"),
    _route(_PATIENT + "/{kind}", list_records, "GET"),
    _route(_PATIENT + "/{kind}/{record_id:int}", get_record, "GET"),
    _route(_PATIENT + "/{kind}/{record_id:int}", update_record, "PATCH"),
    _route(_PATIENT + "/{kind}/{record_id:int}", delete_record, "DELETE"),
]
