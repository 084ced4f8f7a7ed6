"""The gateway's OpenAPI 3.1 description, served at ``GET /openapi.json``.

One operation per route the gateway always serves (``routes/system.py``, ``ollama.py``,
``openai.py``, ``completions.py``, ``anthropic.py``, ``gemini.py``, ``interactions.py``);
the agent service's ``/agent/...`` routes, on only when configured (docs/AGENT.md), are
not described yet.
Request bodies are the dialects' own pydantic wire types (``dialects/*/types.py``) through
``model_json_schema()``, their ``$defs`` hoisted into ``components/schemas`` under a
dialect prefix (``OllamaTool``, ``OpenAITool`` and ``AnthropicTool`` are different
shapes). Replies are described
loosely (the keys every client reads, anything else allowed); every 4xx/5xx is the error
body of the route's dialect (``web/render.py``): ``/api/*`` Ollama, ``/v1/messages*``
Anthropic, ``/v1beta/*``, ``/v1/interactions*`` and ``/v1/models/{model}:{method}``
Gemini (Google's shape), the rest OpenAI.
Gemini's ``GET /v1/models[/{model}]`` for Gemini clients shares its path with OpenAI's
and is not described apart (an OpenAPI path has one ``get``). The fuzz tests
(tests/fuzz/) drive every operation from this document.

Authentication: when ``server.api_keys`` is set, every path but ``/`` and ``/health``
(``auth.OPEN_PATHS``) wants ``Authorization: Bearer <key>``, ``x-api-key: <key>``,
``x-goog-api-key: <key>`` or ``?key=<key>``, ``/openapi.json`` included; with no keys
configured nothing is checked.

The document is built once per process (``openapi_json`` is cached).
"""

from __future__ import annotations

import copy
from functools import cache
from typing import Any

from pydantic import BaseModel

from llmbridge import __version__
from llmbridge.dialects.anthropic import types as anthropic
from llmbridge.dialects.framing import dumps
from llmbridge.dialects.gemini import types as gemini
from llmbridge.dialects.interactions import types as interactions
from llmbridge.dialects.ollama import types as ollama
from llmbridge.dialects.openai import types as openai
from llmbridge.dialects.responses import types as responses
from llmbridge.gateway.metrics import CONTENT_TYPE_LATEST
from llmbridge.web.auth import OPEN_PATHS
from llmbridge.web.render import Dialect, dialect_for_path

__all__ = ["OPENAPI_PATH", "openapi_document", "openapi_json"]

OPENAPI_PATH = "/openapi.json"

JSON = dict[str, Any]

_PREFIX = {
    Dialect.OLLAMA: "Ollama",
    Dialect.OPENAI: "OpenAI",
    Dialect.ANTHROPIC: "Anthropic",
    Dialect.GEMINI: "Gemini",
}
_NDJSON = "application/x-ndjson"
_SSE = "text/event-stream"


_SECURITY: list[JSON] = [{"bearer": []}, {"apiKey": []}]


def _ref(name: str) -> JSON:
    return {"$ref": f"#/components/schemas/{name}"}


def _obj(required: tuple[str, ...] = (), **properties: JSON) -> JSON:
    """An object with these properties (``required`` of them always present); more allowed."""
    schema: JSON = {"type": "object", "properties": properties}
    if required:
        schema["required"] = list(required)
    return schema


_STR: JSON = {"type": "string"}
_INT: JSON = {"type": "integer"}
_BOOL: JSON = {"type": "boolean"}
_ARRAY: JSON = {"type": "array"}
_OBJECT: JSON = {"type": "object"}
_NUMBER: JSON = {"type": "number"}
_VECTORS: JSON = {"type": "array", "items": {"type": "array", "items": {"type": "number"}}}

# -- error bodies (dialects/*/errors.py) ------------------------------------------------

_ERROR_SCHEMAS: dict[str, JSON] = {
    "OllamaError": _obj(("error",), error=_STR),
    "OpenAIError": _obj(
        ("error",),
        error=_obj(
            ("message", "type", "param", "code"),
            message=_STR,
            type=_STR,
            param={"type": ["string", "null"]},
            code={"type": ["string", "null"]},
        ),
    ),
    "AnthropicError": _obj(
        ("type", "error", "request_id"),
        type={"const": "error"},
        error=_obj(("type", "message"), type=_STR, message=_STR),
        request_id=_STR,
    ),
    "GeminiError": _obj(
        ("error",),
        error=_obj(
            ("code", "message", "status"),
            code=_INT,
            message=_STR,
            status=_STR,
            details=_ARRAY,
        ),
    ),
}

# -- replies (loose: the keys clients read) ---------------------------------------------

_REPLY_SCHEMAS: dict[str, JSON] = {
    "OllamaChatResponse": _obj(
        ("model", "created_at", "message", "done"),
        model=_STR,
        created_at=_STR,
        message=_obj(("role", "content"), role=_STR, content=_STR),
        done=_BOOL,
        done_reason=_STR,
    ),
    "OllamaGenerateResponse": _obj(
        ("model", "created_at", "response", "done"),
        model=_STR,
        created_at=_STR,
        response=_STR,
        done=_BOOL,
        done_reason=_STR,
    ),
    "OllamaModelList": _obj(
        ("models",), models={"type": "array", "items": _obj(("name", "model"), name=_STR)}
    ),
    "OllamaShowResponse": _obj(("details", "model_info", "capabilities"), details=_OBJECT),
    "OllamaVersion": _obj(("version",), version=_STR),
    "OllamaEmbedResponse": _obj(("model", "embeddings"), model=_STR, embeddings=_VECTORS),
    "OllamaEmbeddingResponse": _obj(
        ("embedding",), embedding={"type": "array", "items": {"type": "number"}}
    ),
    "OllamaProgress": _obj(("status",), status=_STR, digest=_STR, total=_INT, completed=_INT),
    "OpenAIChatCompletion": _obj(
        ("id", "object", "created", "model", "choices"),
        id=_STR,
        object={"const": "chat.completion"},
        created=_INT,
        model=_STR,
        choices=_ARRAY,
        usage=_OBJECT,
    ),
    "OpenAIModel": _obj(
        ("id", "object", "created", "owned_by"),
        id=_STR,
        object={"const": "model"},
        created=_INT,
        owned_by=_STR,
    ),
    "OpenAIModelList": _obj(
        ("object", "data"),
        object={"const": "list"},
        data={"type": "array", "items": _ref("OpenAIModel")},
    ),
    "OpenAIEmbeddingList": _obj(
        ("object", "data", "model", "usage"),
        object={"const": "list"},
        data={"type": "array", "items": _obj(("object", "index", "embedding"))},
        model=_STR,
        usage=_OBJECT,
    ),
    "OpenAICompletion": _obj(
        ("id", "object", "created", "model", "choices"),
        id=_STR,
        object={"const": "text_completion"},
        created=_INT,
        model=_STR,
        choices={
            "type": "array",
            "items": _obj(("text", "index", "finish_reason"), text=_STR, index=_INT),
        },
        usage=_OBJECT,
    ),
    "AnthropicMessage": _obj(
        ("id", "type", "role", "model", "content", "stop_reason", "usage"),
        id=_STR,
        type={"const": "message"},
        role={"const": "assistant"},
        model=_STR,
        content=_ARRAY,
        stop_reason={"type": ["string", "null"]},
        usage=_OBJECT,
    ),
    "AnthropicTokenCount": _obj(("input_tokens",), input_tokens=_INT),
    "OpenAIResponse": _obj(
        ("id", "object", "created_at", "status", "model", "output"),
        id=_STR,
        object={"const": "response"},
        created_at=_INT,
        status={"enum": ["completed", "incomplete", "failed", "in_progress"]},
        model=_STR,
        output=_ARRAY,
        usage={"type": ["object", "null"]},
    ),
    "OpenAIResponseDeleted": _obj(
        ("id", "object", "deleted"),
        id=_STR,
        object={"const": "response.deleted"},
        deleted={"const": True},
    ),
    "OpenAICompactedResponse": _obj(
        ("id", "object", "created_at", "output", "usage"),
        id=_STR,
        object={"const": "response.compaction"},
        created_at=_INT,
        output=_ARRAY,
        usage=_OBJECT,
    ),
    "OpenAIInputTokens": _obj(
        ("object", "input_tokens"), object={"const": "response.input_tokens"}, input_tokens=_INT
    ),
    "GeminiGenerateContentResponse": _obj(
        ("candidates",),
        candidates={
            "type": "array",
            "items": _obj(("content",), content=_obj(("parts",), role=_STR, parts=_ARRAY)),
        },
        usageMetadata=_OBJECT,
        modelVersion=_STR,
        responseId=_STR,
    ),
    "GeminiCountTokensResponse": _obj(("totalTokens",), totalTokens=_INT),
    "GeminiEmbedContentResponse": _obj(
        ("embedding",), embedding=_obj(("values",), values={"type": "array", "items": _NUMBER})
    ),
    "GeminiBatchEmbedContentsResponse": _obj(
        ("embeddings",),
        embeddings={
            "type": "array",
            "items": _obj(("values",), values={"type": "array", "items": _NUMBER}),
        },
    ),
    "GeminiModel": _obj(
        ("name", "supportedGenerationMethods"),
        name=_STR,
        displayName=_STR,
        inputTokenLimit=_INT,
        outputTokenLimit=_INT,
        supportedGenerationMethods={"type": "array", "items": _STR},
    ),
    "GeminiModelList": _obj(
        ("models",),
        models={"type": "array", "items": _ref("GeminiModel")},
        nextPageToken=_STR,
    ),
    "Interaction": _obj(
        ("id", "object", "status", "model", "steps"),
        id=_STR,
        object={"const": "interaction"},
        status={"enum": ["completed", "requires_action", "incomplete", "failed"]},
        model=_STR,
        steps=_ARRAY,
        usage=_OBJECT,
    ),
    "InteractionDeleted": {"type": "object", "maxProperties": 0},
    "Health": _obj(  # without a valid key (when keys are configured): the status alone
        ("status",),
        status={"enum": ["up", "degraded", "down"]},
        version=_STR,
        uptime_s={"type": "number"},
        backends=_OBJECT,
    ),
}

# (method, path, operationId, summary, request body type, reply schema, streamed as)
_Operation = tuple[str, str, str, str, type[BaseModel] | None, str | None, str | None]

_OPERATIONS: tuple[_Operation, ...] = (
    ("get", "/", "root", "Liveness: the text 'Ollama is running'.", None, None, None),
    ("head", "/", "rootHead", "Liveness without a body.", None, None, None),
    ("get", "/api/hello", "hello", "Reachability, as Claude Code probes it: empty.", None,
     None, None),
    ("head", "/api/hello", "helloHead", "Claude Code's reachability probe.", None, None, None),
    ("get", "/health", "health", "Backend reachability (503 when none).", None, "Health", None),
    ("get", "/metrics", "metrics", "Prometheus metrics.", None, None, None),
    ("get", OPENAPI_PATH, "openapi", "This document.", None, None, None),
    ("post", "/api/chat", "ollamaChat", "Ollama chat.", ollama.ChatRequestBody,
     "OllamaChatResponse", _NDJSON),
    ("post", "/api/generate", "ollamaGenerate", "Ollama completion.", ollama.GenerateRequestBody,
     "OllamaGenerateResponse", _NDJSON),
    ("get", "/api/tags", "ollamaTags", "Models served.", None, "OllamaModelList", None),
    ("head", "/api/tags", "ollamaTagsHead", "Models served, no body.", None, None, None),
    ("post", "/api/show", "ollamaShow", "One model's details.", ollama.ShowRequestBody,
     "OllamaShowResponse", None),
    ("get", "/api/ps", "ollamaPs", "Models loaded.", None, "OllamaModelList", None),
    ("get", "/api/version", "ollamaVersion", "The Ollama API version.", None, "OllamaVersion",
     None),
    ("head", "/api/version", "ollamaVersionHead", "The version, no body.", None, None, None),
    ("post", "/api/embed", "ollamaEmbed", "Ollama embeddings.", ollama.EmbedRequestBody,
     "OllamaEmbedResponse", None),
    ("post", "/api/embeddings", "ollamaEmbeddings", "Ollama embedding of one prompt.",
     ollama.EmbeddingsRequestBody, "OllamaEmbeddingResponse", None),
    # Model management: forwarded to the Ollama server that serves the model.
    ("post", "/api/pull", "ollamaPull", "Pull a model (its Ollama server's progress).",
     ollama.PullRequestBody, "OllamaProgress", _NDJSON),
    ("post", "/api/push", "ollamaPush", "Push a model (its Ollama server's progress).",
     ollama.PushRequestBody, "OllamaProgress", _NDJSON),
    ("post", "/api/create", "ollamaCreate", "Create a model on an Ollama server.",
     ollama.CreateRequestBody, "OllamaProgress", _NDJSON),
    ("post", "/api/copy", "ollamaCopy", "Copy a model on its Ollama server: an empty 200.",
     ollama.CopyRequestBody, None, None),
    ("delete", "/api/delete", "ollamaDelete", "Delete a model on its Ollama server: an empty 200.",
     ollama.DeleteRequestBody, None, None),
    ("post", "/v1/chat/completions", "openaiChatCompletions", "OpenAI chat completion.",
     openai.ChatCompletionRequestBody, "OpenAIChatCompletion", _SSE),
    ("get", "/v1/models", "openaiModels", "Models served.", None, "OpenAIModelList", None),
    ("get", "/v1/models/{model_id}", "openaiModel", "One model (listed or servable).", None,
     "OpenAIModel", None),
    ("post", "/v1/embeddings", "openaiEmbeddings", "OpenAI embeddings.",
     openai.EmbeddingRequestBody, "OpenAIEmbeddingList", None),
    ("post", "/v1/completions", "openaiCompletions", "OpenAI legacy completion (FIM: suffix).",
     openai.CompletionRequestBody, "OpenAICompletion", _SSE),
    ("post", "/v1/responses", "openaiResponses",
     "OpenAI Responses (stored unless store is false, with the agent store on).",
     responses.ResponsesRequestBody, "OpenAIResponse", _SSE),
    ("get", "/v1/responses/{response_id}", "openaiResponsesRetrieve",
     "A stored response (the caller's key's own).", None, "OpenAIResponse", None),
    ("delete", "/v1/responses/{response_id}", "openaiResponsesDelete",
     "Delete a stored response (the caller's key's own).", None, "OpenAIResponseDeleted",
     None),
    ("post", "/v1/responses/input_tokens", "openaiResponsesInputTokens",
     "Responses input token count.", responses.InputTokensRequestBody, "OpenAIInputTokens",
     None),
    ("post", "/v1/responses/compact", "openaiResponsesCompact",
     "Compact a conversation: its user messages, then one compaction item.",
     responses.ResponsesRequestBody, "OpenAICompactedResponse", None),
    ("post", "/v1/messages", "anthropicMessages", "Anthropic Messages.",
     anthropic.MessagesRequestBody, "AnthropicMessage", _SSE),
    ("post", "/v1/messages/count_tokens", "anthropicCountTokens", "Anthropic token count.",
     anthropic.CountTokensRequestBody, "AnthropicTokenCount", None),
    ("get", "/v1beta/models", "geminiModels", "Models served (pageSize, pageToken).", None,
     "GeminiModelList", None),
    ("get", "/v1beta/models/{model_id}", "geminiModel", "One model (listed or servable).", None,
     "GeminiModel", None),
    *(
        op
        for version, suffix in (("/v1beta", ""), ("/v1", "V1"))
        for op in (
            ("post", f"{version}/models/{{model}}:generateContent",
             f"geminiGenerateContent{suffix}", "Gemini generateContent.",
             gemini.GenerateContentRequest, "GeminiGenerateContentResponse", None),
            ("post", f"{version}/models/{{model}}:streamGenerateContent",
             f"geminiStreamGenerateContent{suffix}",
             "Gemini streamGenerateContent: SSE with alt=sse, else one JSON array.",
             gemini.GenerateContentRequest, "GeminiGenerateContentResponse", _SSE),
            ("post", f"{version}/models/{{model}}:countTokens", f"geminiCountTokens{suffix}",
             "Gemini token count.", gemini.CountTokensRequest, "GeminiCountTokensResponse",
             None),
            ("post", f"{version}/models/{{model}}:embedContent", f"geminiEmbedContent{suffix}",
             "Gemini embedding of one text.", gemini.EmbedContentRequest,
             "GeminiEmbedContentResponse", None),
            ("post", f"{version}/models/{{model}}:batchEmbedContents",
             f"geminiBatchEmbedContents{suffix}", "Gemini embeddings of several texts.",
             gemini.BatchEmbedContentsRequest, "GeminiBatchEmbedContentsResponse", None),
            ("post", f"{version}/interactions", f"interactionsCreate{suffix}",
             "Google Interactions create (stored unless store is false).",
             interactions.CreateInteractionRequest, "Interaction", _SSE),
            ("get", f"{version}/interactions/{{interaction_id}}", f"interactionsGet{suffix}",
             "A stored interaction (the caller's key's own; include_input, stream).", None,
             "Interaction", _SSE),
            ("delete", f"{version}/interactions/{{interaction_id}}",
             f"interactionsDelete{suffix}",
             "Delete a stored interaction (the caller's key's own): 200 with {}.", None,
             "InteractionDeleted", None),
        )
    ),
)  # fmt: skip


# The Responses API's wire types share names with chat completions' (``FunctionTool``).
_BODY_PREFIX: dict[type[BaseModel], str] = {
    responses.ResponsesRequestBody: "OpenAIResponses",
    responses.InputTokensRequestBody: "OpenAIResponses",
    # The Interactions API shares Gemini's errors and routes' prefix, not its names.
    interactions.CreateInteractionRequest: "Interactions",
}


def _body_schema(model: type[BaseModel], dialect: Dialect, schemas: JSON) -> JSON:
    """``model``'s JSON Schema with its ``$defs`` moved into ``schemas`` (prefixed)."""
    prefix = _BODY_PREFIX.get(model, _PREFIX[dialect])
    schema = model.model_json_schema(ref_template=f"#/components/schemas/{prefix}{{model}}")
    for name, definition in schema.pop("$defs", {}).items():
        if schemas.setdefault(prefix + name, definition) != definition:
            raise ValueError(f"two different {prefix}{name} schemas")
    schemas[prefix + model.__name__] = schema
    return _ref(prefix + model.__name__)


def _stream_item(media_type: str, dialect: Dialect, reply: str | None) -> JSON:
    """A stream: NDJSON as the array of its records (the last one ``done``, or an
    error; a model-management route's progress lines); SSE as one event (Anthropic's
    are named, and their data is JSON)."""
    if media_type == _NDJSON:
        frame = _obj(("model", "created_at", "done"), model=_STR, created_at=_STR, done=_BOOL)
        if reply == "OllamaProgress":
            frame = _ref(reply)
        return {"type": "array", "items": {"anyOf": [frame, _ref("OllamaError")]}}
    if dialect is Dialect.ANTHROPIC:
        json_data = {"type": "string", "contentMediaType": "application/json"}
        return _obj(("event", "data"), event=_STR, data=json_data)
    if reply == "Interaction":  # named events, their data JSON, then "data: [DONE]"
        return _obj(("data",), event=_STR, data=_STR)
    if dialect is Dialect.GEMINI:  # every event's data is JSON; no [DONE]
        return _obj(("data",), data={"type": "string", "contentMediaType": "application/json"})
    return _obj(("data",), data=_STR)  # OpenAI's last event is "data: [DONE]"


def _operation(op: _Operation, schemas: JSON) -> JSON:
    method, path, operation_id, summary, body, reply, streamed = op
    dialect = dialect_for_path(path)
    ok: JSON = {"description": "Success."}
    if path.endswith(":streamGenerateContent") and streamed is not None:
        # Always streamed: SSE with ?alt=sse, else one JSON array of the same objects
        # (the error object last when the stream fails), which the Google SDKs read.
        element = {"anyOf": [_ref(reply or ""), _ref("GeminiError")]}
        ok["description"] = "Success: server-sent events with alt=sse, else a JSON array."
        ok["content"] = {
            "application/json": {"schema": {"type": "array", "items": element}},
            streamed: {"schema": _stream_item(streamed, dialect, reply)},
        }
    elif reply is not None:
        ok["content"] = {"application/json": {"schema": _ref(reply)}}
        if streamed is not None:
            kind = "NDJSON lines" if streamed == _NDJSON else "server-sent events"
            ok["description"] = f"Success: one JSON object, or {kind} when streaming."
            ok["content"][streamed] = {"schema": _stream_item(streamed, dialect, reply)}
    elif method == "get" and path == "/":
        ok["content"] = {"text/plain": {"schema": {"const": "Ollama is running"}}}
    elif method == "get" and path == "/metrics":
        ok["content"] = {CONTENT_TYPE_LATEST.split(";")[0]: {"schema": _STR}}
    elif method == "get" and path == OPENAPI_PATH:
        ok["content"] = {"application/json": {"schema": _OBJECT}}
    error = {"$ref": f"#/components/responses/{_PREFIX[dialect]}Error"}
    operation: JSON = {
        "operationId": operation_id,
        "summary": summary,
        "tags": [dialect.value if path.startswith(("/api/", "/v1/", "/v1beta/")) else "system"],
        "responses": {"200": ok, "4XX": error, "5XX": error},
    }
    if path == "/health":
        operation["responses"]["503"] = {
            "description": "No backend is reachable.",
            "content": {"application/json": {"schema": _ref("Health")}},
        }
    for name in ("model_id", "response_id", "interaction_id", "model"):
        if "{" + name + "}" in path:
            operation["parameters"] = [
                {"name": name, "in": "path", "required": True, "schema": _STR}
            ]
    if method == "get" and path.endswith("/{interaction_id}"):
        operation["parameters"] += [
            {"name": flag, "in": "query", "required": False, "schema": {"enum": ["true", "false"]}}
            for flag in ("include_input", "stream")
        ]
    if path.endswith(":streamGenerateContent") and streamed is not None:
        alt = {"name": "alt", "in": "query", "required": False, "schema": {"enum": ["sse", "json"]}}
        operation["parameters"].append(alt)
    if body is not None:
        operation["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": _body_schema(body, dialect, schemas)}},
        }
    if path in OPEN_PATHS:
        operation["security"] = []
    elif dialect is Dialect.GEMINI:
        # Gemini clients' own ways too. Not on OpenAI's GET /v1/models: with them it is
        # Gemini's list (routes/gemini.py), a reply that operation does not describe.
        operation["security"] = [{"googApiKey": []}, {"keyQuery": []}, *_SECURITY]
    return operation


def _build() -> JSON:
    schemas: JSON = {**_ERROR_SCHEMAS, **_REPLY_SCHEMAS}
    paths: JSON = {}
    for op in _OPERATIONS:
        paths.setdefault(op[1], {})[op[0]] = _operation(op, schemas)
    responses = {
        f"{prefix}Error": {
            "description": f"An error, in {dialect.value.capitalize()}'s shape.",
            "content": {"application/json": {"schema": _ref(f"{prefix}Error")}},
        }
        for dialect, prefix in _PREFIX.items()
    }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "llmbridge",
            "version": __version__,
            "description": (
                "An Ollama / OpenAI / Anthropic / Gemini API gateway. Errors come in the "
                "dialect of the path: /api/* Ollama, /v1/messages* Anthropic, /v1beta/* "
                "and /v1/models/{model}:{method} Gemini, everything else OpenAI. With API "
                "keys configured, every path but / and /health needs 'Authorization: "
                "Bearer <key>', 'x-api-key: <key>', 'x-goog-api-key: <key>' or "
                "'?key=<key>'. Every GET route also answers HEAD."
            ),
        },
        "paths": paths,
        "components": {
            "schemas": dict(sorted(schemas.items())),
            "responses": responses,
            "securitySchemes": {
                "bearer": {"type": "http", "scheme": "bearer"},
                "apiKey": {"type": "apiKey", "in": "header", "name": "x-api-key"},
                "googApiKey": {"type": "apiKey", "in": "header", "name": "x-goog-api-key"},
                "keyQuery": {"type": "apiKey", "in": "query", "name": "key"},
            },
        },
        "security": _SECURITY,
    }


@cache
def _document() -> JSON:
    return _build()


@cache
def openapi_json() -> bytes:
    """The document as served (built on first use, then kept)."""
    return dumps(_document())


def openapi_document() -> JSON:
    """A copy of the document, for callers that change it."""
    return copy.deepcopy(_document())
