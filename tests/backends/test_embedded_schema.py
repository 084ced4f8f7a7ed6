"""Response-format schemas checked before llama.cpp sees them (a grammar it refused crashed it).

Each schema here made llama.cpp refuse its grammar, which llama-cpp-python turned into
a SIGSEGV, or would make the grammar unreasonably large. The check runs in the gateway
process and needs no model; the gateway-level tests (official clients, real worker)
are in ``tests/gateway/test_embedded_faults.py``.
"""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from llmbridge.backends.embedded.schema import (
    MAX_REPEAT,
    MAX_SCHEMA_BYTES,
    MAX_SCHEMA_DEPTH,
    compile_schema,
)
from llmbridge.core.errors import InvalidRequestError
from llmbridge.core.request import ResponseFormat


def refusal(schema: Any, param: str = "response_format") -> InvalidRequestError:
    with pytest.raises(InvalidRequestError) as info:
        compile_schema(ResponseFormat("json_schema", schema=schema, param=param))
    assert info.value.status_code == 400
    assert info.value.param == param
    assert info.value.message.startswith(f"{param}: ")
    return info.value


def nested(depth: int) -> dict[str, Any]:
    schema: dict[str, Any] = {"type": "string"}
    for _ in range(depth):
        schema = {"type": "object", "properties": {"a": schema}}
    return schema


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"enum": []}, "enum at / is empty"),
        ({"type": "object", "properties": {"a": {"enum": []}}}, "enum at /properties/a"),
        ({"anyOf": []}, "anyOf at / is empty"),
        ({"oneOf": []}, "oneOf at / is empty"),
        (
            {"type": "string", "maxLength": 5000},
            f"maxLength at / is 5000; the limit is {MAX_REPEAT}",
        ),
        ({"type": "string", "minLength": MAX_REPEAT + 1}, "minLength"),
        ({"type": "array", "items": {"type": "integer"}, "maxItems": 10_000}, "maxItems"),
        ({"type": "string", "pattern": "^a{1,5000}$"}, "grammar nests 4999 levels deep"),
        ({"$ref": "https://example.com/schema.json"}, "Fetching remote schemas is not allowed"),
        ({"type": "frobnicate"}, "the grammar converter refused it"),
        (nested(MAX_SCHEMA_DEPTH + 1), f"more than {MAX_SCHEMA_DEPTH} levels"),
    ],
)
def test_unusable_schemas_are_a_400_naming_the_field(schema: Any, says: str) -> None:
    assert says in refusal(schema).message


@pytest.mark.parametrize("param", ["response_format", "format", "output_config.format"])
def test_the_field_is_the_one_the_caller_used(param: str) -> None:
    assert "enum" in refusal({"enum": []}, param).message


def test_a_schema_over_the_size_limit_is_refused() -> None:
    properties = {f"field_{i}": {"type": "string"} for i in range(MAX_SCHEMA_BYTES // 20)}
    assert "bytes; the limit is" in refusal({"type": "object", "properties": properties}).message


def test_data_keywords_are_not_mistaken_for_schemas() -> None:
    """``enum: []`` inside a default value or a property named ``enum`` is data."""
    schema = {
        "type": "object",
        "properties": {"enum": {"type": "string", "default": {"enum": []}}},
        "examples": [{"maxLength": 99999}],
    }
    grammar = compile_schema(ResponseFormat("json_schema", schema=schema))
    assert "root ::=" in grammar


def test_usable_schemas_become_grammars_at_the_limits() -> None:
    schema = {
        "type": "object",
        "properties": {
            "name": {"type": "string", "maxLength": MAX_REPEAT},
            "tags": {"type": "array", "items": {"type": "string"}, "maxItems": 5},
            "kind": {"enum": ["a", "b"]},
        },
        "required": ["name"],
    }
    grammar = compile_schema(ResponseFormat("json_schema", schema=schema))
    assert "root ::=" in grammar
    assert '"\\"a\\""' in grammar  # the enum's values are literals of the grammar
    assert compile_schema(ResponseFormat("json_schema", schema=nested(MAX_SCHEMA_DEPTH // 2 - 1)))


def test_the_check_does_not_load_llama_cpp_into_the_gateway() -> None:
    """llama_cpp's package ``__init__`` loads libllama; only the worker may do that."""
    code = (
        "import sys\n"
        "from llmbridge.backends.embedded.schema import compile_schema\n"
        "from llmbridge.core.request import ResponseFormat\n"
        "assert compile_schema(ResponseFormat('json_schema', schema={'type': 'string'}))\n"
        "print(sorted(m for m in sys.modules if m.startswith('llama_cpp')))\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    )
    assert result.stdout.strip() == "[]"
