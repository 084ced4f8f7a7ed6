"""The profiler's reports: a run's summary as a terminal table, Markdown and one HTML
page (``report``, ``html_report``, ``html_iterations``, ``svg_charts``), and ``profile
compare`` (``compare``: whether two runs' differences are real; ``compare_report``,
``html_compare``: its tables and page).

May import: ``profiler.records`` only; a report reads what a run wrote and never needs
the runner or a provider.
"""
