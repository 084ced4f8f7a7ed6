"""A database outage said once in the log: when the first read fails, and when one
succeeds again, never once per failed read in between.

A page that polls (the console's request list asks every 2 s) or a person who reloads
would otherwise write a line, or a traceback, per attempt for as long as the database
is down: 52 tracebacks for one open page in 45 s. The reader that keeps one of these
passes ``log_unavailable=False`` to ``store.errors.mapped_errors`` (the store's own
line per failure) and reports to it instead.
"""

from __future__ import annotations

import logging
import time

__all__ = ["OutageLog"]


class OutageLog:
    """Whether a database is down for one reader, said once per outage in ``log``."""

    def __init__(self, log: logging.Logger, reader: str, consequence: str) -> None:
        self._log = log
        self._reader = reader
        """Who reads (``console``), the start of each line."""
        self._consequence = consequence
        """What the reader does meanwhile (``its pages answer 503 ...``)."""
        self._since: float | None = None

    @property
    def down(self) -> bool:
        return self._since is not None

    def failed(self, reason: str) -> None:
        """A read failed with ``reason`` (the 503's message): logged if it is the
        first of an outage."""
        if self._since is None:
            self._since = time.monotonic()
            self._log.warning(
                "%s: %s; %s (said once until it answers again)",
                self._reader,
                reason,
                self._consequence,
            )

    def answered(self) -> None:
        """A read succeeded: the end of an outage, if there was one."""
        if self._since is not None:
            seconds = time.monotonic() - self._since
            self._since = None
            self._log.warning(
                "%s: the database answers again (after %.0f s)", self._reader, seconds
            )
