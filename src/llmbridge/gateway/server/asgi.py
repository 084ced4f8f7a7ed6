"""The gateway as uvicorn's workers import it: ``llmbridge serve --workers N``.

uvicorn serves one port from N processes only for an app it can import by name: its
supervisor binds the socket, then starts each worker as a new interpreter
(``multiprocessing``'s spawn) that imports the app itself. So the worker cannot be
handed the configuration object ``llmbridge serve`` resolved from file, flags and
environment. Instead the parent writes it into a fresh run directory (``RunDirectory``:
``config.json``, readable by its owner only, as it may hold keys) and names that
directory in ``LLMBRIDGE_RUN_DIR``; each worker's ``create_app_from_env`` reads it back.
The same directory holds the workers' Prometheus files (``metrics/``, named in
``PROMETHEUS_MULTIPROC_DIR``: gateway/metrics.py) and their status files (``workers/``:
gateway/server/workers.py). The parent removes it when the last worker has stopped.

What ``llmbridge serve`` does for its one process is done in each worker too: the
interpreter tuning (``tune_interpreter``), logging, and the HTTP protocol with the
header limits (``WorkerProtocol``, gateway/server/read_limits.py), whose limits and rejection
counter are the app's, set when the factory has built it (uvicorn imports the protocol
class before it calls the factory, and makes connections only after).

With one worker none of this is used: ``llmbridge serve`` runs the app in its own
process, as before.
"""

from __future__ import annotations

import gc
import logging
import os
import shutil
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from uvicorn.config import STARTUP_FAILURE

from llmbridge.core.model_info import ModelInfo
from llmbridge.gateway.config import ConfigError, GatewayConfig
from llmbridge.gateway.server.read_limits import (
    LimitedHttpToolsProtocol,
    ReadLimits,
    protocol_class,
)
from llmbridge.gateway.server.workers import WorkerBoard

if TYPE_CHECKING:
    from starlette.applications import Starlette

__all__ = [
    "APP_FACTORY",
    "PROTOCOL",
    "RUN_DIR_ENV",
    "RunDirectory",
    "WorkerProtocol",
    "configure_logging",
    "create_app_from_env",
    "tune_interpreter",
]

log = logging.getLogger("llmbridge")

RUN_DIR_ENV = "LLMBRIDGE_RUN_DIR"
"""Names the run directory of ``llmbridge serve --workers N`` to its workers."""
METRICS_DIR_ENV = "PROMETHEUS_MULTIPROC_DIR"
"""prometheus_client's own variable, read when the library is first imported."""
APP_FACTORY = "llmbridge.gateway.server.asgi:create_app_from_env"
"""What uvicorn's workers import and call (``factory=True``)."""
PROTOCOL = "llmbridge.gateway.server.asgi:WorkerProtocol"
"""uvicorn's ``http=`` in the workers."""

_LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def configure_logging(level: str) -> None:
    """llmbridge's own log lines on stderr (uvicorn configures its loggers itself).
    Alembic's INFO lines (a plugin list when it is imported, each ``Running upgrade``)
    only at ``debug``: the database says its one line instead (store/migrate.py)."""
    logging.basicConfig(level=level.upper(), format=_LOG_FORMAT, stream=sys.stderr)
    logging.getLogger("alembic").setLevel(logging.NOTSET if level == "debug" else logging.WARNING)


def tune_interpreter() -> None:
    """What every serving process sets before it serves (docs/PERFORMANCE.md)."""
    # Every request allocates many short-lived objects (events, dicts, bytes); with
    # CPython's default gen-0 threshold of 700 the collector ran often enough to take
    # ~10% of the gateway's CPU under load. Collect less often (``gc.freeze`` after
    # the app is built keeps what exists at startup out of future collections).
    gc.set_threshold(50_000, 20, 20)
    # Large requests are parsed, decoded and encoded in worker threads (web/bodies.py,
    # backends/http.py); meanwhile the event loop waits up to the switch interval for the
    # GIL each time it wakes. 1 ms instead of 5 halved /health's median while one is
    # processed; with no worker thread busy it changes nothing.
    sys.setswitchinterval(0.001)


class RunDirectory:
    """The parent's side: a fresh directory for one run of N workers, named in the
    environment the workers inherit, removed at exit (``with RunDirectory(config)``)."""

    def __init__(self, config: GatewayConfig) -> None:
        self.config = config
        self.path = Path(tempfile.mkdtemp(prefix="llmbridge-workers-"))  # mode 0700
        self._saved: dict[str, str | None] = {}

    @property
    def metrics_dir(self) -> Path:
        return self.path / "metrics"

    @property
    def status_dir(self) -> Path:
        return self.path / "workers"

    @property
    def config_file(self) -> Path:
        return self.path / "config.json"

    def __enter__(self) -> RunDirectory:
        try:
            self.metrics_dir.mkdir()
            self.status_dir.mkdir()
            # Only what was set (file, flags, environment): a dump of every default
            # could name fields that validators derive (a route's backends from its
            # backend) twice. Checked here, so a worker never fails on it.
            text = self.config.model_dump_json(exclude_unset=True)
            if GatewayConfig.model_validate_json(text) != self.config:
                raise ConfigError("the configuration does not survive being passed to workers")
            fd = os.open(self.config_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                out.write(text)
        except BaseException:
            shutil.rmtree(self.path, ignore_errors=True)
            raise
        for name, value in ((RUN_DIR_ENV, self.path), (METRICS_DIR_ENV, self.metrics_dir)):
            self._saved[name] = os.environ.get(name)
            os.environ[name] = str(value)
        return self

    def __exit__(self, *exc: object) -> None:
        for name, value in self._saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        shutil.rmtree(self.path, ignore_errors=True)


class WorkerProtocol(LimitedHttpToolsProtocol):
    """uvicorn's ``http=`` protocol in a worker: the header limits and the rejection
    counter of the app ``create_app_from_env`` built in this process."""


def _ready(models: list[ModelInfo]) -> None:
    log.info("worker %d ready: %d models", os.getpid(), len(models))


def create_app_from_env() -> Starlette:
    """uvicorn's app factory in each worker: the gateway for the configuration in
    ``$LLMBRIDGE_RUN_DIR/config.json``, publishing its status beside the others'.

    A failure exits with uvicorn's ``STARTUP_FAILURE``, which stops the supervisor:
    any other exit would have it start the worker again, and fail again, for ever."""
    try:
        return _worker_app()
    except Exception:
        log.exception("worker %d could not build the gateway", os.getpid())
        sys.exit(STARTUP_FAILURE)


def _worker_app() -> Starlette:
    # Imported here, not at the top: the supervising parent imports this module too,
    # and needs none of the app (it stays at ~40 MB of memory instead of ~100).
    from llmbridge.gateway.app import create_app

    run_dir = Path(os.environ[RUN_DIR_ENV])
    config = GatewayConfig.model_validate_json((run_dir / "config.json").read_bytes())
    configure_logging(config.server.log_level)
    tune_interpreter()
    metrics_dir = os.environ.get(METRICS_DIR_ENV)
    board = WorkerBoard(run_dir / "workers", Path(metrics_dir) if metrics_dir else None)
    app = create_app(config, on_ready=_ready, workers=board)
    # The limits and the rejection counter http_protocol(app) gives a single process.
    metrics = app.state.gateway.metrics
    limits = ReadLimits.of(config.server)
    WorkerProtocol.settings = protocol_class(limits, metrics.rejected_connection).settings
    gc.freeze()
    return app
