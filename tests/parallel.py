"""How `make test` spreads the suite over pytest-xdist workers (``-n auto``).

The quiet suite keeps about one core busy: most of a test's time is spent waiting on a
gateway, a subprocess or a server on loopback. Two workers on a 2-core machine nearly
halve the wall-clock time. Two rules keep that safe:

- **Whole modules per worker.** A module's fixtures (gateways, OpenCode servers, CLIs
  on disk) are often module-scoped; running its tests on two workers would build them
  twice. The scheduler hands out one module at a time.
- **One embedded model at a time, on one thread.** llama.cpp's threads meet at a
  barrier on every step, so two generations side by side run many times slower than
  one after the other, and a model whose threads want every core stalls whenever
  another worker takes one (docs/PERFORMANCE.md). Every module with a test marked
  ``embedded`` joins one work unit, which one worker runs from start to end, and
  which starts first; and each worker sets ``$LLMBRIDGE_EMBEDDED_THREADS`` to 1
  (unless the shell set it), as docs/DEPLOY.md tells a shared machine's operator to.

The scheduler runs in the controller, which collects nothing, so it tells a model
module by its text (``mark.embedded``); each worker checks at collection that every
test marked ``embedded`` is in such a module, so a mark that arrives another way
(a conftest, a shared variable) fails loudly instead of running two models at once.
pytest-xdist's own ``xdist_group`` cannot do this here: it renames the items through
an attribute pytest 9 no longer reads.

Without xdist (``pytest -n0``, or ``pytest`` on a module by hand) none of this applies.
"""

from __future__ import annotations

import os
from functools import cache
from pathlib import Path

import pytest
from xdist.remote import Producer
from xdist.scheduler import LoadScopeScheduling
from xdist.workermanage import WorkerController

from llmbridge.backends.embedded.backend import THREADS_VARIABLE

EMBEDDED_UNIT = "the embedded model's modules"
_MARK_TEXT = "mark.embedded"


@cache
def runs_embedded_model(module: Path) -> bool:
    """Whether a test module has a test marked ``embedded``, judged by its text."""
    try:
        return _MARK_TEXT in module.read_text(encoding="utf-8")
    except OSError:
        return False


class ModuleScheduling(LoadScopeScheduling):
    """Work units are test modules, except that every module that runs the embedded
    model belongs to one unit, handed out first: it is the longest, and a long unit
    started last would leave the other workers idle at the end."""

    def _split_scope(self, nodeid: str) -> str:
        module = nodeid.split("::", 1)[0]
        return EMBEDDED_UNIT if runs_embedded_model(self.config.rootpath / module) else module

    def _assign_work_unit(self, node: WorkerController) -> None:
        if EMBEDDED_UNIT in self.workqueue:
            self.workqueue.move_to_end(EMBEDDED_UNIT, last=False)
        super()._assign_work_unit(node)

    def remove_node(self, node: WorkerController) -> str | None:
        """A worker gone: hand its unfinished modules to the others, and name the test
        it died in.

        pytest-xdist's own version puts the dead worker's whole workload back in the
        queue, modules it had finished included, and hands them out again as they
        come: a live worker then gets a module with nothing left to run, sends back
        no result, and is never asked again, so the run waits for ever (a worker
        killed by the hang guard left ``make test`` idle until CI's limit). Here only
        modules with tests still to run go back, first in the queue so that a
        module's fixtures are rebuilt while the rest of the run goes on; and the test
        the worker died in counts as run (xdist reports it failed, naming the
        worker), so a test that kills or hangs its worker is not run again."""
        workload = self.assigned_work.pop(node)
        unfinished = [(scope, unit) for scope, unit in workload.items() if not all(unit.values())]
        if not unfinished:
            return None
        running = unfinished[0][1]  # a worker runs its modules in the order it got them
        crashitem = next(nodeid for nodeid, done in running.items() if not done)
        running[crashitem] = True
        for scope, unit in reversed(unfinished):
            if not all(unit.values()):
                self.workqueue[scope] = unit
                self.workqueue.move_to_end(scope, last=False)
        for live in self.assigned_work:
            self._reschedule(live)
        return crashitem


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Producer) -> ModuleScheduling:
    return ModuleScheduling(config, log)


def pytest_configure(config: pytest.Config) -> None:
    if int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1:
        os.environ.setdefault(THREADS_VARIABLE, "1")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    strays = sorted(
        {
            str(item.path)
            for item in items
            if item.get_closest_marker("embedded") is not None
            and not runs_embedded_model(item.path)
        }
    )
    if strays:
        raise pytest.UsageError(
            f"tests marked embedded in modules without {_MARK_TEXT!r} in their text, which "
            f"tests/parallel.py would run beside another model: {', '.join(strays)}"
        )
