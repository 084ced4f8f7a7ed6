"""The profiler: scenarios run against agent sessions, recorded as traces, reported.

Four layers, lowest first, each a subpackage whose ``__init__`` says what it owns:

- ``records/``: what a scenarios file and a run's records are (settings, modes,
  scenarios, traces, metrics, findings, ATIF, the statistics); imports no other layer;
- ``report/``: the terminal, Markdown and HTML reports and ``profile compare``; reads
  records only;
- ``providers/``: the ``SessionProvider`` contract and the agents behind it (OpenCode,
  Claude Code, Codex, Gemini CLI, the agent service); on records only;
- ``run/``: the eval runner, its workspaces and run directories, and ``profile
  import``; over the three others.

``tests/unit/test_profiler_layers.py`` checks these rules on every import, transitively.
The packages' ``__init__`` modules import nothing, so importing one module loads only
what it imports.
"""
