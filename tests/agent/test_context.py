"""Documents (keyword retrieval), the eldercare provider, context providers, and the
turn's messages in their prefix-stable order (docs/AGENT.md, "Prompt order")."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta

from llmbridge.agent.context_providers import ContextRequest, gather_context
from llmbridge.agent.documents import DocumentStore, chunk_text, terms
from llmbridge.agent.domains.eldercare.provider import EldercareProvider
from llmbridge.agent.prompt import (
    FOCUS_INSTRUCTIONS,
    assemble_turn,
    build_system_prompt,
    build_turn_context,
)
from llmbridge.agent.store import AgentStore
from llmbridge.core.messages import Message, TextPart
from llmbridge.features.token_count import count_text_tokens
from tests.agent.factories import EldercareFactory

NOW = datetime(2026, 3, 10, 12, 0, tzinfo=UTC)

FALLS = """Preventing falls at home.

Remove loose rugs, add grab bars in the bathroom and keep hallways lit at night.
Night lights by the bed help most."""
DIABETES = """Managing type 2 diabetes.

Check blood glucose before breakfast. Metformin is taken with meals to limit nausea.
Report readings above 250 mg/dL to the doctor."""
HEARING = "Hearing aids need new batteries every week; clean them daily."


# -- documents -----------------------------------------------------------------------


def test_terms_fold_plurals_and_drop_stop_words() -> None:
    assert terms("The Medications and allergies of the patients, 10mg!") == [
        "medication",
        "allergy",
        "patient",
        "10mg",
    ]
    assert terms("Grüße aus Köln") == ["grüße", "aus", "köln"]


def test_chunks_respect_the_token_limit() -> None:
    text = "\n\n".join(["short paragraph"] * 5 + ["word " * 500])
    chunks = chunk_text(text, 50)
    assert all(count_text_tokens(c) <= 50 for c in chunks)
    assert chunks[0].startswith("short paragraph\n\nshort paragraph")
    assert " ".join(" ".join(chunks).split()) == " ".join(text.split())


async def test_keyword_search_ranks_by_bm25(any_store: AgentStore) -> None:
    documents = DocumentStore(any_store)
    falls = await documents.add("Falls", FALLS)
    diabetes = await documents.add("Diabetes", DIABETES)
    await documents.add("Hearing", HEARING)
    hits = await documents.search("When is metformin taken? Glucose readings?")
    assert [h.document_id for h in hits] == [diabetes]
    assert "Metformin is taken with meals" in hits[0].content and hits[0].score > 0
    night = await documents.search("night lights for falls")
    assert night[0].document_id == falls
    assert await documents.search("quantum chromodynamics") == []
    assert await documents.search("the and of") == []  # stop words only
    scoped = await documents.search("glucose", document_ids=[falls])
    assert scoped == []
    assert [d[1] for d in await documents.list_documents()] == ["Falls", "Diabetes", "Hearing"]
    assert await documents.delete(diabetes)
    assert await documents.search("metformin") == []


async def test_document_context_fits_the_budget(store: AgentStore) -> None:
    documents = DocumentStore(store)
    big = await documents.add("Manual", "\n\n".join(f"glucose note {i} " * 30 for i in range(20)))
    hearing = await documents.add("Hearing", HEARING)
    text = await documents.document_context("glucose", budget=300)
    assert text.startswith("Reference documents") and "[Manual]" in text
    assert count_text_tokens(text) <= 300
    # Attached documents with no matching passage still contribute their opening.
    attached = await documents.document_context("glucose", document_ids=[hearing])
    assert "[Hearing]\nHearing aids need new batteries" in attached
    assert await documents.document_context("unrelated words") == ""
    assert big != hearing


# -- eldercare -----------------------------------------------------------------------


async def _mary(store: AgentStore) -> int:
    records = EldercareFactory(store)
    mary = await records.add_patient(
        "Mary Smith",
        birth_date=date(1943, 6, 1),
        conditions=["Hypertension", "Type 2 Diabetes"],
        allergies=["Penicillin"],
    )
    await records.add_caregiver(mary, "John Smith", relationship="Grandson", is_primary=True)
    await records.add_caregiver(mary, "Ana Ruiz", relationship="Nurse", phone="555-0100")
    await records.add_medication(
        mary,
        "Lisinopril",
        dosage="10mg",
        frequency="Once daily",
        times=["08:00"],
        purpose="hypertension",
        side_effects=["Dizziness", "Dry cough"],
    )
    await records.add_medication(
        mary,
        "Metformin",
        dosage="500mg",
        frequency="Twice daily with meals",
        purpose="diabetes",
        side_effects=["Nausea", "Diarrhea"],
    )
    await records.add_medication(mary, "Aspirin", dosage="81mg", active=False)
    for days, weight, glucose in [(1, 147, 105), (3, 148, 110), (5, 145, 95), (30, 160, 200)]:
        at = NOW - timedelta(days=days)
        await records.record_vital(mary, "weight", weight, unit="lbs", measured_at=at)
        await records.record_vital(mary, "glucose", glucose, unit="mg/dL", measured_at=at)
    await records.record_vital(
        mary, "blood_pressure", 128, secondary_value=82, unit="mmHg", measured_at=NOW
    )
    await records.add_appointment(
        mary, "Dr. Johnson", NOW + timedelta(days=5, hours=-2), specialty="Cardiologist"
    )
    await records.add_appointment(mary, "Dr. Old", NOW - timedelta(days=5))
    return mary


async def test_eldercare_picks_the_medication_data_asked_about(store: AgentStore) -> None:
    await _mary(store)
    provider = EldercareProvider(store)
    text = await provider.context(
        ContextRequest("What are the side effects of Metformin for Mary?", now=NOW)
    )
    assert text == (
        "Patient Information:\n"
        "- Name: Mary Smith\n"
        "- Age: 82\n"
        "- Conditions: Hypertension, Type 2 Diabetes\n"
        "- Allergies: Penicillin\n"
        "- Primary Caregiver: John Smith (Grandson)\n"
        "\n"
        "Current Medications:\n"
        "- Lisinopril 10mg - Once daily (08:00) (for hypertension)\n"
        "- Metformin 500mg - Twice daily with meals (for diabetes)\n"
        "  Side effects to monitor: Nausea, Diarrhea"
    )


async def test_eldercare_vitals_and_appointments(store: AgentStore) -> None:
    mary = await _mary(store)
    provider = EldercareProvider(store)
    vitals = await provider.context(
        ContextRequest("How is her weight and blood pressure?", subject_id=mary, now=NOW)
    )
    assert "Recent Vitals (Last 7 days):" in vitals
    assert "- Weight: 145-148 lbs over 3 readings (latest 147 lbs, Mar 9)" in vitals
    assert "- Blood Pressure: 128/82 mmHg (Mar 10)" in vitals
    assert "160" not in vitals and "Current Medications" not in vitals
    visits = await provider.context(
        ContextRequest("Any doctor appointment coming?", subject_id=mary, now=NOW)
    )
    assert "- Dr. Johnson (Cardiologist) - Mar 15, 2026 at 10:00 AM" in visits
    assert "Dr. Old" not in visits


async def test_eldercare_stays_quiet_when_not_relevant(store: AgentStore) -> None:
    await _mary(store)
    provider = EldercareProvider(store)
    assert await provider.context(ContextRequest("Who won the match?", now=NOW)) == ""
    assert await provider.context(ContextRequest("What should I take along?", now=NOW)) == ""
    # With one patient on record, a care question is about her.
    about = await provider.context(ContextRequest("Is grandma's glucose ok?", now=NOW))
    assert "Mary Smith" in about and "Blood Glucose: 95-110" in about
    # Named without a topic: the overview, cut to the budget by whole lines.
    overview = await provider.context(ContextRequest("Tell me about Mary", now=NOW, budget=40))
    assert overview.startswith("Patient Information:\n- Name: Mary Smith")
    assert count_text_tokens(overview) <= 40


async def test_eldercare_sections_come_in_a_fixed_order_edited_records_first(
    store: AgentStore,
) -> None:
    mary = await _mary(store)
    provider = EldercareProvider(store)
    overview = await provider.context(ContextRequest("Tell me about Mary", now=NOW, budget=4000))
    headers = [line for line in overview.split("\n") if line.endswith(":")]
    assert headers == [
        "Patient Information:",
        "Current Medications:",
        "Caregivers:",
        "Recent Vitals (Last 7 days):",
        "Upcoming Appointments:",
    ]
    # Vitals by a fixed order of kinds, not by which was measured last: a new reading
    # of another kind changes its own line only.
    kinds = [line.split(":")[0] for line in overview.split("\n") if line.startswith("- ")]
    vitals = [k for k in kinds if k in ("- Weight", "- Blood Glucose", "- Blood Pressure")]
    assert vitals == ["- Weight", "- Blood Glucose", "- Blood Pressure"]
    records = EldercareFactory(store)
    await records.record_vital(mary, "weight", 146, unit="lbs", measured_at=NOW)
    again = await provider.context(ContextRequest("Tell me about Mary", now=NOW, budget=4000))
    changed = [
        (a, b) for a, b in zip(overview.split("\n"), again.split("\n"), strict=True) if a != b
    ]
    assert [a.split(":")[0] for a, _ in changed] == ["- Weight"]


# -- providers and the prompt --------------------------------------------------------


class _Static:
    def __init__(self, name: str, text: str) -> None:
        self.name, self.text = name, text

    async def context(self, request: ContextRequest) -> str:
        return self.text


class _Broken:
    name = "broken"

    async def context(self, request: ContextRequest) -> str:
        raise RuntimeError("provider down")


async def test_providers_are_gathered_bounded_and_failures_skipped() -> None:
    blocks = await gather_context(
        [_Static("a", "alpha block"), _Broken(), _Static("empty", "  "), _Static("b", "b " * 50)],
        ContextRequest("hi", budget=10),
    )
    assert blocks[0] == "alpha block"
    assert len(blocks) == 2 and count_text_tokens(blocks[1]) <= 10


def test_system_prompt_holds_only_what_is_stable_and_the_turn_context_the_rest() -> None:
    prompt = build_system_prompt("You are a nurse.", "Be brief.", FOCUS_INSTRUCTIONS)
    assert prompt == f"You are a nurse.\n\nBe brief.\n\n{FOCUS_INSTRUCTIONS}"
    assert build_system_prompt() == FOCUS_INSTRUCTIONS
    assert build_turn_context("DOCS", ["ELDERCARE", " "]) == "DOCS\n\nELDERCARE"
    assert build_turn_context() == ""


def test_a_turn_is_system_prompt_history_then_context_and_input() -> None:
    history = [Message("system", (TextPart("H"),)), Message("user", (TextPart("old"),))]
    messages = assemble_turn("S", history, "DOCS", "question?")
    assert [(m.role, m.text) for m in messages] == [
        ("system", "S"),
        ("system", "H"),
        ("user", "old"),
        ("user", "DOCS\n\nquestion?"),
    ]
    bare = assemble_turn("", (), "", "  hi  ")
    assert [(m.role, m.text) for m in bare] == [("user", "  hi  ")]
