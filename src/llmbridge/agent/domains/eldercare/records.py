"""``EldercareRecords``: the eldercare domain's reads and writes, on the agent store's
transactions.

It writes and reads patients, caregivers, medications (with their schedules and side
effects), vitals and appointments by field mappings (the HTTP API's CRUD:
``create_patient`` ... , ``create_record(kind, ...)`` ...), scoped by ``owner``
(``agent.store.access``): a key sees its own patients and the shared ones, changes
only its own, and a patient's records follow the patient; ``get_patient`` and
``get_record`` raise ``NotFoundError`` for one the caller cannot see. (Typed writers
for tests are in ``tests/agent/factories.py``.)

A patient is the subject of the sessions about them (``sessions.subject_id``, no
foreign key since migration 0010): ``check_subject`` is what refuses a session naming a
patient the caller cannot see (404), and ``delete_patient`` clears the subject of
their sessions and facts in the same transaction, as the key's ``ON DELETE SET NULL``
did before.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any, cast

from sqlalchemy import select, update
from sqlalchemy.ext.asyncio import AsyncSession

from llmbridge.agent.domains.eldercare.tables import (
    Appointment,
    Caregiver,
    Medication,
    Patient,
    PatientRecordRow,
    Vital,
)
from llmbridge.agent.store import AgentStore
from llmbridge.agent.store.access import check_writable, sees, visible_to
from llmbridge.core.errors import NotFoundError
from llmbridge.store.tables import Base, Fact, SessionRow, utcnow

__all__ = ["RECORD_KINDS", "EldercareRecords"]

RECORD_KINDS: dict[str, type[PatientRecordRow]] = {
    "caregivers": Caregiver,
    "medications": Medication,
    "vitals": Vital,
    "appointments": Appointment,
}
"""A patient's records by their API name."""

_ORDER: dict[str, tuple[Any, ...]] = {
    "caregivers": (Caregiver.is_primary.desc(), Caregiver.id),
    "medications": (Medication.id,),
    "vitals": (Vital.measured_at.desc(), Vital.id.desc()),
    "appointments": (Appointment.scheduled_at, Appointment.id),
}
_FIXED = frozenset({"id", "patient_id", "owner", "created_at"})
"""Columns that no caller sets through the field-mapping CRUD."""


class EldercareRecords:
    """Reads and writes of the eldercare tables."""

    def __init__(self, store: AgentStore) -> None:
        self.store = store

    # -- CRUD by field mappings (the HTTP API; fields are validated by the caller) ----

    async def patients(
        self, *, owner: str | None = None, limit: int = 100, offset: int = 0
    ) -> list[dict[str, Any]]:
        """The patients ``owner`` may see, oldest first."""
        query = (
            select(Patient)
            .where(visible_to(Patient.owner, owner))
            .order_by(Patient.id)
            .limit(limit)
            .offset(offset)
        )
        async with self.store.reading() as db:
            return [_fields(row) for row in await db.scalars(query)]

    async def get_patient(self, patient_id: int, *, owner: str | None = None) -> dict[str, Any]:
        async with self.store.reading() as db:
            return _fields(await _patient(db, patient_id, owner))

    async def create_patient(
        self, fields: Mapping[str, Any], *, owner: str | None = None
    ) -> dict[str, Any]:
        row = Patient(**_settable(Patient, fields), created_at=utcnow(), owner=owner)
        async with self.store.writing() as db:
            db.add(row)
            await db.flush()
            return _fields(row)

    async def update_patient(
        self, patient_id: int, fields: Mapping[str, Any], *, owner: str | None = None
    ) -> dict[str, Any]:
        async with self.store.writing() as db:
            row = await _patient(db, patient_id, owner, write=True)
            for name, value in _settable(Patient, fields).items():
                setattr(row, name, value)
            await db.flush()
            return _fields(row)

    async def check_subject(self, patient_id: int, *, owner: str | None = None) -> None:
        """``NotFoundError`` unless ``owner`` may see patient ``patient_id``: what a
        session may name as its subject."""
        await self.get_patient(patient_id, owner=owner)

    async def delete_patient(self, patient_id: int, *, owner: str | None = None) -> None:
        """Delete a patient with all their records; sessions about them keep going
        without a subject, and their facts stay in their own session only."""
        async with self.store.writing() as db:
            row = await _patient(db, patient_id, owner, write=True)
            for table in (SessionRow, Fact):
                await db.execute(
                    update(table).where(table.subject_id == patient_id).values(subject_id=None)
                )
            await db.delete(row)

    async def records(
        self,
        kind: str,
        patient_id: int,
        *,
        owner: str | None = None,
        limit: int = 100,
        offset: int = 0,
    ) -> list[dict[str, Any]]:
        """A patient's records of ``kind`` (vitals newest first, appointments by date)."""
        model = _kind(kind)
        async with self.store.reading() as db:
            await _patient(db, patient_id, owner)
            query = (
                select(model)
                .where(model.patient_id == patient_id)
                .order_by(*_ORDER[kind])
                .limit(limit)
                .offset(offset)
            )
            return [_fields(row) for row in await db.scalars(query)]

    async def get_record(
        self, kind: str, patient_id: int, record_id: int, *, owner: str | None = None
    ) -> dict[str, Any]:
        async with self.store.reading() as db:
            return _fields(await _record(db, kind, patient_id, record_id, owner))

    async def create_record(
        self,
        kind: str,
        patient_id: int,
        fields: Mapping[str, Any],
        *,
        owner: str | None = None,
    ) -> dict[str, Any]:
        model = _kind(kind)
        values = _settable(model, fields)
        if model is Vital and values.get("measured_at") is None:
            values["measured_at"] = utcnow()
        async with self.store.writing() as db:
            await _patient(db, patient_id, owner, write=True)
            row = model(**values, patient_id=patient_id)
            db.add(row)
            await db.flush()
            return _fields(row)

    async def update_record(
        self,
        kind: str,
        patient_id: int,
        record_id: int,
        fields: Mapping[str, Any],
        *,
        owner: str | None = None,
    ) -> dict[str, Any]:
        model = _kind(kind)
        async with self.store.writing() as db:
            row = await _record(db, kind, patient_id, record_id, owner, write=True)
            for name, value in _settable(model, fields).items():
                setattr(row, name, value)
            await db.flush()
            return _fields(row)

    async def delete_record(
        self, kind: str, patient_id: int, record_id: int, *, owner: str | None = None
    ) -> None:
        async with self.store.writing() as db:
            row = await _record(db, kind, patient_id, record_id, owner, write=True)
            await db.delete(row)


def _kind(kind: str) -> type[PatientRecordRow]:
    model = RECORD_KINDS.get(kind)
    if model is None:
        raise NotFoundError(f"no kind of patient record {kind!r}: one of {sorted(RECORD_KINDS)}")
    return model


def _settable(model: type[Base], fields: Mapping[str, Any]) -> dict[str, Any]:
    columns = {c.key for c in model.__table__.columns} - _FIXED
    unknown = set(fields) - columns
    if unknown:
        raise ValueError(f"{model.__tablename__} have no field(s) {sorted(unknown)}")
    return {k: list(v) if isinstance(v, tuple) else v for k, v in fields.items()}


def _fields(row: Base) -> dict[str, Any]:
    """A row as a plain mapping of its columns (timestamps in UTC, as stored, also
    for a row just written from a naive value)."""
    fields = {c.key: getattr(row, c.key) for c in row.__table__.columns}
    for name, value in fields.items():
        if isinstance(value, datetime):
            fields[name] = (
                value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)
            )
    return fields


async def _patient(
    db: AsyncSession, patient_id: int, owner: str | None, *, write: bool = False
) -> Patient:
    row = await db.get(Patient, patient_id)
    if row is None or not sees(row.owner, owner, shared=True):
        raise NotFoundError(f"no patient {patient_id}")
    if write:
        check_writable(row.owner, owner, f"patient {patient_id}")
    return row


async def _record(
    db: AsyncSession,
    kind: str,
    patient_id: int,
    record_id: int,
    owner: str | None,
    *,
    write: bool = False,
) -> PatientRecordRow:
    model = _kind(kind)
    await _patient(db, patient_id, owner, write=write)
    row = cast(PatientRecordRow | None, await db.get(model, record_id))
    if row is None or row.patient_id != patient_id:
        raise NotFoundError(f"no {kind} record {record_id} for patient {patient_id}")
    return row
