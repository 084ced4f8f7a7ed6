"""The agents the profiler drives: the ``SessionProvider`` contract (``provider``) and
one provider per agent: ``opencode``, ``claude_code``, ``codex`` (with
``codex_events``), ``gemini_cli`` and ``agent`` (the agent service, in process). What
the command-line agents share is ``cli_agent``; ``cli_process`` runs one CLI as a child
process and knows no agent.

May import: ``profiler.records`` (and the rest of llmbridge as docs/ARCHITECTURE.md
allows the profiler); nothing of ``profiler.run`` or ``profiler.report``.
"""
