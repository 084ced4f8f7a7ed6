"""The eldercare domain (``agent.domains: [eldercare]``, on by default): patients and
their caregivers, medications, vitals and appointments, and the context that brings
a patient's record into the turns about them.

Modules: ``tables`` (its ORM tables, on the product's ``Base``), ``records``
(``EldercareRecords``: the owner-scoped CRUD the HTTP API uses, and the subject check),
``provider`` (``EldercareProvider``, the context provider), ``domain``
(``EldercareDomain``, what the runtime opens), ``api`` (the JSON bodies of its routes)
and ``routes`` (``/agent/patients/...``). A session's ``subject_id`` is a patient's id.
"""
