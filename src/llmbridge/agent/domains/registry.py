"""The domains the agent knows, by the name the configuration uses
(``agent.domains: [eldercare]``), and how the runtime opens the configured ones.

``open_domains`` builds each on the agent's store, in the configured order (their
providers' blocks come in that order), and ``subject_domain`` picks the one whose
records sessions name as their subject: at most one may, since a ``subject_id`` is
a bare id. Their routes are mounted by ``agent.routes`` (``DOMAIN_ROUTES``, the same
names).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from llmbridge.agent.domains.domain import Domain
from llmbridge.agent.domains.eldercare.domain import EldercareDomain
from llmbridge.agent.store import AgentStore

__all__ = ["DOMAINS", "open_domains", "subject_domain"]

DOMAINS: dict[str, Callable[[AgentStore], Domain]] = {
    "eldercare": EldercareDomain,
}
"""Each domain's factory, by its configuration name (``agent.config.DomainName``)."""


def open_domains(names: Sequence[str], store: AgentStore) -> tuple[Domain, ...]:
    """The domains ``names`` on ``store``, in that order (``ValueError`` for a name
    no domain has: the configuration's check keeps that from happening)."""
    unknown = [name for name in names if name not in DOMAINS]
    if unknown:
        raise ValueError(f"agent.domains: no domain {unknown}: one of {sorted(DOMAINS)}")
    return tuple(DOMAINS[name](store) for name in names)


def subject_domain(domains: Sequence[Domain]) -> Domain | None:
    """The domain whose records are sessions' subjects, if one is on (``ValueError``
    when two are: a session's ``subject_id`` could name either)."""
    owning = [domain for domain in domains if domain.subjects is not None]
    if len(owning) > 1:
        names = ", ".join(domain.name for domain in owning)
        raise ValueError(f"agent.domains: {names} all name sessions' subjects; keep one")
    return owning[0] if owning else None
