"""The JSON shapes of the agent's HTTP API (``agent/routes.py``).

Request bodies are pydantic models that refuse unknown fields and wrong types
(booleans must be JSON booleans; strings are never made from numbers);
``parse(model, body)`` turns a validation failure into a 400 ``InvalidRequestError``
naming the field. Values the databases cannot hold (``store.values``) are refused
here too, each naming its field, on SQLite and PostgreSQL alike: U+0000 in any
string (PostgreSQL's ``text`` cannot hold it), ids beyond ``MAX_ID`` (64 bits
signed), non-finite floats (``"nan"``, ``"inf"``: pydantic's lax mode reads them
from strings) and timestamps outside years 1-9999 once converted to UTC.

A session's subject (``subject_id``, what the conversation is about:
``agent.domains``) is also read and written as ``patient_id``, the eldercare name
clients used before the subject was generic: a body may send either (both, naming
different subjects, is a 400: ``subject_fields``), and sessions and facts show both.

Views turn the store's records into JSON-ready dicts (timestamps as ISO 8601
strings, by orjson). Owners never leave the server: a persona, document or a domain's
record (a patient) says only whether it is ``shared`` (created without an API key;
``record_view``).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Annotated, Any, TypeVar

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StringConstraints,
    ValidationError,
    field_validator,
)

from llmbridge.agent.documents import DocumentHit, DocumentRecord
from llmbridge.agent.persona_settings import AgentSettings
from llmbridge.agent.service import AgentReply
from llmbridge.agent.store import (
    FactRecord,
    LongSummaryRecord,
    PersonaRecord,
    PinRecord,
    SessionRecord,
    StoredMessage,
    SummaryRecord,
)
from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.response import Usage
from llmbridge.store.values import MAX_ID, as_utc, unstorable_text

__all__ = [
    "SUBJECT_ALIAS",
    "Body",
    "DocumentIn",
    "DocumentPatch",
    "FactIn",
    "MessageIn",
    "NameStr",
    "PersonaIn",
    "PersonaPatch",
    "PinIn",
    "RowId",
    "SessionIn",
    "SessionPatch",
    "ShortList",
    "SummaryIn",
    "UTCDatetime",
    "document_view",
    "fact_view",
    "hit_view",
    "long_summary_view",
    "message_view",
    "parse",
    "persona_view",
    "pin_view",
    "record_view",
    "reply_view",
    "session_view",
    "subject_fields",
    "summary_view",
    "unstorable_field",
]

M = TypeVar("M", bound=BaseModel)

NameStr = Annotated[str, StringConstraints(min_length=1, max_length=200)]
ShortStr = Annotated[str, StringConstraints(max_length=500)]
ShortList = Annotated[list[ShortStr], Field(max_length=100)]
RowId = Annotated[int, Field(ge=1, le=MAX_ID)]
"""A row id: what SQLite's INTEGER and PostgreSQL's BIGINT hold."""
_MAX_TOOLS = 64
"""The most tool names a turn may choose."""
UTCDatetime = Annotated[datetime, AfterValidator(as_utc)]
"""A timestamp, in UTC (naive means UTC) within years 1-9999."""


class Body(BaseModel):
    # No NaN or infinity in any float ("nan" and "inf" are read from strings).
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


def unstorable_field(value: Any, where: str = "") -> tuple[str, str] | None:
    """The first string in a decoded JSON value (keys included) the store cannot
    hold, as ``(field path, reason)``, or ``None``."""
    if isinstance(value, str):
        reason = unstorable_text(value)
        return (where, reason) if reason else None
    if isinstance(value, dict):
        for key, item in value.items():
            path = f"{where}.{key}" if where else str(key)
            found = unstorable_field(str(key), path) or unstorable_field(item, path)
            if found:
                return found
    elif isinstance(value, list):
        for number, item in enumerate(value):
            found = unstorable_field(item, f"{where}.{number}" if where else str(number))
            if found:
                return found
    return None


def parse(model: type[M], body: Any) -> M:
    """``body`` (decoded JSON) as ``model``, or a 400 naming the first bad field."""
    if not isinstance(body, dict):
        raise InvalidRequestError("request body must be a JSON object")
    found = unstorable_field(body)
    if found is not None:
        where, reason = found
        raise InvalidRequestError(f"{where}: {reason}", param=where)
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = ".".join(str(part) for part in error["loc"])
        message = error["msg"] if error["type"] != "extra_forbidden" else "unknown field"
        raise InvalidRequestError(f"{where or 'body'}: {message}", param=where or None) from None


# -- personas and sessions ----------------------------------------------------------


class PersonaIn(Body):
    name: NameStr
    prompt: str = Field("", max_length=100_000)
    """The persona's system prompt."""
    settings: AgentSettings | None = None
    """Generation settings (``AgentSettings``); only the ones set are stored."""
    id: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[A-Za-z0-9_.:-]+$")
    """A chosen id (a new one when absent); an id in use is a 409."""


class PersonaPatch(Body):
    name: str | None = Field(None, min_length=1, max_length=200)
    prompt: str | None = Field(None, max_length=100_000)
    settings: AgentSettings | None = None
    """Replaces the stored settings."""


SUBJECT_ALIAS = "patient_id"
"""``subject_id``'s other name in session bodies and views (module docstring)."""


class SessionIn(Body):
    persona_id: str | None = Field(None, min_length=1, max_length=64)
    title: str = Field("", max_length=200)
    subject_id: RowId | None = None
    """What the conversation is about: a patient's id with eldercare on (checked: 404
    for one the caller cannot see); any id with no domain that owns subjects."""
    patient_id: RowId | None = None
    """``subject_id`` by its eldercare name (``SUBJECT_ALIAS``)."""


class SessionPatch(Body):
    persona_id: str | None = Field(None, min_length=1, max_length=64)
    title: str | None = Field(None, max_length=200)
    subject_id: RowId | None = None
    """``null`` clears it."""
    patient_id: RowId | None = None
    """``subject_id`` by its eldercare name (``SUBJECT_ALIAS``)."""


def subject_fields(body: SessionIn | SessionPatch) -> dict[str, int | None]:
    """The subject a session body sets, as ``{"subject_id": ...}`` (``{}`` when it
    sends neither name): ``subject_id`` or ``patient_id``; both, naming different
    subjects, is a 400 (both naming the same one is that one)."""
    sent = body.model_fields_set & {"subject_id", SUBJECT_ALIAS}
    if not sent:
        return {}
    if len(sent) == 2 and body.subject_id != body.patient_id:
        raise InvalidRequestError(
            "subject_id and patient_id name different subjects: send one of them",
            param="subject_id",
        )
    return {"subject_id": body.subject_id if "subject_id" in sent else body.patient_id}


class MessageIn(Body):
    input: str = Field(min_length=1)
    model: str | None = Field(None, min_length=1, max_length=200)
    """Defaults to ``agent.model`` (else the default backend's model)."""
    stream: StrictBool = False
    """Answer as Server-Sent Events: ``start``, ``delta``..., ``done`` (or ``error``)."""
    settings: AgentSettings | None = None
    """Overrides of the persona's settings for this turn."""
    system_prompt: str = Field("", max_length=100_000)
    document_ids: list[RowId] | None = Field(None, max_length=100)
    """Search only these documents."""
    tools: bool | tuple[str, ...] = True
    """``true``: every tool; ``false``: none; names: just those (an alias counts:
    ``tavily_search`` is ``web_search``)."""
    history_budget: int | None = Field(None, ge=0, le=1_000_000)

    @field_validator("input")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value

    @field_validator("tools", mode="plain")
    @classmethod
    def _tool_choice(cls, value: Any) -> bool | tuple[str, ...]:
        # One check for the union: pydantic's own would name each branch in the
        # error's field ("tools.bool").
        if isinstance(value, bool):
            return value
        if (
            isinstance(value, list)
            and len(value) <= _MAX_TOOLS
            and all(isinstance(name, str) and 0 < len(name) <= 200 for name in value)
        ):
            return tuple(value)
        raise ValueError(f"must be true, false or a list of up to {_MAX_TOOLS} tool names")


class PinIn(Body):
    content: str = Field(min_length=1, max_length=20_000)
    message_id: RowId | None = None
    """The message the fact comes from (of the same session)."""


class FactIn(Body):
    """A fact written or corrected through the API: it stays in every
    context of the session like a pin."""

    content: str = Field(min_length=1, max_length=2_000)

    @field_validator("content")
    @classmethod
    def _fact_not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be blank")
        return value


class SummaryIn(Body):
    model: str | None = Field(None, min_length=1, max_length=200)
    """The model that writes it; default: ``agent.summary_model``, else the session's
    own model, else the default one."""


# -- documents ------------------------------------------------------------------------


class DocumentIn(Body):
    title: str = Field(min_length=1, max_length=500)
    content: str = Field(min_length=1)
    source: str | None = Field(None, max_length=1000)


class DocumentPatch(Body):
    title: str | None = Field(None, min_length=1, max_length=500)
    content: str | None = Field(None, min_length=1)
    """New content is indexed again."""
    source: str | None = Field(None, max_length=1000)


# -- views ----------------------------------------------------------------------------


def persona_view(persona: PersonaRecord) -> dict[str, Any]:
    return {
        "id": persona.id,
        "name": persona.name,
        "prompt": persona.prompt,
        "settings": persona.settings,
        "shared": persona.owner is None,
        "created_at": persona.created_at,
        "updated_at": persona.updated_at,
    }


def session_view(session: SessionRecord) -> dict[str, Any]:
    return {
        "id": session.id,
        "title": session.name,
        "persona_id": session.persona_id,
        "subject_id": session.subject_id,
        SUBJECT_ALIAS: session.subject_id,
        "created_at": session.created_at,
        "updated_at": session.updated_at,
    }


def message_view(message: StoredMessage) -> dict[str, Any]:
    return {
        "id": message.id,
        "session_id": message.session_id,
        "role": message.role,
        "content": message.content,
        "status": message.status,
        "created_at": message.created_at,
        "model": message.model,
        "token_count": message.token_count,
        "input_tokens": message.input_tokens,
        "output_tokens": message.output_tokens,
        "tool_data": message.tool_data,
    }


def pin_view(pin: PinRecord) -> dict[str, Any]:
    return {
        "id": pin.id,
        "session_id": pin.session_id,
        "content": pin.content,
        "message_id": pin.message_id,
        "token_count": pin.token_count,
        "created_at": pin.created_at,
    }


def fact_view(fact: FactRecord) -> dict[str, Any]:
    return {
        "id": fact.id,
        "session_id": fact.session_id,
        "content": fact.content,
        "source": fact.source,
        "message_id": fact.message_id,
        "subject_id": fact.subject_id,
        SUBJECT_ALIAS: fact.subject_id,
        "token_count": fact.token_count,
        "created_at": fact.created_at,
        "updated_at": fact.updated_at,
    }


def long_summary_view(summary: LongSummaryRecord) -> dict[str, Any]:
    return {
        "id": summary.id,
        "session_id": summary.session_id,
        "content": summary.content,
        "first_message_id": summary.first_message_id,
        "last_message_id": summary.last_message_id,
        "folded": summary.folded,
        "token_count": summary.token_count,
        "model": summary.model,
        "created_at": summary.created_at,
    }


def summary_view(summary: SummaryRecord) -> dict[str, Any]:
    return {
        "id": summary.id,
        "session_id": summary.session_id,
        "content": summary.content,
        "message_ids": list(summary.message_ids),
        "first_message_id": summary.first_message_id,
        "last_message_id": summary.last_message_id,
        "token_count": summary.token_count,
        "model": summary.model,
        "created_at": summary.created_at,
    }


def document_view(document: DocumentRecord) -> dict[str, Any]:
    view: dict[str, Any] = {
        "id": document.id,
        "title": document.title,
        "source": document.source,
        "token_count": document.token_count,
        "shared": document.owner is None,
        "created_at": document.created_at,
    }
    if document.content is not None:
        view["content"] = document.content
    return view


def hit_view(hit: DocumentHit) -> dict[str, Any]:
    return {
        "document_id": hit.document_id,
        "title": hit.title,
        "ordinal": hit.ordinal,
        "content": hit.content,
        "score": round(hit.score, 4),
    }


def record_view(fields: Mapping[str, Any]) -> dict[str, Any]:
    """A domain's record (a patient, ``EldercareRecords``) without its owner: ``shared``
    says whether it has none."""
    view = {k: v for k, v in fields.items() if k != "owner"}
    if "owner" in fields:
        view["shared"] = fields["owner"] is None
    return view


def usage_view(usage: Usage) -> dict[str, Any]:
    """A turn's tokens over all its model calls; ``cached_input_tokens`` (of
    ``input_tokens``, those the backend's prompt cache served) when the backend says."""
    view: dict[str, Any] = {
        "input_tokens": usage.input_tokens,
        "output_tokens": usage.output_tokens,
    }
    if usage.cache_read_input_tokens is not None:
        view["cached_input_tokens"] = usage.cache_read_input_tokens
    return view


def reply_view(reply: AgentReply) -> dict[str, Any]:
    """The non-streamed answer: the seed's ``{reply, tokenUsage}`` and the ids."""
    return {
        "reply": reply.text,
        "token_usage": reply.total_tokens,
        "usage": usage_view(reply.usage),
        "session_id": reply.session_id,
        "message_id": reply.message_id,
        "user_message_id": reply.user_message_id,
        "rounds": reply.rounds,
        "tool_calls": [
            {"id": c.id, "name": c.name, "arguments": c.arguments, "round": c.round}
            for c in reply.tool_calls
        ],
        "tool_results": [
            {
                "id": r.id,
                "name": r.name,
                "content": r.content,
                "is_error": r.is_error,
                "round": r.round,
            }
            for r in reply.tool_results
        ],
    }
