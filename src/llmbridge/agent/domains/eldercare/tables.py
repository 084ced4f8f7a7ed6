"""The eldercare domain's tables, declared on the product's ``Base`` (store/tables.py):
``patients`` (with an ``owner``, ``agent.store.access``), and a patient's
``caregivers``, ``medications`` (schedule and side effects), ``vitals`` and
``appointments``, each deleted with its patient (``ON DELETE CASCADE``).

Their schema is made by the product's migrations (store/migrations, since 0001), like
every table's; importing this module puts them in ``Base.metadata``, which the test
that compares the tables with the migrations reads. Sessions and facts name a patient
by their ``subject_id`` (no foreign key: ``EldercareRecords`` checks it, and clears it
when the patient is deleted).
"""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

from sqlalchemy import JSON, Boolean, Date, Float, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from llmbridge.store.tables import Base, BigId, utcnow

__all__ = [
    "Appointment",
    "Caregiver",
    "Medication",
    "Patient",
    "PatientRecordRow",
    "Vital",
]


class Patient(Base):
    __tablename__ = "patients"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    name: Mapped[str] = mapped_column(String(200))
    birth_date: Mapped[date | None] = mapped_column(Date, default=None)
    conditions: Mapped[list[Any]] = mapped_column(JSON, default=list)
    allergies: Mapped[list[Any]] = mapped_column(JSON, default=list)
    notes: Mapped[str] = mapped_column(Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    owner: Mapped[str | None] = mapped_column(String(64), default=None, index=True)
    """The API key that created it (``agent.store.access``); ``None``: shared. A patient's
    caregivers, medications, vitals and appointments follow the patient."""


class Caregiver(Base):
    __tablename__ = "caregivers"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    patient_id: Mapped[int] = mapped_column(
        ForeignKey("patients.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    relationship: Mapped[str] = mapped_column(String(100), default="")
    phone: Mapped[str | None] = mapped_column(String(50), default=None)
    is_primary: Mapped[bool] = mapped_column(Boolean, default=False)


class Medication(Base):
    __tablename__ = "medications"

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    patient_id: Mapped[int] = mapped_column(
        ForeignKey("patients.id", ondelete="CASCADE"), index=True
    )
    name: Mapped[str] = mapped_column(String(200))
    dosage: Mapped[str] = mapped_column(String(100), default="")
    frequency: Mapped[str] = mapped_column(String(200), default="")
    """How often, in words ("Twice daily with meals")."""
    times: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """Times of day as ``HH:MM`` strings, in the patient's local time."""
    purpose: Mapped[str] = mapped_column(String(200), default="")
    side_effects: Mapped[list[Any]] = mapped_column(JSON, default=list)
    """Side effects to watch for."""
    prescriber: Mapped[str | None] = mapped_column(String(200), default=None)
    active: Mapped[bool] = mapped_column(Boolean, default=True)
    start_date: Mapped[date | None] = mapped_column(Date, default=None)
    end_date: Mapped[date | None] = mapped_column(Date, default=None)


class Vital(Base):
    __tablename__ = "vitals"
    __table_args__ = (Index("ix_vitals_patient_id_measured_at", "patient_id", "measured_at"),)

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    patient_id: Mapped[int] = mapped_column(ForeignKey("patients.id", ondelete="CASCADE"))
    kind: Mapped[str] = mapped_column(String(50))
    """``weight``, ``glucose``, ``blood_pressure``, ``heart_rate``, ``temperature``, ..."""
    value: Mapped[float] = mapped_column(Float)
    secondary_value: Mapped[float | None] = mapped_column(Float, default=None)
    """The diastolic value of a blood pressure reading."""
    unit: Mapped[str] = mapped_column(String(20), default="")
    measured_at: Mapped[datetime] = mapped_column(default=utcnow)
    note: Mapped[str] = mapped_column(Text, default="")


class Appointment(Base):
    __tablename__ = "appointments"
    __table_args__ = (
        Index("ix_appointments_patient_id_scheduled_at", "patient_id", "scheduled_at"),
    )

    id: Mapped[int] = mapped_column(BigId, primary_key=True, autoincrement=True)
    patient_id: Mapped[int] = mapped_column(ForeignKey("patients.id", ondelete="CASCADE"))
    provider: Mapped[str] = mapped_column(String(200))
    """Who the appointment is with ("Dr. Johnson")."""
    specialty: Mapped[str] = mapped_column(String(100), default="")
    location: Mapped[str] = mapped_column(String(300), default="")
    scheduled_at: Mapped[datetime] = mapped_column()
    notes: Mapped[str] = mapped_column(Text, default="")
    status: Mapped[str] = mapped_column(String(20), default="scheduled")


PatientRecordRow = Caregiver | Medication | Vital | Appointment
"""A row of one of a patient's records."""
