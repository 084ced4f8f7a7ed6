"""Schemathesis extensions for the gateway: a check and a deserializer.

Imported by ``test_schemathesis.py`` and loaded by the schemathesis CLI through
``SCHEMATHESIS_HOOKS=tests.fuzz.schemathesis_hooks`` (run from the repository root), so
the CLI and the tests apply the same rules:

- ``dialect_errors``: every 4xx/5xx body is the error JSON of the path's dialect, and no
  body holds a Python traceback;
- NDJSON (Ollama's streams) deserialises to the list of its records, which the
  description types as an array, so ``response_schema_conformance`` checks streamed
  Ollama replies too.
"""

from __future__ import annotations

from typing import Any

import orjson
import schemathesis

from tests.fuzz.shapes import assert_error_shape, assert_no_traceback, dialect_for_path

__all__ = ["dialect_errors"]


@schemathesis.check
def dialect_errors(
    ctx: schemathesis.CheckContext, response: schemathesis.Response, case: schemathesis.Case[Any]
) -> bool | None:
    """Errors in the dialect of their path; never a traceback."""
    assert_no_traceback(response.content)
    if response.status_code >= 400:
        headers = {name.lower(): values[0] for name, values in response.headers.items()}
        assert_error_shape(
            dialect_for_path(case.operation.path), response.status_code, response.content, headers
        )
    return None


@schemathesis.deserializer("application/x-ndjson")
def ndjson_records(
    ctx: schemathesis.DeserializationContext, response: schemathesis.Response
) -> list[Any]:
    return [orjson.loads(line) for line in response.content.split(b"\n") if line]
