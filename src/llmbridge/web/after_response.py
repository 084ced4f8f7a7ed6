"""Work a request leaves for after its response is sent: ``leave_for_after_response``.

What a request records of itself (the ledger row, the metrics, the span) is nothing
the client reads, yet done before the response it held the reply back: about a tenth
of a relayed request's latency with keys and the ledger on. The app (gateway/app.py
``GatewayApp``) opens a list for each HTTP request (``collect_after_response``) and
runs what was left in it once the request's handling returned, which for a response
sent whole is after its last byte was handed to the server, and also when the
handling failed. Each job runs once; one that fails is logged and the rest still run.

Where nothing collects (an app assembled without ``GatewayApp``, a test calling a
handler directly) ``leave_for_after_response`` says so and the caller does the work at
once: nothing is ever left unrun.

Each request runs in a task of its own, so the list lives in a context variable as
``web.streaming.SERVER_SEND`` does.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from contextvars import ContextVar, Token

__all__ = ["collect_after_response", "leave_for_after_response", "run_after_response"]

log = logging.getLogger("llmbridge.gateway")

Job = Callable[[], None]

_LEFT: ContextVar[list[Job] | None] = ContextVar("llmbridge_after_response", default=None)


def collect_after_response() -> tuple[list[Job], Token[list[Job] | None]]:
    """A list for this request's jobs (the app's, before it handles the request), and
    the token that puts the context back (``run_after_response`` takes both)."""
    jobs: list[Job] = []
    return jobs, _LEFT.set(jobs)


def leave_for_after_response(job: Job) -> bool:
    """Run ``job`` once the response is sent; ``False`` when nothing collects jobs here
    (the caller runs it now)."""
    jobs = _LEFT.get()
    if jobs is None:
        return False
    jobs.append(job)
    return True


def run_after_response(jobs: list[Job], token: Token[list[Job] | None]) -> None:
    """Run the jobs left in ``jobs`` (each once, in the order left; a failure logged),
    and put the context back."""
    _LEFT.reset(token)
    while jobs:
        job = jobs.pop(0)
        try:
            job()
        except Exception:
            log.exception("work left for after a response failed")
