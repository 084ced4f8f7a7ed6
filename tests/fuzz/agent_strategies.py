"""Hypothesis strategies for the agent API (``/agent/...``), the shapes that broke it once first.

``strategies.py`` covers the chat dialects; this module draws whole agent requests:
a route (method and path), query parameters and a JSON body, each usually valid and
now and then holding one of the values that used to reach the database and come back
as a 500:

- integers a database cannot hold: ``2**63``, ``2**64``, ``-(2**63) - 1``, ``10**30``
  (in bodies, in query parameters and as path ids);
- query integers that pass ``str.isdigit`` but not ``int``: superscript and other
  Unicode digits (``"²"``, ``"¹⁰"``, ``"١٢"``, ``"１"``);
- U+0000 anywhere in a string (PostgreSQL's ``text`` cannot hold it), lone
  surrogates (raw, or as JSON escapes: no strict parser takes either), and NUL in
  path and query parameters (``%00``);
- non-finite floats, as the strings pydantic's lax mode reads (``"nan"``, ``"inf"``,
  ``"-Infinity"``, ``"1e999"``) and as the JSON literals ``NaN``/``Infinity``;
- timestamps at and beyond the ends of years 1-9999 once converted to UTC.

``{session}``, ``{patient}``, ``{persona}`` and ``{document}`` in a path are filled in
by the test with ids it created (or a bad value drawn here).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st

from tests.fuzz.strategies import WEIRD_TEXT, rarely

__all__ = ["AGENT_REQUESTS", "BAD_FLOATS", "BAD_INTS", "NUL_TEXT", "ODD_DIGITS", "AgentCall"]

Strategy = st.SearchStrategy[Any]

BAD_INTS = st.sampled_from([2**63, 2**64, -(2**63) - 1, 10**30, 2**63 - 1, 0, -1])
ODD_DIGITS = st.sampled_from(["²", "¹⁰", "5²", "³", "١٢", "１", "𝟗", " 5", "+5", "5.0", "1e3"])
"""Superscripts pass ``str.isdigit`` and fail ``int``; other scripts' digits pass both."""
NUL_TEXT = st.sampled_from(["\x00", "a\x00b", "name\x00", "\x00" * 3])
BAD_FLOATS = st.sampled_from(["nan", "NaN", "inf", "-inf", "Infinity", "-Infinity", "1e999"])
EDGE_TIMES = st.sampled_from(
    [
        "0001-01-01T00:00:00+01:00",
        "0001-01-01T00:30:00+00:30",
        "9999-12-31T23:30:00-01:00",
        "9999-12-31T23:59:59.999999-00:01",
        "0001-01-01T00:00:00Z",
        "9999-12-31T23:59:59.999999Z",
        "2030-05-01T09:00",
        "2030-02-30T09:00:00Z",
    ]
)
NON_FINITE_LITERAL = object()
"""Stands for a bare ``NaN`` in the encoded JSON (``json.dumps`` writes it)."""


def _text(valid: Strategy) -> Strategy:
    return rarely(valid, st.one_of(NUL_TEXT, WEIRD_TEXT), 4)


def _int(valid: Strategy) -> Strategy:
    return rarely(valid, BAD_INTS, 3)


def _float(valid: Strategy) -> Strategy:
    return rarely(valid, st.one_of(BAD_FLOATS, st.just(NON_FINITE_LITERAL)), 3)


def _time() -> Strategy:
    return rarely(
        st.sampled_from(["2030-05-01T09:00:00Z", "2024-01-02T03:04:05+02:00"]), EDGE_TIMES, 3
    )


NAME = _text(st.sampled_from(["Mary", "Dr. Johnson", "Nurse", "é" * 3]))
TEXT = _text(st.text(max_size=20))
SETTINGS = st.fixed_dictionaries(
    {},
    optional={
        "temperature": _float(st.floats(0, 2)),
        "mirostat_tau": _float(st.floats(0.1, 10)),
        "mirostat_eta": _float(st.floats(0.01, 1)),
        "seed": _int(st.integers(0, 1000)),
        "max_tokens": _int(st.integers(1, 100)),
        "stop": st.lists(TEXT, max_size=2),
    },
)

BODIES: dict[str, Strategy] = {
    "persona": st.fixed_dictionaries(
        {"name": NAME}, optional={"prompt": TEXT, "settings": SETTINGS}
    ),
    "session": st.fixed_dictionaries(
        {},
        optional={
            "title": TEXT,
            "subject_id": _int(st.integers(1, 3)),
            "patient_id": _int(st.integers(1, 3)),
        },
    ),
    "message": st.fixed_dictionaries(
        {"input": _text(st.sampled_from(["Hi", "How is Mary?", "metformin"]))},
        optional={
            "settings": SETTINGS,
            "document_ids": st.lists(_int(st.integers(1, 3)), max_size=2),
            "history_budget": _int(st.integers(0, 5000)),
            "system_prompt": TEXT,
            "tools": st.booleans(),
        },
    ),
    "pin": st.fixed_dictionaries(
        {"content": TEXT}, optional={"message_id": _int(st.integers(1, 5))}
    ),
    "fact": st.fixed_dictionaries({"content": TEXT}),
    "document": st.fixed_dictionaries(
        {"title": NAME, "content": _text(st.sampled_from(["Take metformin.", "Walk daily."]))},
        optional={"source": TEXT},
    ),
    "patient": st.fixed_dictionaries(
        {"name": NAME},
        optional={
            "notes": TEXT,
            "conditions": st.lists(TEXT, max_size=2),
            "birth_date": st.just("1940-02-29"),
        },
    ),
    "vital": st.fixed_dictionaries(
        {"kind": _text(st.sampled_from(["weight", "glucose"])), "value": _float(st.floats(0, 300))},
        optional={
            "secondary_value": _float(st.floats(0, 200)),
            "measured_at": _time(),
            "note": TEXT,
        },
    ),
    "appointment": st.fixed_dictionaries(
        {"provider": NAME, "scheduled_at": _time()}, optional={"notes": TEXT}
    ),
    "caregiver": st.fixed_dictionaries({"name": NAME}, optional={"phone": TEXT}),
}

# (method, path template, body kind or None, query parameters that take integers)
ROUTES: list[tuple[str, str, str | None, tuple[str, ...]]] = [
    ("POST", "/agent/personas", "persona", ()),
    ("GET", "/agent/personas/{persona}", None, ()),
    ("PATCH", "/agent/personas/{persona}", "persona", ()),
    ("POST", "/agent/sessions", "session", ()),
    ("GET", "/agent/sessions", None, ("limit", "offset")),
    ("GET", "/agent/sessions/{session}", None, ()),
    ("PATCH", "/agent/sessions/{session}", "session", ()),
    ("POST", "/agent/sessions/{session}/messages", "message", ()),
    ("GET", "/agent/sessions/{session}/messages", None, ("limit", "after")),
    ("POST", "/agent/sessions/{session}/pins", "pin", ()),
    ("GET", "/agent/sessions/{session}/pins", None, ("limit",)),
    ("DELETE", "/agent/sessions/{session}/pins/{id}", None, ()),
    ("GET", "/agent/sessions/{session}/summaries", None, ("limit",)),
    ("POST", "/agent/sessions/{session}/facts", "fact", ()),
    ("GET", "/agent/sessions/{session}/facts", None, ("limit",)),
    ("PATCH", "/agent/sessions/{session}/facts/{id}", "fact", ()),
    ("DELETE", "/agent/sessions/{session}/facts/{id}", None, ()),
    ("GET", "/agent/sessions/{session}/long-summary", None, ()),
    ("POST", "/agent/documents", "document", ()),
    ("GET", "/agent/documents", None, ("limit", "offset")),
    ("GET", "/agent/documents/search", None, ("limit",)),
    ("GET", "/agent/documents/{document}", None, ()),
    ("PATCH", "/agent/documents/{document}", "document", ()),
    ("POST", "/agent/patients", "patient", ()),
    ("GET", "/agent/patients/{patient}", None, ()),
    ("PATCH", "/agent/patients/{patient}", "patient", ()),
    ("POST", "/agent/patients/{patient}/vitals", "vital", ()),
    ("GET", "/agent/patients/{patient}/vitals", None, ("limit", "offset")),
    ("GET", "/agent/patients/{patient}/vitals/{id}", None, ()),
    ("POST", "/agent/patients/{patient}/appointments", "appointment", ()),
    ("POST", "/agent/patients/{patient}/caregivers", "caregiver", ()),
]


@dataclass(frozen=True)
class AgentCall:
    """One drawn request; ``path`` may still hold ``{session}``-style placeholders."""

    method: str
    path: str
    query: dict[str, str]
    body: bytes | None
    stream: bool = False


def encode_body(body: dict[str, Any], escape: bool) -> bytes:
    """``body`` as JSON: a bare ``NaN`` where the marker is, and (``escape``) every
    non-ASCII character as a ``\\uXXXX`` escape, lone surrogates included."""
    text = json.dumps(body, ensure_ascii=escape, default=lambda _: float("nan"))
    if not escape:
        return text.encode("utf-8", "surrogatepass")
    return text.encode()


def _path_id() -> Strategy:
    return rarely(st.sampled_from(["1", "2"]), st.one_of(BAD_INTS.map(str), st.just("%00")), 3)


def _query_value(name: str) -> Strategy:
    valid = st.sampled_from(["0", "1", "5", "100"])
    bad = rarely(ODD_DIGITS, st.one_of(BAD_INTS.map(str), st.just("1\x00")), 3)  # sent as %00
    if name == "q":
        return rarely(st.just("metformin"), st.just("a\x00b"), 3)
    return rarely(valid, bad, 2)


@st.composite
def _calls(draw: st.DrawFn) -> AgentCall:
    method, template, kind, int_params = draw(st.sampled_from(ROUTES))
    path = template.replace("{id}", draw(_path_id()))
    if draw(st.integers(1, 8)) == 8:  # a NUL in a string path parameter
        path = path.replace("{session}", "s%00").replace("{persona}", "p%00")
    query: dict[str, str] = {}
    for name in int_params:
        if draw(st.integers(1, 3)) > 1:
            query[name] = draw(_query_value(name))
    if template.endswith("/search"):
        query["q"] = draw(_query_value("q"))
    body = None
    stream = False
    if kind is not None:
        fields = draw(BODIES[kind])
        if kind == "message":
            stream = draw(st.booleans())
            fields["stream"] = stream
        if method == "PATCH":  # any subset of the fields
            keep = draw(st.sets(st.sampled_from(sorted(fields)))) if fields else set()
            fields = {k: v for k, v in fields.items() if k in keep}
        body = encode_body(fields, escape=draw(st.integers(1, 6)) == 6)
    return AgentCall(method, path, query, body, stream)


AGENT_REQUESTS: st.SearchStrategy[AgentCall] = _calls()
