"""openapi_to_json_schema: Gemini's OpenAPI schema subset read as JSON Schema."""

from __future__ import annotations

from typing import Any

import pytest

from llmbridge.dialects.gemini.request import decode_chat_request
from llmbridge.dialects.gemini.schema import lower_case_types, openapi_to_json_schema


def test_upper_case_types_nested_everywhere() -> None:
    schema = {
        "type": "OBJECT",
        "properties": {
            "path": {"type": "STRING", "description": "where"},
            "lines": {"type": "ARRAY", "items": {"type": "INTEGER"}},
            "options": {
                "type": "OBJECT",
                "properties": {"force": {"type": "BOOLEAN"}, "ratio": {"type": "NUMBER"}},
            },
        },
        "required": ["path"],
    }
    assert openapi_to_json_schema(schema) == {
        "type": "object",
        "properties": {
            "path": {"type": "string", "description": "where"},
            "lines": {"type": "array", "items": {"type": "integer"}},
            "options": {
                "type": "object",
                "properties": {"force": {"type": "boolean"}, "ratio": {"type": "number"}},
            },
        },
        "required": ["path"],
    }


def test_lower_case_types_are_taken_too() -> None:
    assert openapi_to_json_schema({"type": "string"}) == {"type": "string"}


def test_nullable_becomes_a_null_member_of_type() -> None:
    assert openapi_to_json_schema({"type": "STRING", "nullable": True}) == {
        "type": ["string", "null"]
    }
    assert openapi_to_json_schema({"type": "STRING", "nullable": False}) == {"type": "string"}


def test_enum_marker_dropped_and_numeric_enums_become_numbers() -> None:
    # Gemini's enum values are strings even for INTEGER (ai.google.dev Schema.enum).
    assert openapi_to_json_schema(
        {"type": "INTEGER", "format": "enum", "enum": ["101", "201"]}
    ) == {
        "type": "integer",
        "enum": [101, 201],
    }
    assert openapi_to_json_schema({"type": "STRING", "format": "enum", "enum": ["N", "S"]}) == {
        "type": "string",
        "enum": ["N", "S"],
    }


def test_nullable_enum_admits_null() -> None:
    converted = openapi_to_json_schema({"type": "STRING", "enum": ["a"], "nullable": True})
    assert converted == {"type": ["string", "null"], "enum": ["a", None]}


def test_other_formats_are_kept() -> None:
    assert openapi_to_json_schema({"type": "STRING", "format": "date-time"}) == {
        "type": "string",
        "format": "date-time",
    }


def test_property_ordering_dropped_and_type_unspecified_dropped() -> None:
    schema = {
        "type": "TYPE_UNSPECIFIED",
        "properties": {"b": {"type": "STRING"}},
        "propertyOrdering": ["b"],
    }
    assert openapi_to_json_schema(schema) == {"properties": {"b": {"type": "string"}}}


def test_any_of_and_additional_properties_recursive() -> None:
    schema = {
        "anyOf": [{"type": "STRING"}, {"type": "NULL"}],
        "additionalProperties": {"type": "NUMBER"},
    }
    assert openapi_to_json_schema(schema) == {
        "anyOf": [{"type": "string"}, {"type": "null"}],
        "additionalProperties": {"type": "number"},
    }


@pytest.mark.parametrize(
    ("snake", "camel"),
    [
        ("any_of", "anyOf"),
        ("min_items", "minItems"),
        ("max_length", "maxLength"),
        ("min_properties", "minProperties"),
    ],
)
def test_snake_case_spellings_accepted(snake: str, camel: str) -> None:
    value: Any = [{"type": "STRING"}] if camel == "anyOf" else 2
    expected: Any = [{"type": "string"}] if camel == "anyOf" else 2
    assert openapi_to_json_schema({snake: value}) == {camel: expected}


def test_int64_counts_sent_as_strings_become_integers() -> None:
    # proto3 JSON writes int64 fields as strings.
    assert openapi_to_json_schema({"type": "ARRAY", "maxItems": "3", "minItems": 1}) == {
        "type": "array",
        "maxItems": 3,
        "minItems": 1,
    }


def test_defs_and_refs() -> None:
    schema = {
        "type": "OBJECT",
        "properties": {"pet": {"ref": "#/defs/Pet"}},
        "defs": {"Pet": {"type": "OBJECT", "properties": {"name": {"type": "STRING"}}}},
    }
    assert openapi_to_json_schema(schema) == {
        "type": "object",
        "properties": {"pet": {"$ref": "#/$defs/Pet"}},
        "$defs": {"Pet": {"type": "object", "properties": {"name": {"type": "string"}}}},
    }


def test_example_becomes_examples_and_unknown_keys_are_kept() -> None:
    converted = openapi_to_json_schema(
        {"type": "NUMBER", "example": 3, "minimum": 0, "maximum": 9, "x-custom": 1}
    )
    assert converted == {
        "type": "number",
        "examples": [3],
        "minimum": 0,
        "maximum": 9,
        "x-custom": 1,
    }


def test_the_sdk_schema_converts_to_what_the_sdk_itself_means() -> None:
    # google-genai's own Schema -> JSON Schema conversion agrees on the common subset.
    from google.genai import types

    sdk = types.Schema(
        type=types.Type.OBJECT,
        properties={
            "city": types.Schema(type=types.Type.STRING, description="a city"),
            "days": types.Schema(type=types.Type.INTEGER, minimum=1),
            "tags": types.Schema(type=types.Type.ARRAY, items=types.Schema(type="STRING")),
        },
        required=["city"],
    )
    wire = sdk.model_dump(mode="json", by_alias=True, exclude_none=True)
    ours = openapi_to_json_schema(wire)
    theirs = sdk.json_schema.model_dump(mode="json", by_alias=True, exclude_none=True)
    assert ours == theirs


def test_upper_case_type_names_in_json_schema_fields_are_lower_cased() -> None:
    # Gemini CLI 0.61.0's model router sends responseJsonSchema with OpenAPI's names.
    schema = {
        "type": "OBJECT",
        "properties": {
            "reasoning": {"type": "STRING"},
            "type": {"type": ["INTEGER", "NULL"], "enum": ["OBJECT"], "default": "STRING"},
            "list": {"type": "ARRAY", "items": {"type": "BOOLEAN"}},
        },
        "anyOf": [{"type": "NUMBER"}],
    }
    assert lower_case_types(schema) == {
        "type": "object",
        "properties": {
            "reasoning": {"type": "string"},
            # Data (enum, default) is left alone; a property named "type" is a schema.
            "type": {"type": ["integer", "null"], "enum": ["OBJECT"], "default": "STRING"},
            "list": {"type": "array", "items": {"type": "boolean"}},
        },
        "anyOf": [{"type": "number"}],
    }


def test_the_decoder_lower_cases_response_and_parameters_json_schemas() -> None:
    body = {
        "contents": [{"role": "user", "parts": [{"text": "route"}]}],
        "tools": [
            {
                "functionDeclarations": [
                    {"name": "f", "parametersJsonSchema": {"type": "OBJECT", "properties": {}}}
                ]
            }
        ],
        "generationConfig": {
            "responseMimeType": "application/json",
            "responseJsonSchema": {"type": "OBJECT", "properties": {"m": {"type": "STRING"}}},
        },
    }
    chat = decode_chat_request(body, model="m", stream=False)
    assert chat.tools[0].input_schema == {"type": "object", "properties": {}}
    assert chat.response_format is not None
    assert chat.response_format.schema == {
        "type": "object",
        "properties": {"m": {"type": "string"}},
    }
