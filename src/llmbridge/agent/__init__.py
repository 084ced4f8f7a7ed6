"""The agent service (seed 002): personas, persistent sessions, hybrid memory,
documents, context providers and tools, built on the gateway's neutral core.

Modules: ``store`` (the agent's repository on the product's database), ``config`` (the
configuration file's ``agent:`` section), ``persona_settings`` (the generation settings
of a persona or a request, their merge and the neutral parameters they make), ``memory``
(history context within a token budget, and the background summariser), ``documents``
(keyword retrieval), ``context_providers`` (the context-provider protocol), ``domains``
(what the conversations are about, plugged in by configuration: eldercare's patients,
their records, provider and routes), ``prompt`` (system prompt assembly), ``tools`` (the
tool registry and web search), ``service`` (``run_agent``, ``run_agent_stream``,
``list_sessions``), ``runtime`` (all of it wired over the serving layer) and ``routes``
(the HTTP API; ``document_routes``, a domain's own). See docs/AGENT.md.
"""
