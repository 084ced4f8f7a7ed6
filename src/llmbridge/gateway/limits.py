"""Reading request bodies within the size limit, as JSON.

The limit is checked twice: against ``Content-Length`` before reading anything,
and against the bytes actually received (chunked uploads carry no length).
"""

from __future__ import annotations

from typing import Any

import orjson
from starlette.requests import Request

from llmbridge.core.errors import InvalidRequestError, RequestTooLargeError

__all__ = ["read_json"]


async def read_json(request: Request, limit: int) -> Any:
    """The request body decoded as JSON, or a 400/413 ``LLMBridgeError``."""
    declared = request.headers.get("content-length")
    if declared is not None and declared.isdigit() and int(declared) > limit:
        raise RequestTooLargeError(
            f"request body of {int(declared)} bytes exceeds the limit of {limit} bytes"
        )
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestTooLargeError(f"request body exceeds the limit of {limit} bytes")
        chunks.append(chunk)
    body = b"".join(chunks)
    if not body.strip():
        raise InvalidRequestError("request body is empty; expected a JSON object")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequestError(f"request body is not valid JSON: {exc}") from exc
