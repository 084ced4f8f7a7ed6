"""``EldercareProvider``: the eldercare domain's context provider, the seed's
``EldercareContextService``.

For each input it chooses the patient (the session's subject; else patients named in
the input; else the only patient on record when the input is about care) and the
sections the input is about (medications, vitals, appointments, caregivers), by
keywords and by the patient's own medication names. A patient named without any topic
gets an overview of every section. A medication named in the input is shown with its
side effects; the others are listed briefly. Vitals are summarised per kind over the
last ``vitals_days`` days (range and latest reading); appointments are the next few.
Sections come in a fixed order: the patient, medications and caregivers (which change
only when someone edits them) before vitals and appointments (chosen by the clock),
vitals in a fixed order of kinds, so the block is the same bytes while the records
and the day are (docs/AGENT.md, "Prompt order"). The block is cut to the request's
token budget by whole lines, the patient's header first. Every query is bounded by
the patient and a ``LIMIT``, and the provider sees the patients of the turn's owner
only (``agent.store.access``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo

from sqlalchemy import select

from llmbridge.agent.context_providers import ContextRequest
from llmbridge.agent.domains.eldercare.tables import (
    Appointment,
    Caregiver,
    Medication,
    Patient,
    Vital,
)
from llmbridge.agent.store import AgentStore
from llmbridge.agent.store.access import sees, visible_to
from llmbridge.features.token_count import count_text_tokens

__all__ = ["EldercareProvider"]


def _vocabulary(words: str) -> frozenset[str]:
    return frozenset(words.split())


MEDICATION_WORDS = _vocabulary(
    "medication medications medicine medicines meds pill pills dose doses dosage drug drugs "
    "prescription prescriptions tablet tablets mg refill refills side effect effects "
    "take taking give giving"
)
VITALS_WORDS = _vocabulary(
    "vital vitals weight weigh glucose sugar blood pressure bp heart pulse temperature "
    "fever oxygen reading readings"
)
APPOINTMENT_WORDS = _vocabulary(
    "appointment appointments doctor doctors dr visit visits checkup clinic scheduled "
    "upcoming specialist cardiologist"
)
CAREGIVER_WORDS = _vocabulary("caregiver caregivers carer carers contact family")
CARE_WORDS = _vocabulary(
    "patient grandma grandmother grandpa grandfather mom mother dad father condition "
    "conditions allergy allergies allergic health care diagnosis"
)
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
GENERIC_WORDS = _vocabulary(
    "take taking give giving reading readings family contact side effect effects"
)
"""Words that pick a topic once a patient is chosen, but are too common to make an
input be about the patient on their own ("what should I take to the party")."""

VITAL_LABELS = {
    "weight": "Weight",
    "glucose": "Blood Glucose",
    "blood_pressure": "Blood Pressure",
    "heart_rate": "Heart Rate",
    "temperature": "Temperature",
    "oxygen": "Oxygen Saturation",
}


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def _number(value: float) -> str:
    return f"{value:g}"


@dataclass(frozen=True, slots=True)
class _Topics:
    medications: bool
    vitals: bool
    appointments: bool
    caregivers: bool

    @property
    def any(self) -> bool:
        return self.medications or self.vitals or self.appointments or self.caregivers


class EldercareProvider:
    """The eldercare context provider (module docstring)."""

    name = "eldercare"

    def __init__(
        self,
        store: AgentStore,
        *,
        timezone: tzinfo = UTC,
        vitals_days: int = 7,
        max_appointments: int = 3,
        max_patients: int = 2,
    ) -> None:
        self.store = store
        self.timezone = timezone
        self.vitals_days = vitals_days
        self.max_appointments = max_appointments
        self.max_patients = max_patients

    async def context(self, request: ContextRequest) -> str:
        words = _words(request.user_input)
        patients = await self._patients(request, words)
        blocks = [await self._block(patient, words, request) for patient in patients]
        return _fit("\n\n".join(b for b in blocks if b), request.budget)

    async def _patients(self, request: ContextRequest, words: set[str]) -> list[Patient]:
        async with self.store.reading() as db:
            if request.subject_id is not None:
                found = await db.get(Patient, request.subject_id)
                if found is None or not sees(found.owner, request.owner, shared=True):
                    return []
                return [found]
            everyone = list(
                await db.scalars(
                    select(Patient)
                    .where(visible_to(Patient.owner, request.owner))
                    .order_by(Patient.id)
                    .limit(1000)
                )
            )
        named = [p for p in everyone if _words(p.name) & words - {"dr", "mr", "mrs", "ms"}]
        if named:
            return named[: self.max_patients]
        care = (
            words
            & (CARE_WORDS | MEDICATION_WORDS | VITALS_WORDS | APPOINTMENT_WORDS | CAREGIVER_WORDS)
        ) - GENERIC_WORDS
        return everyone if len(everyone) == 1 and care else []

    async def _block(self, patient: Patient, words: set[str], request: ContextRequest) -> str:
        async with self.store.reading() as db:
            medications = list(
                await db.scalars(
                    select(Medication)
                    .where(Medication.patient_id == patient.id, Medication.active.is_(True))
                    .order_by(Medication.id)
                    .limit(50)
                )
            )
            caregivers = list(
                await db.scalars(
                    select(Caregiver)
                    .where(Caregiver.patient_id == patient.id)
                    .order_by(Caregiver.is_primary.desc(), Caregiver.id)
                    .limit(10)
                )
            )
            named_meds = [m for m in medications if _words(m.name) & words]
            topics = _Topics(
                medications=bool(words & MEDICATION_WORDS or named_meds),
                vitals=bool(words & VITALS_WORDS),
                appointments=bool(words & APPOINTMENT_WORDS),
                caregivers=bool(words & CAREGIVER_WORDS),
            )
            if not topics.any:  # named, or asked about in general: the overview
                topics = _Topics(True, True, True, True)
            vitals: list[Vital] = []
            if topics.vitals:
                since = request.now - timedelta(days=self.vitals_days)
                vitals = list(
                    await db.scalars(
                        select(Vital)
                        .where(Vital.patient_id == patient.id, Vital.measured_at >= since)
                        .order_by(Vital.measured_at.desc())
                        .limit(500)
                    )
                )
            appointments: list[Appointment] = []
            if topics.appointments:
                appointments = list(
                    await db.scalars(
                        select(Appointment)
                        .where(
                            Appointment.patient_id == patient.id,
                            Appointment.scheduled_at >= request.now,
                            Appointment.status == "scheduled",
                        )
                        .order_by(Appointment.scheduled_at)
                        .limit(self.max_appointments)
                    )
                )
        # The records that change only when someone edits them first, then the ones
        # chosen by the clock (this week's vitals, the next appointments): the same
        # question asked again renders the same block up to those.
        sections = [self._patient_section(patient, caregivers, request.now)]
        if topics.medications and medications:
            sections.append(_medications_section(medications, named_meds))
        if topics.caregivers and len(caregivers) > 1:
            sections.append(_caregivers_section(caregivers))
        if topics.vitals and vitals:
            sections.append(self._vitals_section(vitals))
        if topics.appointments and appointments:
            sections.append(self._appointments_section(appointments))
        return "\n\n".join(sections)

    def _patient_section(
        self, patient: Patient, caregivers: Sequence[Caregiver], now: datetime
    ) -> str:
        lines = ["Patient Information:", f"- Name: {patient.name}"]
        if patient.birth_date is not None:
            today = now.astimezone(self.timezone).date()
            born = patient.birth_date
            age = today.year - born.year - ((today.month, today.day) < (born.month, born.day))
            lines.append(f"- Age: {age}")
        if patient.conditions:
            lines.append(f"- Conditions: {', '.join(map(str, patient.conditions))}")
        if patient.allergies:
            lines.append(f"- Allergies: {', '.join(map(str, patient.allergies))}")
        primary = next((c for c in caregivers if c.is_primary), None)
        if primary is not None:
            relation = f" ({primary.relationship})" if primary.relationship else ""
            lines.append(f"- Primary Caregiver: {primary.name}{relation}")
        if patient.notes:
            lines.append(f"- Notes: {patient.notes}")
        return "\n".join(lines)

    def _vitals_section(self, vitals: Sequence[Vital]) -> str:
        by_kind: dict[str, list[Vital]] = {}
        for vital in vitals:  # newest first
            by_kind.setdefault(vital.kind, []).append(vital)
        lines = [f"Recent Vitals (Last {self.vitals_days} days):"]
        # A fixed order of kinds (VITAL_LABELS', then by name), not the order of the
        # latest readings: a new reading must not reshuffle the lines around it.
        for kind in sorted(by_kind, key=_vital_order):
            readings = by_kind[kind]
            label = VITAL_LABELS.get(kind, kind.replace("_", " ").title())
            unit = f" {readings[0].unit}" if readings[0].unit else ""
            latest = _reading(readings[0])
            if len(readings) == 1:
                lines.append(f"- {label}: {latest}{unit} ({_day(readings[0].measured_at)})")
                continue
            low = min(readings, key=lambda v: (v.value, v.secondary_value or 0))
            high = max(readings, key=lambda v: (v.value, v.secondary_value or 0))
            lines.append(
                f"- {label}: {_reading(low)}-{_reading(high)}{unit} over {len(readings)} "
                f"readings (latest {latest}{unit}, {_day(readings[0].measured_at)})"
            )
        return "\n".join(lines)

    def _appointments_section(self, appointments: Sequence[Appointment]) -> str:
        lines = ["Upcoming Appointments:"]
        for item in appointments:
            when = item.scheduled_at.astimezone(self.timezone)
            specialty = f" ({item.specialty})" if item.specialty else ""
            where = f", {item.location}" if item.location else ""
            stamp = when.strftime("%b %d, %Y at %I:%M %p").replace(" 0", " ")
            lines.append(f"- {item.provider}{specialty} - {stamp}{where}")
        return "\n".join(lines)


_VITAL_RANK = {kind: rank for rank, kind in enumerate(VITAL_LABELS)}


def _vital_order(kind: str) -> tuple[int, str]:
    return _VITAL_RANK.get(kind, len(_VITAL_RANK)), kind


def _reading(vital: Vital) -> str:
    if vital.secondary_value is not None:
        return f"{_number(vital.value)}/{_number(vital.secondary_value)}"
    return _number(vital.value)


def _day(moment: datetime) -> str:
    return moment.strftime("%b %d").replace(" 0", " ")


def _medications_section(medications: Sequence[Medication], named: Iterable[Medication]) -> str:
    detailed = {m.id for m in named} or {m.id for m in medications}
    lines = ["Current Medications:"]
    for med in medications:
        dose = f" {med.dosage}" if med.dosage else ""
        line = f"- {med.name}{dose}"
        if med.frequency:
            line += f" - {med.frequency}"
        if med.times:
            line += f" ({', '.join(map(str, med.times))})"
        if med.purpose:
            line += f" (for {med.purpose})"
        lines.append(line)
        if med.id in detailed and med.side_effects:
            lines.append(f"  Side effects to monitor: {', '.join(map(str, med.side_effects))}")
    return "\n".join(lines)


def _caregivers_section(caregivers: Sequence[Caregiver]) -> str:
    lines = ["Caregivers:"]
    for person in caregivers:
        relation = f" ({person.relationship})" if person.relationship else ""
        phone = f", {person.phone}" if person.phone else ""
        lines.append(f"- {person.name}{relation}{phone}")
    return "\n".join(lines)


def _fit(text: str, budget: int) -> str:
    """Whole lines of ``text`` within ``budget`` tokens (the header comes first)."""
    kept: list[str] = []
    used = 0
    for line in text.split("\n"):
        cost = count_text_tokens(line)
        if used + cost > budget:
            break
        kept.append(line)
        used += cost
    return "\n".join(kept).strip()
