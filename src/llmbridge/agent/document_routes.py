"""The agent API's documents (docs/AGENT.md): added, listed, searched, read, edited and
deleted (``agent.documents.DocumentStore``), JSON in and out, under the same guard,
ownership rules and errors as the rest of ``/agent/`` (``agent.routes``' docstring
says them).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmbridge.agent.api import DocumentIn, DocumentPatch, document_view, hit_view, parse
from llmbridge.agent.route_plumbing import (
    int_query,
    json_response,
    page_of,
    read_body,
    route,
    runtime_of,
)
from llmbridge.core.errors import InvalidRequestError, NotFoundError

__all__ = ["document_routes"]


async def create_document(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(DocumentIn, await read_body(request))
    documents = runtime.documents
    document_id = await documents.add(body.title, body.content, source=body.source, owner=owner)
    return json_response(document_view(await documents.get(document_id, owner=owner)), 201)


async def list_documents(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    limit, offset = page_of(request)
    found = await runtime.documents.documents(owner=owner, limit=limit, offset=offset)
    return json_response({"documents": [document_view(d) for d in found]})


async def search_documents(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    query = request.query_params.get("q", "")
    if not query.strip():
        raise InvalidRequestError("q: a search query is required", param="q")
    limit = int_query(request, "limit", 5, high=100)
    hits = await runtime.documents.search(query, limit=limit, owner=owner)
    return json_response({"hits": [hit_view(h) for h in hits]})


async def get_document(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    found = await runtime.documents.get(request.path_params["document_id"], owner=owner)
    return json_response(document_view(found))


async def update_document(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(DocumentPatch, await read_body(request))
    updated = await runtime.documents.update(
        request.path_params["document_id"],
        owner=owner,
        title=body.title,
        content=body.content,
        source=body.source,
    )
    return json_response(document_view(updated))


async def delete_document(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    document_id = request.path_params["document_id"]
    if not await runtime.documents.delete(document_id, owner=owner):
        raise NotFoundError(f"no document {document_id}")
    return Response(status_code=204)


document_routes = [
    route("/agent/documents", create_document, "POST"),
    route("/agent/documents", list_documents, "GET"),
    route("/agent/documents/search", search_documents, "GET"),
    route("/agent/documents/{document_id:int}", get_document, "GET"),
    route("/agent/documents/{document_id:int}", update_document, "PATCH"),
    route("/agent/documents/{document_id:int}", delete_document, "DELETE"),
]
