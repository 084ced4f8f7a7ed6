"""Gemini's OpenAPI schema subset to JSON Schema.

A ``functionDeclaration.parameters`` and a ``generationConfig.responseSchema`` are
Gemini ``Schema`` objects: a subset of the OpenAPI 3.0 schema object
(ai.google.dev/api/caching#Schema) with upper-case type names (``STRING``, ``OBJECT``),
``nullable`` instead of a ``null`` type, ``format: "enum"`` marking enums (whose values
are always strings, even for ``INTEGER``) and Google's ``propertyOrdering``. The core
holds JSON Schema (every other dialect's tool schemas are JSON Schema), so the decoder
converts these; ``parametersJsonSchema`` / ``responseJsonSchema`` already are JSON Schema
and are taken as they are.

Field names are accepted in both of proto3 JSON's spellings (``anyOf`` and ``any_of``),
as Google's parser accepts them. Keys this module does not know are kept as they are.
"""

from __future__ import annotations

from typing import Any

__all__ = ["lower_case_types", "openapi_to_json_schema"]

# proto3 JSON names (and their snake_case originals) -> JSON Schema keywords.
_RENAMED = {
    "anyOf": "anyOf",
    "any_of": "anyOf",
    "minItems": "minItems",
    "min_items": "minItems",
    "maxItems": "maxItems",
    "max_items": "maxItems",
    "minLength": "minLength",
    "min_length": "minLength",
    "maxLength": "maxLength",
    "max_length": "maxLength",
    "minProperties": "minProperties",
    "min_properties": "minProperties",
    "maxProperties": "maxProperties",
    "max_properties": "maxProperties",
    "additionalProperties": "additionalProperties",
    "additional_properties": "additionalProperties",
    "defs": "$defs",
    "$defs": "$defs",
    "ref": "$ref",
    "$ref": "$ref",
}
_COUNTS = frozenset(
    {"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"}
)
_DROPPED = frozenset({"propertyOrdering", "property_ordering", "nullable"})
"""``propertyOrdering`` is an ordering hint for Gemini's decoder, not a constraint;
``nullable`` is folded into ``type`` (``_type``)."""
_TYPES = {
    "STRING": "string",
    "NUMBER": "number",
    "INTEGER": "integer",
    "BOOLEAN": "boolean",
    "ARRAY": "array",
    "OBJECT": "object",
    "NULL": "null",
}


def openapi_to_json_schema(schema: dict[str, Any]) -> dict[str, Any]:
    """The JSON Schema (draft 2020-12) meaning what the Gemini ``Schema`` ``schema`` means.

    ``type`` lower-cased (``TYPE_UNSPECIFIED`` dropped), ``nullable: true`` as a
    ``null`` member of ``type``, ``format: "enum"`` dropped with an ``INTEGER``/``NUMBER``
    enum's string values made numbers, ``example`` as ``examples``, int64 counts sent
    as strings (proto3 JSON writes them so) made integers, ``propertyOrdering`` dropped,
    ``defs``/``ref`` as ``$defs``/``$ref``; ``properties``, ``items``, ``anyOf``,
    ``additionalProperties`` and ``$defs`` converted recursively.
    """
    result: dict[str, Any] = {}
    kind = _type(schema)
    if kind is not None:
        result["type"] = kind
    for key, value in schema.items():
        if key in _DROPPED or key == "type":
            continue
        name = _RENAMED.get(key, key)
        if name in ("properties", "$defs") and isinstance(value, dict):
            result[name] = {
                prop: openapi_to_json_schema(sub) if isinstance(sub, dict) else sub
                for prop, sub in value.items()
            }
        elif name in ("items", "additionalProperties") and isinstance(value, dict):
            result[name] = openapi_to_json_schema(value)
        elif name == "anyOf" and isinstance(value, list):
            result[name] = [openapi_to_json_schema(s) if isinstance(s, dict) else s for s in value]
        elif name in _COUNTS:
            result[name] = _count(value)
        elif name == "$ref" and isinstance(value, str):
            result[name] = value.replace("#/defs/", "#/$defs/", 1)
        elif name == "format" and value == "enum":
            continue  # Gemini's enum marker; ``enum`` itself says it
        elif name == "enum" and isinstance(value, list):
            result[name] = _enum(value, result.get("type"), schema)
        elif name == "example":
            result["examples"] = [value]
        else:
            result[name] = value
    return result


_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "example"})
"""Keywords whose values are data, not schemas: never rewritten."""


def lower_case_types(schema: Any) -> Any:
    """``schema`` (a ``parametersJsonSchema`` / ``responseJsonSchema``) with Google's
    upper-case type names (``"OBJECT"``, ``"STRING"``) as JSON Schema's lower-case ones,
    everything else as it is.

    Gemini's own API accepts either spelling in these JSON Schema fields, and Gemini CLI
    0.61.0 sends upper-case ones (its model router's ``responseJsonSchema``); a JSON Schema
    validator or grammar compiler downstream (llama.cpp's, an OpenAI server's) knows only
    the lower-case names and refuses the others."""
    if isinstance(schema, list):
        return [lower_case_types(item) for item in schema]
    if not isinstance(schema, dict):
        return schema
    result: dict[str, Any] = {}
    for key, value in schema.items():
        if key in _DATA_KEYWORDS:
            result[key] = value
        elif key == "type" and isinstance(value, str):
            result[key] = _TYPES.get(value, value)
        elif key == "type" and isinstance(value, list):
            result[key] = [_TYPES.get(v, v) if isinstance(v, str) else v for v in value]
        else:
            result[key] = lower_case_types(value)
    return result


def _type(schema: dict[str, Any]) -> str | list[str] | None:
    raw = schema.get("type")
    kind = _TYPES.get(raw.upper(), raw.lower()) if isinstance(raw, str) else None
    if kind == "type_unspecified":
        kind = None
    if kind is not None and kind != "null" and schema.get("nullable") is True:
        return [kind, "null"]
    return kind


def _count(value: Any) -> Any:
    if isinstance(value, str) and value.isdigit():
        return int(value)
    return value


def _enum(values: list[Any], kind: Any, schema: dict[str, Any]) -> list[Any]:
    numeric = kind in ("integer", "number") or (
        isinstance(kind, list) and ("integer" in kind or "number" in kind)
    )
    converted = [_number(v) if numeric else v for v in values]
    if schema.get("nullable") is True and None not in converted:
        converted.append(None)
    return converted


def _number(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return int(value)
    except ValueError:
        pass
    try:
        return float(value)
    except ValueError:
        return value
