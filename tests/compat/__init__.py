"""``make compat``: the end-to-end and SDK tests run against the newest published release
of every client they drive, and the compatibility table in docs/COMPATIBILITY.md.

``clients.py`` says which clients there are and which tests prove each one,
``report.py`` reads versions and pytest's results and writes the table (no I/O beyond
the files it is handed), and ``__main__.py`` installs the newest releases in ``.compat/``
and runs the tests (``python -m tests.compat``).
"""
