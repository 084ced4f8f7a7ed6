"""The agent API's documents and eldercare records (docs/AGENT.md): documents
(added, listed, searched, read, edited, deleted) and patients with their records
(caregivers, medications, vitals, appointments: ``agent.domains.eldercare.records.RECORD_KINDS``),
JSON in and out, under the same guard, ownership rules and errors as the rest of
``/agent/`` (``agent.routes``' docstring says them).
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmbridge.agent.api import (
    RECORD_BODIES,
    DocumentIn,
    DocumentPatch,
    PatientIn,
    document_view,
    hit_view,
    parse,
    record_view,
)
from llmbridge.agent.domains.eldercare.records import RECORD_KINDS
from llmbridge.agent.route_plumbing import (
    int_query,
    json_response,
    page_of,
    patch_fields,
    read_body,
    route,
    runtime_of,
)
from llmbridge.core.errors import InvalidRequestError, NotFoundError

__all__ = ["care_routes"]


# -- documents ------------------------------------------------------------------------


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


# -- eldercare ------------------------------------------------------------------------


async def create_patient(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    body = parse(PatientIn, await read_body(request))
    created = await runtime.eldercare.create_patient(body.model_dump(), owner=owner)
    return json_response(record_view(created), 201)


async def list_patients(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    limit, offset = page_of(request)
    found = await runtime.eldercare.patients(owner=owner, limit=limit, offset=offset)
    return json_response({"patients": [record_view(p) for p in found]})


async def get_patient(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    found = await runtime.eldercare.get_patient(request.path_params["patient_id"], owner=owner)
    return json_response(record_view(found))


async def update_patient(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    patient_id = request.path_params["patient_id"]
    raw = await read_body(request)
    current = await runtime.eldercare.get_patient(patient_id, owner=owner)
    fields = patch_fields(raw, PatientIn, current)
    updated = await runtime.eldercare.update_patient(patient_id, fields, owner=owner)
    return json_response(record_view(updated))


async def delete_patient(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    await runtime.eldercare.delete_patient(request.path_params["patient_id"], owner=owner)
    return Response(status_code=204)


def _kind(request: Request) -> str:
    kind: str = request.path_params["kind"]
    if kind not in RECORD_KINDS:
        raise NotFoundError(f"no route for {request.method} {request.url.path}")
    return kind


async def create_record(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    kind = _kind(request)
    body = parse(RECORD_BODIES[kind], await read_body(request))
    created = await runtime.eldercare.create_record(
        kind, request.path_params["patient_id"], body.model_dump(), owner=owner
    )
    return json_response(record_view(created), 201)


async def list_records(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    kind = _kind(request)
    limit, offset = page_of(request)
    found = await runtime.eldercare.records(
        kind, request.path_params["patient_id"], owner=owner, limit=limit, offset=offset
    )
    return json_response({kind: [record_view(r) for r in found]})


async def get_record(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    kind = _kind(request)
    params = request.path_params
    found = await runtime.eldercare.get_record(
        kind, params["patient_id"], params["record_id"], owner=owner
    )
    return json_response(record_view(found))


async def update_record(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    kind = _kind(request)
    params = request.path_params
    raw = await read_body(request)
    current = await runtime.eldercare.get_record(
        kind, params["patient_id"], params["record_id"], owner=owner
    )
    fields = patch_fields(raw, RECORD_BODIES[kind], current)
    updated = await runtime.eldercare.update_record(
        kind, params["patient_id"], params["record_id"], fields, owner=owner
    )
    return json_response(record_view(updated))


async def delete_record(request: Request) -> Response:
    runtime, owner = runtime_of(request)
    kind = _kind(request)
    params = request.path_params
    await runtime.eldercare.delete_record(
        kind, params["patient_id"], params["record_id"], owner=owner
    )
    return Response(status_code=204)


_PATIENT = "/agent/patients/{patient_id:int}"

care_routes = [
    route("/agent/documents", create_document, "POST"),
    route("/agent/documents", list_documents, "GET"),
    route("/agent/documents/search", search_documents, "GET"),
    route("/agent/documents/{document_id:int}", get_document, "GET"),
    route("/agent/documents/{document_id:int}", update_document, "PATCH"),
    route("/agent/documents/{document_id:int}", delete_document, "DELETE"),
    route("/agent/patients", create_patient, "POST"),
    route("/agent/patients", list_patients, "GET"),
    route(_PATIENT, get_patient, "GET"),
    route(_PATIENT, update_patient, "PATCH"),
    route(_PATIENT, delete_patient, "DELETE"),
    route(_PATIENT + "/{kind}", create_record, "POST"),
    route(_PATIENT + "/{kind}", list_records, "GET"),
    route(_PATIENT + "/{kind}/{record_id:int}", get_record, "GET"),
    route(_PATIENT + "/{kind}/{record_id:int}", update_record, "PATCH"),
    route(_PATIENT + "/{kind}/{record_id:int}", delete_record, "DELETE"),
]
