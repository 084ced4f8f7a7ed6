"""Domains: what the agent knows about the world its conversations are about.

The agent's core is generic: a session (and each fact remembered from it) may carry a
``subject_id``, what the conversation is about, and every turn asks the context
providers (``agent.context_providers``) for blocks of context. A *domain* fills
those in for one field: eldercare's subjects are patients, its provider adds the
patient's record (medications, vitals, appointments, caregivers) to the turns about
them, and its routes (``/agent/patients/...``) edit those records. It owns its tables
(declared on the product's ``Base`` in its own ``tables`` module; their schema is in the
product's one set of migrations), so nothing below the agent knows it.

How one plugs in:

1. a package here with its tables, records, providers and routes, and a class that
   follows ``domain.Domain`` (a name, ``subjects``, ``context_providers``,
   ``check_subject``);
2. its factory in ``registry.DOMAINS`` and its routes in ``agent.routes.DOMAIN_ROUTES``,
   under the same name, which ``agent.config.DomainName`` lists;
3. the configuration turns it on: ``agent.domains: [eldercare]`` (the default). A
   domain that is off has no routes mounted and no provider asked; sessions may still
   carry a ``subject_id``, unchecked.

With a domain that owns subjects on, a session naming a subject the caller may not see
is refused (404) by ``check_subject``; the sessions' and facts' ``subject_id`` has no
foreign key (migration 0010), so the domain also clears it when the subject is
deleted. docs/AGENT.md, "Domains", says the same for users.
"""
