"""What a domain is to the agent: the ``Domain`` protocol (the package's docstring says
how one plugs in).

A domain brings context providers (``agent.context_providers``) for every turn, and
may own the subjects of sessions: then ``subjects`` says what a ``subject_id`` names
(``"patient"``) and ``check_subject`` is how a session naming one is checked. The
HTTP routes of a domain are not here: they sit above the runtime that holds the
domain (``agent.routes.DOMAIN_ROUTES``), so this protocol stays below it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from llmbridge.agent.context_providers import ContextProvider

__all__ = ["Domain", "SubjectCheck"]


class SubjectCheck(Protocol):
    """How a subject is checked: ``NotFoundError`` (404) for a ``subject_id`` the
    ``owner`` may not name (not there, or another key's), nothing otherwise."""

    async def __call__(self, subject_id: int, *, owner: str | None) -> None: ...


class Domain(Protocol):
    """One domain, opened on the agent's store (``agent.domains.registry``)."""

    name: str
    """Its name in the configuration (``agent.domains``)."""
    subjects: str | None
    """What a session's ``subject_id`` names in this domain (``"patient"``); ``None``
    for a domain that brings context only."""

    def context_providers(self) -> Sequence[ContextProvider]:
        """The providers it adds to every turn, in order."""
        ...

    async def check_subject(self, subject_id: int, *, owner: str | None) -> None:
        """``SubjectCheck`` for this domain's subjects (unused when ``subjects`` is
        ``None``)."""
        ...
