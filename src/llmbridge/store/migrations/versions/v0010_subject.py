"""A session's subject: ``sessions.patient_id`` and ``facts.patient_id`` become
``subject_id`` (what the conversation is about, checked by the domain that owns
subjects, ``agent.domains``; a patient for eldercare), with every value kept.

What changes, on SQLite and PostgreSQL alike:

- both columns are renamed, their values untouched;
- their foreign keys to ``patients`` (``ON DELETE SET NULL``) are dropped: the generic
  sessions name no domain's table, and with the eldercare domain off a session may
  carry a subject no ``patients`` row has. The domain now does what the keys did:
  it refuses a session naming a patient the caller cannot see (404), and deleting a
  patient clears the ``subject_id`` of its sessions and facts in the same transaction;
- ``ix_facts_patient_id_id`` is ``ix_facts_subject_id_id`` (same columns).

On PostgreSQL each is one ``ALTER`` on the catalogue. SQLite cannot drop a constraint
in place, so ``sessions`` and ``facts`` are rebuilt (Alembic's batch mode: copy, drop,
rename); ``store.migrate`` runs migrations with SQLite's foreign keys off and checks
them before committing, as SQLite's procedure for rebuilding a table others refer to
says, since dropping ``sessions`` with them on would cascade into its messages.

Downgrading puts the columns and keys back; a subject that names no patient is set
to NULL first (the key would refuse it).

Revision ID: 0010
Revises: 0009
"""

from __future__ import annotations

from alembic import op

revision = "0010"
down_revision: str | None = "0009"
branch_labels: str | None = None
depends_on: str | None = None

_TABLES = ("sessions", "facts")


def _patient_key(table: str) -> str:
    """The key 0001 (sessions) and 0009 (facts) named by store/tables.py's NAMING."""
    return f"fk_{table}_patient_id_patients"


def upgrade() -> None:
    op.drop_index("ix_facts_patient_id_id", table_name="facts")
    for table in _TABLES:
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(_patient_key(table), type_="foreignkey")
            batch.alter_column("patient_id", new_column_name="subject_id")
    op.create_index("ix_facts_subject_id_id", "facts", ["subject_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_facts_subject_id_id", table_name="facts")
    for table in _TABLES:
        op.execute(
            f"UPDATE {table} SET subject_id = NULL WHERE subject_id IS NOT NULL "
            "AND subject_id NOT IN (SELECT id FROM patients)"
        )
        with op.batch_alter_table(table) as batch:
            batch.alter_column("subject_id", new_column_name="patient_id")
        # A second batch: in the first, SQLite's rebuild leaves out a key on a column
        # renamed in the same batch.
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(
                _patient_key(table), "patients", ["patient_id"], ["id"], ondelete="SET NULL"
            )
    op.create_index("ix_facts_patient_id_id", "facts", ["patient_id", "id"])
