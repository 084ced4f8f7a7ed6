"""The agent service (seed 002): personas, persistent sessions, hybrid memory,
documents, context providers and tools, built on the gateway's neutral core.

Modules: ``store`` (the database and its migrations), ``settings`` (persona settings,
their merge and their mapping to each backend), ``memory`` (history context within a
token budget, and the background summariser), ``documents`` (keyword retrieval),
``context`` (the context-provider protocol), ``eldercare`` (the eldercare domain and
its provider), ``prompt`` (system prompt assembly), ``tools`` (the tool registry and
web search), ``llm`` (the gateway's model pipeline, in process) and ``service``
(``run_agent``, ``run_agent_stream``, ``list_sessions``). See docs/AGENT.md.
"""
