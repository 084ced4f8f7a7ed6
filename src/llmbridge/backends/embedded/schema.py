"""Response-format schemas for the embedded model, checked before llama.cpp sees them.

A crash to prevent: llama-cpp-python turns a JSON schema into a GBNF grammar (its
pure-Python port of llama.cpp's ``json_schema_to_grammar``) and hands the grammar to
llama.cpp, whose parser refuses some of them (an empty ``enum`` gives a rule with no
alternative; ``maxLength: 5000`` a repetition past its limits). llama.cpp then
returns NULL from ``llama_sampler_init_grammar``, llama-cpp-python adds the NULL to its
sampler chain, and the process dies of SIGSEGV. So a schema goes through two checks:

1. ``compile_schema`` (here, in the gateway process, before the request queues for
   the model): the schema is walked for what can never work, converted to GBNF with
   the same converter llama-cpp-python uses, and the grammar is measured. Whatever
   fails is an ``InvalidRequestError`` (400) naming the field the caller used
   (``ResponseFormat.param``: ``response_format``, ``format``, ``output_config.format``).
2. ``grammar_error`` (in the worker process, with the model's vocabulary): the
   grammar is given to llama.cpp's own parser through ``llama_sampler_init_grammar``,
   whose NULL is checked here instead of being handed on, so llama.cpp's verdict is
   exact. Only a grammar that passed both reaches generation, as a grammar (the
   schema is not converted a second time).

Refused, not downgraded: a caller who asked for a schema and silently got any JSON
would parse the reply and fail later, far from the cause, so an unusable or too large
schema is a 400 rather than a fallback to plain JSON mode.

The converter is loaded from llama-cpp-python's ``llama_grammar.py`` file on its own:
importing it as ``llama_cpp.llama_grammar`` would run the package's ``__init__``, which
loads libllama into the gateway process, the very thing the worker process is for.
The file imports only the standard library.
"""

from __future__ import annotations

import functools
import importlib.util
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Final

import orjson

from llmbridge.core.errors import BackendUnavailableError, InvalidRequestError
from llmbridge.core.request import ResponseFormat

__all__ = [
    "MAX_GRAMMAR_BYTES",
    "MAX_REPEAT",
    "MAX_SCHEMA_BYTES",
    "MAX_SCHEMA_DEPTH",
    "compile_schema",
    "grammar_error",
]

MAX_SCHEMA_BYTES: Final = 64 * 1024
"""A schema larger than this (as compact JSON) is refused."""
MAX_SCHEMA_DEPTH: Final = 32
"""Levels of nested JSON objects and arrays in the schema document (a property is two:
``properties`` and its schema); the converter recurses per level."""
MAX_REPEAT: Final = 1000
"""The largest ``minLength``/``maxLength``/``minItems``/``maxItems``/
``minProperties``/``maxProperties`` and regex ``{m,n}`` count. The converter writes a
bounded repetition as that many nested optional groups and llama.cpp caps repetitions
at 2000 rules (``MAX_REPETITION_THRESHOLD`` in ``llama-grammar.cpp``); 1000 leaves room
for an item rule of a few symbols."""
MAX_GRAMMAR_BYTES: Final = 256 * 1024
"""The converted grammar's size: larger ones take seconds to parse and sample with."""

_COUNT_KEYWORDS: Final = (
    "minLength",
    "maxLength",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
)
_ALTERNATIVES: Final = ("enum", "anyOf", "oneOf", "allOf")
_DATA_KEYWORDS: Final = frozenset({"const", "default", "examples", "enum"})
"""Keywords whose values are data, not schemas: not walked."""

# A GBNF repetition ``{m}``, ``{m,}`` or ``{m,n}``, outside literals and classes.
_GBNF_LITERALS: Final = re.compile(r'"(?:\\.|[^"\\])*"|\[(?:\\.|[^\]\\])*\]')
_GBNF_REPEAT: Final = re.compile(r"\{\s*(\d+)\s*(?:,\s*(\d*)\s*)?\}")
_EMPTY_RULE: Final = re.compile(r"^\S+ ::=\s*$", re.MULTILINE)


def compile_schema(fmt: ResponseFormat) -> str:
    """The GBNF grammar for ``fmt``'s schema; ``InvalidRequestError`` naming
    ``fmt.param`` when the schema cannot work or is too large (module docstring)."""
    schema = fmt.schema
    field = fmt.param

    def refuse(why: str) -> InvalidRequestError:
        return InvalidRequestError(
            f"{field}: the JSON schema cannot be used with the embedded model: {why}",
            param=field,
        )

    try:
        text = orjson.dumps(schema)
    except TypeError as exc:  # not JSON data at all (a decoder bug, but say so)
        raise refuse(f"not JSON ({exc})") from exc
    if len(text) > MAX_SCHEMA_BYTES:
        raise refuse(f"it is {len(text)} bytes; the limit is {MAX_SCHEMA_BYTES}")
    grammar, problem = _grammar_for(text)
    if problem is not None:
        raise refuse(problem)
    return grammar


@functools.lru_cache(maxsize=64)
def _grammar_for(text: bytes) -> tuple[str, str | None]:
    """``(grammar, None)`` for the schema whose compact JSON is ``text``, or
    ``("", why it cannot be used)``. Cached: a client sends the same schema with every
    request, and converting and checking one takes 10-17 ms for 14 KB, on the event
    loop."""
    problem = _schema_problem(orjson.loads(text), "", 0)
    if problem is not None:
        return "", problem
    try:
        grammar = str(_converter().json_schema_to_gbnf(text.decode()))
    except RecursionError:
        return "", "it nests too deeply"
    except Exception as exc:  # noqa: BLE001 - the converter asserts, and raises whatever it meets
        return "", f"the grammar converter refused it ({exc or type(exc).__name__})"
    return grammar, _grammar_problem(grammar)


def _schema_problem(node: Any, path: str, depth: int) -> str | None:
    """Why this (sub)schema can never work, or None."""
    if depth > MAX_SCHEMA_DEPTH:
        return f"it nests more than {MAX_SCHEMA_DEPTH} levels deep"
    if isinstance(node, list):
        for index, item in enumerate(node):
            if (problem := _schema_problem(item, f"{path}/{index}", depth + 1)) is not None:
                return problem
        return None
    if not isinstance(node, dict):
        return None
    where = path or "/"
    for keyword in _ALTERNATIVES:
        value = node.get(keyword)
        if isinstance(value, list) and not value:
            # Nothing can match: llama.cpp's parser refuses the empty rule (the crash).
            return f"{keyword} at {where} is empty, so no value can match"
    for keyword in _COUNT_KEYWORDS:
        value = node.get(keyword)
        if isinstance(value, int) and not isinstance(value, bool) and value > MAX_REPEAT:
            return f"{keyword} at {where} is {value}; the limit is {MAX_REPEAT}"
    for key, value in node.items():
        if key in _DATA_KEYWORDS or not isinstance(value, dict | list):
            continue
        if (problem := _schema_problem(value, f"{path}/{key}", depth + 1)) is not None:
            return problem
    return None


def _grammar_problem(grammar: str) -> str | None:
    if len(grammar) > MAX_GRAMMAR_BYTES:
        return f"its grammar is {len(grammar)} bytes; the limit is {MAX_GRAMMAR_BYTES}"
    if (empty := _EMPTY_RULE.search(grammar)) is not None:
        return f"its grammar has a rule with no alternative ({empty[0].strip()})"
    structure = _GBNF_LITERALS.sub('""', grammar)
    for match in _GBNF_REPEAT.finditer(structure):
        counts = [int(n) for n in match.groups() if n]
        if max(counts) > MAX_REPEAT:
            return f"it repeats something {max(counts)} times; the limit is {MAX_REPEAT}"
    # The converter spells a bounded repetition (a regex ``{1,5000}``) as nested
    # optional groups, one level per repeat: llama.cpp refuses them past ~2000 levels.
    depth = deepest = 0
    for char in structure:
        if char == "(":
            depth += 1
            deepest = max(deepest, depth)
        elif char == ")":
            depth -= 1
    if deepest > MAX_REPEAT:
        return (
            f"its grammar nests {deepest} levels deep (a long bounded repetition); "
            f"the limit is {MAX_REPEAT}"
        )
    return None


@functools.cache
def _converter() -> ModuleType:
    """llama-cpp-python's ``llama_grammar.py``, loaded without its package (module
    docstring)."""
    spec = importlib.util.find_spec("llama_cpp")
    locations = list(spec.submodule_search_locations or ()) if spec else []
    if not locations:
        raise BackendUnavailableError(
            "the embedded backend needs llama-cpp-python: pip install 'llmbridge[embedded]'"
        )
    path = Path(locations[0]) / "llama_grammar.py"
    file_spec = importlib.util.spec_from_file_location("_llmbridge_llama_grammar", path)
    if file_spec is None or file_spec.loader is None:
        raise BackendUnavailableError(f"cannot load llama-cpp-python's grammar converter {path}")
    module = importlib.util.module_from_spec(file_spec)
    file_spec.loader.exec_module(module)
    return module


def grammar_error(llama: Any, grammar: str) -> str | None:
    """Worker side: llama.cpp's own parser's verdict on ``grammar`` for this model
    (None: accepted). Its NULL is checked here, so a refusal cannot crash."""
    llama_cpp = importlib.import_module("llama_cpp")
    sampler = llama_cpp.llama_sampler_init_grammar(
        llama._model.vocab, grammar.encode("utf-8"), b"root"
    )
    if not sampler:
        return "llama.cpp's grammar parser refused the grammar made from it"
    llama_cpp.llama_sampler_free(sampler)
    return None
