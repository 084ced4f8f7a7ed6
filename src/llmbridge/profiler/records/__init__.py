"""The profiler's records and settings: the bottom layer.

What a scenarios file says (``scenarios``, ``settings``, ``modes``), what a run records
(``types``, ``records``, ``trace``, ``trace_builder``, ``metrics``, ``findings``,
``otel``'s spans), how records travel (``atif``, ``transcripts``: other tools' session
files as ATIF) and are read back within bounds (``input_files``, ``record_checks``), and
the statistics comparisons use (``stats``).

May import: the rest of llmbridge as docs/ARCHITECTURE.md allows the profiler, and
nothing of ``profiler.providers``, ``profiler.run`` or ``profiler.report``.
"""
