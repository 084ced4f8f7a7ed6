"""Serve llmbridge under another Python interpreter, for ``bench/overhead.py``'s
``--gateway-launcher``: the same tree, the same config, another CPython.

``bench/overhead.py`` starts a launcher as ``python SCRIPT serve ...``; this one replaces
itself with ``$BENCH_GATEWAY_PYTHON -m llmbridge serve ...``. That interpreter needs
llmbridge importable (a venv with ``pip install -e .`` of this checkout). With
``--baseline-src src`` naming this same tree, the one run compares two interpreters on
one code::

    /root/.pyenv/versions/3.13.0/bin/python -m venv /tmp/venv313
    /tmp/venv313/bin/pip install -e .
    BENCH_GATEWAY_PYTHON=/tmp/venv313/bin/python .venv/bin/python bench/overhead.py \\
        --gateway-launcher bench/other_python.py --baseline-src src
"""

from __future__ import annotations

import os
import sys


def main() -> None:
    python = os.environ.get("BENCH_GATEWAY_PYTHON")
    if not python:
        raise SystemExit("set BENCH_GATEWAY_PYTHON to the interpreter to serve llmbridge with")
    os.execv(python, [python, "-m", "llmbridge", *sys.argv[1:]])


if __name__ == "__main__":
    main()
