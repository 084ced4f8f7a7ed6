"""Hypothesis strategies for structurally wild request bodies, one set per dialect.

Each body starts valid-looking (the fields, roles, content parts, tools, tool choices,
images, thinking and response formats each API really has, plus the near misses
clients send: ``"USER"``, ``"function"`` roles, unknown block types, server tools) and
then, now and then, goes wrong: any field may hold any JSON value instead (``wild``), and
``mutated`` deletes keys, replaces whole subtrees with junk and adds unknown keys
anywhere. About half the bodies stay valid, so replies get checked too, not only errors. Strings
include the empty string, NUL, right-to-left marks, emoji, lone surrogates, superscript
digits and 70 kB runs; numbers include 2**64, 2**70 and the infinities (which no JSON
parser may accept), and literals such as ``1e999`` that parse as infinite; schemas and
tool-call arguments nest up to 279 levels (past the encoder's 254 they were a
500); images include base64 that is not base64.
"""

from __future__ import annotations

import copy
import json
from typing import Any

from hypothesis import strategies as st

__all__ = ["BODIES", "ENCODINGS", "encode", "mutated"]

Strategy = st.SearchStrategy[Any]

WEIRD_TEXT = st.sampled_from(
    [
        *("", " ", "\x00", "\n\r\t", "🦙", "\u202eabc", "\ud800", "ü" * 3, "x" * 70_000),
        *("{", "null"),
        # superscript and other non-ASCII digits: str.isdigit() says yes, int() says no
        *("²³", "5\u2075", "\u0663", "1\x00"),
    ]
)


def rarely(common: Strategy, rare: Strategy, one_in: int) -> Strategy:
    """``common``, except about one draw in ``one_in`` is ``rare`` (shrinks to common)."""
    return st.integers(1, one_in).flatmap(lambda n: rare if n == one_in else common)


def pick(valid: list[Any], misses: list[Any]) -> Strategy:
    """One of ``valid``, now and then a near miss (a value the API does not take)."""
    return rarely(st.sampled_from(valid), st.sampled_from(misses), 8)


TEXT: Strategy = rarely(st.text(max_size=12), WEIRD_TEXT, 5)
HUGE = {"__1e999__": b"1e999", "__-1e999__": b"-1e999", "__1e400.0__": b"1" + b"0" * 400 + b".0"}
"""Number literals a strict JSON parser reads as infinite; ``encode`` writes them in
place of these strings (Python's json cannot write them itself)."""
NUMBERS: Strategy = st.one_of(
    st.integers(min_value=-5, max_value=10_000),
    # 2**64 and beyond: orjson reads them as floats, which whole-number fields made
    # integers again, which the encoder refused
    st.sampled_from([-(2**63), 2**63, 2**64 - 1, 2**64, 2**70, 10**30, 0.5, -1.5, 1e300, 1e19]),
    st.floats(),  # NaN and the infinities too: json.dumps writes them, no parser may take them
    st.sampled_from(sorted(HUGE)),
)
SCALARS: Strategy = st.one_of(st.none(), st.booleans(), NUMBERS, TEXT)
JUNK: Strategy = st.recursive(
    SCALARS,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=6,
)


def wild(strategy: Strategy) -> Strategy:
    """``strategy``, or now and then any JSON value at all."""
    return rarely(strategy, JUNK, 15)


def obj(required: dict[str, Strategy], optional: dict[str, Strategy] | None = None) -> Strategy:
    """A JSON object whose every field may be wild."""
    return st.fixed_dictionaries(
        {key: wild(value) for key, value in required.items()},
        optional={key: wild(value) for key, value in (optional or {}).items()},
    )


def const(value: Any) -> Strategy:
    return st.just(value)


def lists(strategy: Strategy, max_size: int = 3, min_size: int = 0) -> Strategy:
    return st.lists(strategy, min_size=min_size, max_size=max_size)


BOOL = st.booleans()
INT = st.integers(min_value=-3, max_value=100_000)
FLOAT = st.floats(min_value=-3, max_value=3)
MODEL = rarely(st.sampled_from(["scripted", "other", "llama3.2:1b", "gpt-4o", "claude-x"]), TEXT, 5)
PNG = (  # a 1x1 PNG
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJ"
    "AAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
)
BASE64 = st.sampled_from(
    [PNG, "/9j/4AAQSkZJRg==", "R0lGODlh", "not base64!", "", "abc", "YQ", "ü", PNG + "\n"]
)
URL = st.sampled_from(
    [
        *(f"data:image/png;base64,{PNG}", "data:;base64,", "data:image/png,raw"),
        *("https://x.test/a.png", "data:image/png;base64,not base64!", "data:image/png;base64,YQ"),
    ]
)


def deep(levels: int) -> dict[str, Any]:
    """A JSON Schema nested ``2 * levels - 1`` levels deep."""
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(levels - 1):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


# Around the gateway's default max_json_depth (128 levels for the whole body) and
# past the encoder's 254; the schemas are shared objects, so built once.
DEEP_SCHEMAS = [deep(20), deep(63), deep(64), deep(70), deep(140)]
SCHEMA = st.sampled_from(
    [
        {"type": "object", "properties": {"a": {"type": "string"}}, "required": ["a"]},
        {},
        {"type": "string"},
        {"$ref": "https://x.test/schema.json"},
        {"type": "nonsense", "properties": 5},
        *DEEP_SCHEMAS,
    ]
)
ARGUMENTS = st.one_of(
    st.dictionaries(st.text(max_size=4), JUNK, max_size=3),
    st.sampled_from(['{"a": 1}', "{bad", "[]", "", json.dumps(deep(70)), '{"n": 1e999}']),
)

# -- Ollama -------------------------------------------------------------------------

_OLLAMA_OPTIONS = obj(
    {},
    {
        "temperature": FLOAT,
        "num_predict": INT,
        "num_ctx": INT,
        "top_k": INT,
        "top_p": FLOAT,
        "seed": INT,
        "stop": st.one_of(TEXT, lists(TEXT)),
        "mirostat": INT,
        "repeat_penalty": FLOAT,
    },
)
_OLLAMA_TOOL_CALL = obj(
    {"function": obj({"name": TEXT}, {"arguments": ARGUMENTS, "index": INT})},
    {"id": TEXT, "type": const("function")},
)
_OLLAMA_MESSAGE = obj(
    {"role": pick(["system", "user", "assistant", "tool", "USER"], ["function", ""])},
    {
        "content": TEXT,
        "thinking": TEXT,
        "images": lists(BASE64 | URL),
        "tool_calls": lists(_OLLAMA_TOOL_CALL),
        "tool_name": TEXT,
        "tool_call_id": TEXT,
    },
)
_OLLAMA_TOOL = obj(
    {"type": pick(["function"], ["web_search"]), "function": obj({"name": TEXT})},
)
_OLLAMA_GENERATION = {
    "stream": BOOL,
    "format": st.one_of(pick(["json", ""], ["yaml"]), SCHEMA),
    "think": pick([True, False, "low", "medium", "high", "max"], ["extreme"]),
    "options": _OLLAMA_OPTIONS,
    "keep_alive": st.sampled_from(["5m", "forever", 0, -1, 1.5]),
}
OLLAMA_CHAT = obj(
    {"model": MODEL},
    {"messages": lists(_OLLAMA_MESSAGE, 4), "tools": lists(_OLLAMA_TOOL), **_OLLAMA_GENERATION},
)
OLLAMA_GENERATE = obj(
    {"model": MODEL},
    {
        "prompt": TEXT,
        "system": TEXT,
        "suffix": TEXT,
        "images": lists(BASE64 | URL),
        "context": lists(INT),
        "raw": BOOL,
        **_OLLAMA_GENERATION,
    },
)
OLLAMA_EMBED = obj(
    {"model": MODEL, "input": st.one_of(TEXT, lists(TEXT))},
    {"truncate": BOOL, "dimensions": INT, "options": _OLLAMA_OPTIONS},
)
OLLAMA_SHOW = st.one_of(
    obj({"model": MODEL}, {"name": MODEL, "verbose": BOOL}),
    obj({"name": MODEL}, {"verbose": BOOL, "system": TEXT}),  # the older spelling
)

# -- OpenAI -------------------------------------------------------------------------

_OPENAI_TEXT_PART = obj({"type": const("text"), "text": TEXT})
_OPENAI_PART = rarely(
    st.one_of(
        _OPENAI_TEXT_PART,
        obj({"type": const("image_url"), "image_url": obj({"url": URL}, {"detail": TEXT})}),
    ),
    obj({"type": st.sampled_from(["input_audio", "file", "refusal", ""])}),
    6,
)
_OPENAI_TOOL_CALL = obj(
    {
        "id": TEXT,
        "type": const("function"),
        "function": obj({"name": TEXT}, {"arguments": ARGUMENTS}),
    }
)
_OPENAI_MESSAGE = rarely(
    st.one_of(
        obj(
            {"role": st.sampled_from(["system", "developer"]), "content": TEXT},
            {"name": TEXT},
        ),
        obj({"role": const("user"), "content": st.one_of(TEXT, lists(_OPENAI_PART))}),
        obj(
            {"role": const("assistant")},
            {
                "content": st.one_of(st.none(), TEXT, lists(_OPENAI_TEXT_PART)),
                "tool_calls": lists(_OPENAI_TOOL_CALL),
                "refusal": TEXT,
                "reasoning_content": TEXT,
            },
        ),
        obj({"role": const("tool"), "tool_call_id": TEXT, "content": TEXT}),
    ),
    obj({"role": st.sampled_from(["function", "USER", ""])}, {"content": TEXT}),
    8,
)
_OPENAI_TOOL = obj(
    {
        "type": const("function"),
        "function": obj(
            {"name": TEXT}, {"description": TEXT, "parameters": SCHEMA, "strict": BOOL}
        ),
    }
)
_OPENAI_RESPONSE_FORMAT = st.one_of(
    obj({"type": pick(["text", "json_object"], ["json_schema", "xml"])}),
    obj(
        {"type": const("json_schema"), "json_schema": obj({"name": TEXT}, {"schema": SCHEMA})},
    ),
)
OPENAI_CHAT = obj(
    {"model": MODEL, "messages": lists(_OPENAI_MESSAGE, 4, min_size=1)},
    {
        "max_tokens": INT,
        "max_completion_tokens": INT,
        "temperature": FLOAT,
        "stop": st.one_of(TEXT, lists(TEXT)),
        "n": pick([1], [2, 0]),
        "stream": BOOL,
        "stream_options": obj({}, {"include_usage": BOOL}),
        "tools": lists(_OPENAI_TOOL),
        "tool_choice": st.one_of(
            pick(["none", "auto", "required"], ["any"]),
            obj({"type": const("function"), "function": obj({"name": TEXT})}),
        ),
        "parallel_tool_calls": BOOL,
        "reasoning_effort": pick(["none", "minimal", "low", "high", "xhigh"], ["ultra"]),
        "response_format": _OPENAI_RESPONSE_FORMAT,
        "logit_bias": st.dictionaries(TEXT, FLOAT, max_size=2),
        "metadata": st.dictionaries(TEXT, TEXT, max_size=2),
    },
)
OPENAI_EMBEDDINGS = obj(
    {
        "model": MODEL,
        "input": rarely(st.one_of(TEXT, lists(TEXT)), lists(INT) | lists(lists(INT)), 6),
    },
    {"dimensions": INT, "encoding_format": pick(["float", "base64"], ["hex"])},
)

# -- Anthropic ----------------------------------------------------------------------

_CACHE = obj({"type": const("ephemeral")}, {"ttl": st.sampled_from(["5m", "1h", "1d"])})
_A_TEXT = obj({"type": const("text"), "text": TEXT}, {"cache_control": _CACHE})
_A_IMAGE = obj(
    {
        "type": const("image"),
        "source": rarely(
            st.one_of(
                obj(
                    {
                        "type": const("base64"),
                        "media_type": pick(["image/png", "image/jpeg"], ["text/plain", ""]),
                        "data": BASE64,
                    }
                ),
                obj({"type": const("url"), "url": URL}),
            ),
            obj({"type": st.sampled_from(["file", ""])}),
            6,
        ),
    }
)
_A_DOCUMENT = obj(
    {
        "type": const("document"),
        "source": st.one_of(
            obj({"type": const("text"), "media_type": const("text/plain"), "data": TEXT}),
            obj({"type": const("content"), "content": st.one_of(TEXT, lists(_A_TEXT | _A_IMAGE))}),
            obj({"type": const("base64"), "media_type": const("application/pdf"), "data": BASE64}),
            obj({"type": const("url"), "url": URL}),
        ),
    },
    {"title": TEXT, "context": TEXT, "citations": obj({"enabled": BOOL})},
)
_A_BLOCK = rarely(
    st.one_of(
        _A_TEXT,
        _A_IMAGE,
        obj({"type": const("tool_use"), "id": TEXT, "name": TEXT, "input": ARGUMENTS}),
        obj(
            {"type": const("tool_result"), "tool_use_id": TEXT},
            {"content": st.one_of(TEXT, lists(_A_TEXT | _A_IMAGE)), "is_error": BOOL},
        ),
        obj({"type": const("thinking"), "thinking": TEXT}, {"signature": TEXT}),
        obj({"type": const("redacted_thinking"), "data": TEXT}),
        _A_DOCUMENT,
    ),
    obj({"type": st.sampled_from(["server_tool_use", "container_upload", "", "TEXT"])}),
    8,
)
_A_MESSAGE = obj(
    {
        "role": pick(["user", "assistant", "system"], ["tool", ""]),
        "content": st.one_of(TEXT, lists(_A_BLOCK, 4)),
    }
)
_A_TOOL = st.one_of(
    obj({"name": TEXT}, {"description": TEXT, "input_schema": SCHEMA, "type": const("custom")}),
    obj({"type": st.sampled_from(["web_search_20250305", "bash_20250124"]), "name": TEXT}),
)
_A_CONVERSATION = (
    {"model": MODEL, "messages": lists(_A_MESSAGE, 4)},
    {
        "system": st.one_of(TEXT, lists(_A_TEXT | _A_IMAGE)),
        "tools": lists(_A_TOOL),
        "tool_choice": rarely(
            st.one_of(
                obj(
                    {"type": st.sampled_from(["auto", "any", "none"])},
                    {"disable_parallel_tool_use": BOOL},
                ),
                obj({"type": const("tool"), "name": TEXT}),
            ),
            obj({"type": st.sampled_from(["required", "function", ""])}),
            6,
        ),
        "thinking": st.one_of(
            obj({"type": const("enabled")}, {"budget_tokens": INT, "display": TEXT}),
            obj({"type": pick(["adaptive", "between_tools", "disabled"], ["on"])}),
        ),
        "output_config": obj(
            {},
            {
                "effort": pick(["low", "medium", "high", "xhigh", "max"], ["ultra"]),
                "format": obj({"type": const("json_schema"), "schema": SCHEMA}),
            },
        ),
    },
)
ANTHROPIC_MESSAGES = obj(
    {**_A_CONVERSATION[0], "max_tokens": INT},
    {
        **_A_CONVERSATION[1],
        "stream": BOOL,
        "stop_sequences": lists(TEXT),
        "temperature": FLOAT,
        "top_k": INT,
        "metadata": obj({}, {"user_id": TEXT}),
        "cache_control": _CACHE,
    },
)
ANTHROPIC_COUNT_TOKENS = obj(*_A_CONVERSATION)

# -- OpenAI Responses ---------------------------------------------------------------

_R_PART = rarely(
    st.one_of(
        obj({"type": st.sampled_from(["input_text", "output_text"]), "text": TEXT}),
        obj(
            {"type": const("input_image")},
            {"image_url": URL, "detail": pick(["auto", "low", "high"], ["max"])},
        ),
    ),
    obj({"type": st.sampled_from(["input_file", "input_audio", "refusal", ""])}),
    6,
)
_R_CALL_ID = st.one_of(st.sampled_from(["call_1", "call_2"]), TEXT)
_R_ITEM = rarely(
    st.one_of(
        obj(
            {
                "role": pick(["user", "developer", "system", "assistant"], ["tool", "USER", ""]),
                "content": st.one_of(TEXT, lists(_R_PART)),
            },
            {"type": const("message"), "id": TEXT, "status": TEXT},
        ),
        obj(
            {
                "type": const("function_call"),
                "call_id": _R_CALL_ID,
                "name": TEXT,
                "arguments": ARGUMENTS,
            },
            {"id": TEXT, "namespace": TEXT, "status": TEXT},
        ),
        obj(
            {
                "type": const("function_call_output"),
                "call_id": _R_CALL_ID,
                "output": st.one_of(TEXT, lists(_R_PART)),
            }
        ),
        obj(
            {"type": const("custom_tool_call"), "call_id": _R_CALL_ID, "name": TEXT, "input": TEXT},
            {"id": TEXT},
        ),
        obj({"type": const("custom_tool_call_output"), "call_id": _R_CALL_ID, "output": TEXT}),
        obj(
            {
                "type": const("reasoning"),
                "summary": lists(obj({"type": const("summary_text"), "text": TEXT})),
            },
            {
                "id": TEXT,
                "encrypted_content": TEXT,
                "content": lists(obj({"type": const("reasoning_text"), "text": TEXT})),
            },
        ),
    ),
    obj({"type": st.sampled_from(["item_reference", "web_search_call", "telepathy", ""])}),
    8,
)
_R_FUNCTION = obj(
    {"type": const("function"), "name": TEXT},
    {"description": TEXT, "parameters": SCHEMA, "strict": BOOL},
)
_R_TOOL = rarely(
    st.one_of(
        _R_FUNCTION,
        obj(
            {"type": const("custom"), "name": TEXT},
            {
                "description": TEXT,
                "format": st.one_of(
                    obj({"type": const("text")}),
                    obj(
                        {
                            "type": const("grammar"),
                            "syntax": pick(["lark", "regex"], ["peg"]),
                            "definition": TEXT,
                        }
                    ),
                ),
            },
        ),
        obj(
            {"type": const("namespace"), "name": TEXT, "tools": lists(_R_FUNCTION)},
            {"description": TEXT},
        ),
    ),
    # hosted tools: left out with a header, never a 400
    obj({"type": st.sampled_from(["web_search", "image_generation", "local_shell", ""])}),
    4,
)
_R_CONVERSATION = (
    {"model": MODEL, "input": st.one_of(TEXT, lists(_R_ITEM, 4, min_size=1))},
    {
        "instructions": TEXT,
        "tools": lists(_R_TOOL),
        "tool_choice": st.one_of(
            pick(["none", "auto", "required"], ["any"]),
            obj({"type": pick(["function", "custom"], ["tool"]), "name": TEXT}),
        ),
        "parallel_tool_calls": BOOL,
        "reasoning": obj(
            {},
            {
                "effort": pick(["minimal", "low", "medium", "high", None], ["ultra"]),
                "summary": pick(["auto", "concise", "detailed", None], ["long"]),
            },
        ),
        "text": obj(
            {},
            {
                "format": st.one_of(
                    obj({"type": pick(["text", "json_object"], ["xml"])}),
                    obj(
                        {"type": const("json_schema"), "name": TEXT, "schema": SCHEMA},
                        {"strict": BOOL},
                    ),
                ),
                "verbosity": pick(["low", "medium", "high"], ["loud"]),
            },
        ),
    },
)
OPENAI_RESPONSES = obj(
    {**_R_CONVERSATION[0], "stream": BOOL},  # always there: half the replies are streams
    {
        **_R_CONVERSATION[1],
        "max_output_tokens": INT,
        "temperature": FLOAT,
        "top_p": FLOAT,
        "store": BOOL,
        "include": lists(pick(["reasoning.encrypted_content"], ["message.output_text.logprobs"])),
        "prompt_cache_key": TEXT,
        "metadata": st.dictionaries(TEXT, TEXT, max_size=2),
        "client_metadata": st.dictionaries(TEXT, JUNK, max_size=2),
        "user": TEXT,
        # mostly null: a stored id is looked up before the body is decoded (404 if unknown)
        "previous_response_id": rarely(st.none(), TEXT, 6),
    },
)
OPENAI_RESPONSES_INPUT_TOKENS = obj(
    {"input": _R_CONVERSATION[0]["input"]},
    {"model": MODEL, **_R_CONVERSATION[1]},  # the model may be left out here
)

BODIES: dict[str, Strategy] = {
    "/api/chat": OLLAMA_CHAT,
    "/api/generate": OLLAMA_GENERATE,
    "/api/embed": OLLAMA_EMBED,
    "/api/show": OLLAMA_SHOW,
    "/v1/chat/completions": OPENAI_CHAT,
    "/v1/embeddings": OPENAI_EMBEDDINGS,
    "/v1/messages": ANTHROPIC_MESSAGES,
    "/v1/messages/count_tokens": ANTHROPIC_COUNT_TOKENS,
    "/v1/responses": OPENAI_RESPONSES,
    "/v1/responses/input_tokens": OPENAI_RESPONSES_INPUT_TOKENS,
}
"""A valid-looking (then wild) body per path the gateway takes one on."""


# -- structural mutations and the bytes on the wire ----------------------------------


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    found = [prefix]
    if isinstance(value, dict):
        for key, child in value.items():
            found.extend(_paths(child, (*prefix, key)))
    elif isinstance(value, list):
        for index, child in enumerate(value):
            found.extend(_paths(child, (*prefix, index)))
    return found


def _apply(body: Any, path: tuple[Any, ...], action: str, junk: Any) -> Any:
    if not path:
        return junk if action == "replace" else body
    parent = body
    for step in path[:-1]:
        parent = parent[step]
    last = path[-1]
    if action == "delete":
        del parent[last]
    elif action == "replace":
        parent[last] = junk
    elif isinstance(parent, dict):
        parent[f"x_{len(parent)}"] = junk  # an unknown key beside a known one
    return body


@st.composite
def mutated(draw: st.DrawFn, base: Strategy) -> Any:
    """A body from ``base`` with up to two structural mutations applied."""
    body = copy.deepcopy(draw(base))  # sampled constants (SCHEMA) are shared objects
    for _ in range(draw(rarely(st.just(0), st.integers(1, 2), 2))):
        path = draw(st.sampled_from(_paths(body)))
        action = draw(st.sampled_from(["delete", "replace", "add"]))
        body = _apply(body, path, action, draw(JUNK))
    return body


ENCODINGS = rarely(st.just("json"), st.sampled_from(["utf-8", "truncated"]), 6)
"""How a body goes on the wire: ASCII-escaped JSON (mostly), raw UTF-8 (a lone
surrogate becomes invalid UTF-8), or cut short."""


def encode(body: Any, encoding: str) -> bytes:
    """``body`` as the bytes sent, per ``ENCODINGS``, with the ``HUGE`` literals."""
    if encoding == "utf-8":
        raw = json.dumps(body, ensure_ascii=False).encode("utf-8", "surrogatepass")
    else:
        raw = json.dumps(body).encode()
    for marker, literal in HUGE.items():
        raw = raw.replace(b'"' + marker.encode() + b'"', literal)
    return raw[: len(raw) // 2] if encoding == "truncated" else raw
