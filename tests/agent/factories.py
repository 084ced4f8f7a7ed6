"""Test factories: rows written straight into an agent store, with typed arguments.

``EldercareFactory`` writes patients and their caregivers, medications, vitals and
appointments the way a test wants to spell them (``add_medication(mary, "Metformin",
dosage="500mg")``), where the product writes them only through
``agent.domains.eldercare.records.EldercareRecords``'s field-mapping CRUD (the HTTP API). Each
writer runs in one of the store's write transactions, so its failures are the
store's own ``core.errors`` (``store/errors.py``).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import date, datetime

from llmbridge.agent.domains.eldercare.tables import (
    Appointment,
    Caregiver,
    Medication,
    Patient,
    Vital,
)
from llmbridge.agent.store import AgentStore
from llmbridge.store.tables import utcnow

__all__ = ["EldercareFactory"]

EldercareRow = Patient | Caregiver | Medication | Vital | Appointment


class EldercareFactory:
    """Writers of eldercare rows for tests; each returns the new row's id."""

    def __init__(self, store: AgentStore) -> None:
        self.store = store

    async def _add(self, row: EldercareRow) -> int:
        async with self.store.writing() as db:
            db.add(row)
        return row.id

    async def add_patient(
        self,
        name: str,
        *,
        birth_date: date | None = None,
        conditions: Sequence[str] = (),
        allergies: Sequence[str] = (),
        notes: str = "",
        owner: str | None = None,
    ) -> int:
        return await self._add(
            Patient(
                name=name,
                birth_date=birth_date,
                conditions=list(conditions),
                allergies=list(allergies),
                notes=notes,
                created_at=utcnow(),
                owner=owner,
            )
        )

    async def add_caregiver(
        self,
        patient_id: int,
        name: str,
        *,
        relationship: str = "",
        phone: str | None = None,
        is_primary: bool = False,
    ) -> int:
        return await self._add(
            Caregiver(
                patient_id=patient_id,
                name=name,
                relationship=relationship,
                phone=phone,
                is_primary=is_primary,
            )
        )

    async def add_medication(
        self,
        patient_id: int,
        name: str,
        *,
        dosage: str = "",
        frequency: str = "",
        times: Sequence[str] = (),
        purpose: str = "",
        side_effects: Sequence[str] = (),
        prescriber: str | None = None,
        active: bool = True,
    ) -> int:
        return await self._add(
            Medication(
                patient_id=patient_id,
                name=name,
                dosage=dosage,
                frequency=frequency,
                times=list(times),
                purpose=purpose,
                side_effects=list(side_effects),
                prescriber=prescriber,
                active=active,
            )
        )

    async def record_vital(
        self,
        patient_id: int,
        kind: str,
        value: float,
        *,
        unit: str = "",
        secondary_value: float | None = None,
        measured_at: datetime | None = None,
        note: str = "",
    ) -> int:
        return await self._add(
            Vital(
                patient_id=patient_id,
                kind=kind,
                value=value,
                secondary_value=secondary_value,
                unit=unit,
                measured_at=measured_at or utcnow(),
                note=note,
            )
        )

    async def add_appointment(
        self,
        patient_id: int,
        provider: str,
        scheduled_at: datetime,
        *,
        specialty: str = "",
        location: str = "",
        notes: str = "",
    ) -> int:
        return await self._add(
            Appointment(
                patient_id=patient_id,
                provider=provider,
                scheduled_at=scheduled_at,
                specialty=specialty,
                location=location,
                notes=notes,
            )
        )
