"""Running the profiler: the eval runner (``runner``: scenarios x iterations x modes x
models x providers), from a scenarios file to providers (``setup``), each iteration's
workspace and its checks (``workspace``), a run directory read back for ``--resume``
(``run_dir``), the optional model-graded scanner (``graded``), and ``profile import``
(``importing``: sessions the profiler did not run, written as a run).

May import: ``profiler.records``, ``profiler.providers`` and ``profiler.report``; the
runner itself drives providers only through the ``SessionProvider`` contract (``setup``
names the concrete ones).
"""
