"""The eldercare domain's routes (docs/AGENT.md, "Domains"): patients and their
records (caregivers, medications, vitals, appointments: ``records.RECORD_KINDS``), JSON
in and out, under the same guard, ownership rules and errors as the rest of
``/agent/`` (``agent.routes``' docstring says them). ``agent.routes`` mounts them when
the domain is on (``agent.domains``); a patient's id is also what a session names as
its ``subject_id``.
"""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from llmbridge.agent.api import parse, record_view
from llmbridge.agent.domains.eldercare.api import RECORD_BODIES, PatientIn
from llmbridge.agent.domains.eldercare.domain import EldercareDomain
from llmbridge.agent.domains.eldercare.records import RECORD_KINDS, EldercareRecords
from llmbridge.agent.route_plumbing import (
    json_response,
    page_of,
    patch_fields,
    read_body,
    route,
    runtime_of,
)
from llmbridge.core.errors import NotFoundError

__all__ = ["eldercare_routes"]


def records_of(request: Request) -> tuple[EldercareRecords, str | None]:
    """The eldercare records of the agent service and the caller's identity."""
    runtime, owner = runtime_of(request)
    return runtime.domain(EldercareDomain).records, owner


async def create_patient(request: Request) -> Response:
    records, owner = records_of(request)
    body = parse(PatientIn, await read_body(request))
    created = await records.create_patient(body.model_dump(), owner=owner)
    return json_response(record_view(created), 201)


async def list_patients(request: Request) -> Response:
    records, owner = records_of(request)
    limit, offset = page_of(request)
    found = await records.patients(owner=owner, limit=limit, offset=offset)
    return json_response({"patients": [record_view(p) for p in found]})


async def get_patient(request: Request) -> Response:
    records, owner = records_of(request)
    found = await records.get_patient(request.path_params["patient_id"], owner=owner)
    return json_response(record_view(found))


async def update_patient(request: Request) -> Response:
    records, owner = records_of(request)
    patient_id = request.path_params["patient_id"]
    raw = await read_body(request)
    current = await records.get_patient(patient_id, owner=owner)
    fields = patch_fields(raw, PatientIn, current)
    updated = await records.update_patient(patient_id, fields, owner=owner)
    return json_response(record_view(updated))


async def delete_patient(request: Request) -> Response:
    records, owner = records_of(request)
    await records.delete_patient(request.path_params["patient_id"], owner=owner)
    return Response(status_code=204)


def _kind(request: Request) -> str:
    kind: str = request.path_params["kind"]
    if kind not in RECORD_KINDS:
        raise NotFoundError(f"no route for {request.method} {request.url.path}")
    return kind


async def create_record(request: Request) -> Response:
    records, owner = records_of(request)
    kind = _kind(request)
    body = parse(RECORD_BODIES[kind], await read_body(request))
    created = await records.create_record(
        kind, request.path_params["patient_id"], body.model_dump(), owner=owner
    )
    return json_response(record_view(created), 201)


async def list_records(request: Request) -> Response:
    records, owner = records_of(request)
    kind = _kind(request)
    limit, offset = page_of(request)
    found = await records.records(
        kind, request.path_params["patient_id"], owner=owner, limit=limit, offset=offset
    )
    return json_response({kind: [record_view(r) for r in found]})


async def get_record(request: Request) -> Response:
    records, owner = records_of(request)
    kind = _kind(request)
    params = request.path_params
    found = await records.get_record(kind, params["patient_id"], params["record_id"], owner=owner)
    return json_response(record_view(found))


async def update_record(request: Request) -> Response:
    records, owner = records_of(request)
    kind = _kind(request)
    params = request.path_params
    raw = await read_body(request)
    current = await records.get_record(kind, params["patient_id"], params["record_id"], owner=owner)
    fields = patch_fields(raw, RECORD_BODIES[kind], current)
    updated = await records.update_record(
        kind, params["patient_id"], params["record_id"], fields, owner=owner
    )
    return json_response(record_view(updated))


async def delete_record(request: Request) -> Response:
    records, owner = records_of(request)
    kind = _kind(request)
    params = request.path_params
    await records.delete_record(kind, params["patient_id"], params["record_id"], owner=owner)
    return Response(status_code=204)


_PATIENT = "/agent/patients/{patient_id:int}"

eldercare_routes = [
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
