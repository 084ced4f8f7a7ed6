"""``EldercareDomain``: the eldercare domain as the agent plugs it in
(``agent.domains``): its records (``EldercareRecords``), its context provider
(``EldercareProvider``: the patient's record in every turn that is about them) and its
subjects, patients.
"""

from __future__ import annotations

from collections.abc import Sequence

from llmbridge.agent.context_providers import ContextProvider
from llmbridge.agent.domains.eldercare.provider import EldercareProvider
from llmbridge.agent.domains.eldercare.records import EldercareRecords
from llmbridge.agent.store import AgentStore

__all__ = ["EldercareDomain"]


class EldercareDomain:
    """The eldercare domain on the agent's store."""

    name = "eldercare"
    subjects: str | None = "patient"
    """A session's ``subject_id`` is a patient's id."""

    def __init__(self, store: AgentStore) -> None:
        self.records = EldercareRecords(store)
        self.provider = EldercareProvider(store)

    def context_providers(self) -> Sequence[ContextProvider]:
        return (self.provider,)

    async def check_subject(self, subject_id: int, *, owner: str | None) -> None:
        await self.records.check_subject(subject_id, owner=owner)
