"""The JSON bodies of the eldercare routes (``routes``), on the agent API's rules
(``agent.api``: unknown fields and wrong types refused, ``parse`` naming the field,
nothing the databases cannot hold). A PATCH merges the change into the stored fields,
then validates the whole (``agent.route_plumbing.patch_fields``).
"""

from __future__ import annotations

import re
from datetime import date
from typing import Literal

from pydantic import Field, StrictBool, field_validator

from llmbridge.agent.api import Body, NameStr, ShortList, UTCDatetime

__all__ = [
    "RECORD_BODIES",
    "AppointmentIn",
    "CaregiverIn",
    "MedicationIn",
    "PatientIn",
    "VitalIn",
]

_TIME_OF_DAY = re.compile(r"^([01]\d|2[0-3]):[0-5]\d$")


class PatientIn(Body):
    name: NameStr
    birth_date: date | None = None
    conditions: ShortList = Field(default_factory=list)
    allergies: ShortList = Field(default_factory=list)
    notes: str = Field("", max_length=20_000)


class CaregiverIn(Body):
    name: NameStr
    relationship: str = Field("", max_length=100)
    phone: str | None = Field(None, max_length=50)
    is_primary: StrictBool = False


class MedicationIn(Body):
    name: NameStr
    dosage: str = Field("", max_length=100)
    frequency: str = Field("", max_length=200)
    """How often, in words ("Twice daily with meals")."""
    times: ShortList = Field(default_factory=list)
    """Times of day, ``HH:MM``."""
    purpose: str = Field("", max_length=200)
    side_effects: ShortList = Field(default_factory=list)
    prescriber: str | None = Field(None, max_length=200)
    active: StrictBool = True
    start_date: date | None = None
    end_date: date | None = None

    @field_validator("times")
    @classmethod
    def _times(cls, value: list[str]) -> list[str]:
        for item in value:
            if not _TIME_OF_DAY.match(item):
                raise ValueError(f"{item!r} is not a time of day HH:MM")
        return value


class VitalIn(Body):
    kind: str = Field(min_length=1, max_length=50)
    """``weight``, ``glucose``, ``blood_pressure``, ``heart_rate``, ``temperature``, ..."""
    value: float
    secondary_value: float | None = None
    """The diastolic value of a blood pressure."""
    unit: str = Field("", max_length=20)
    measured_at: UTCDatetime | None = None
    """Defaults to now; without an offset, UTC."""
    note: str = Field("", max_length=20_000)


class AppointmentIn(Body):
    provider: NameStr
    scheduled_at: UTCDatetime
    specialty: str = Field("", max_length=100)
    location: str = Field("", max_length=300)
    notes: str = Field("", max_length=20_000)
    status: Literal["scheduled", "completed", "cancelled"] = "scheduled"


RECORD_BODIES: dict[str, type[Body]] = {
    "caregivers": CaregiverIn,
    "medications": MedicationIn,
    "vitals": VitalIn,
    "appointments": AppointmentIn,
}
"""The body of each kind of patient record (``records.RECORD_KINDS``)."""
