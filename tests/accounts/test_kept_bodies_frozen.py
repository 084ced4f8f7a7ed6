"""Kept bodies (``ledger.keep_bodies``) while the database is frozen: what waits for the
ledger's next write is bounded, whatever the bodies' size.

A real gateway on a loopback port with a static key (it needs no database to be
recognised), the official openai client sending 5 MB prompts, and the session's
PostgreSQL frozen for real (SIGSTOP on every process of it,
``tests/agent/postgres_faults.py``), so every write of the ledger fails and its rows and
bodies wait. What is measured is the waiting queue's own content (the bodies handed
back by ``BodyKeeper.take`` and its byte count), never the process's RSS or a time:

- each body is cut to ``ledger.max_body_bytes`` when it is queued, so 8 prompts of
  5 MB hold some 8 x 16 KiB (they held 40 MB whole, until the write that cut them);
- past ``ledger.max_pending_body_bytes`` a request's bodies are dropped: counted in
  ``llmbridge_kept_bodies_dropped_total``, said in its request-log row (the
  ``bodies`` fact), while the row itself is kept and written once the database thaws.
"""

from __future__ import annotations

from typing import Any

import httpx
import orjson

from llmbridge.backends.scripted import ScriptedBackend
from llmbridge.gateway.app import create_app, http_protocol
from llmbridge.gateway.config import GatewayConfig
from tests.accounts.request_log_reads import logged_detail, logged_rows
from tests.agent.postgres_faults import frozen
from tests.conftest import RunningServer, openai_client
from tests.servers import PostgresServer
from tests.waiting import scaled, wait_until

STATIC = "sk-static-kept-bodies-0123456789"
SHORT = "connect_timeout=1&command_timeout=1&pool_timeout=1"
"""Short database deadlines (store/engine.py): the ledger's writes fail fast while frozen."""
PROMPT_BYTES = 5 * 1024 * 1024
MARKER_BYTES = 64
"""Room for the cut marker, ``...[cut at N bytes]``."""
_BOUND_S = scaled(120.0)
"""A client's own timeout: only a hang reaches it."""


def _app(db_url: str, ledger: dict[str, Any]) -> Any:
    config = GatewayConfig.model_validate(
        {
            "backends": {"scripted": {"type": "scripted"}},
            "default_backend": "scripted",
            "server": {"api_keys": [STATIC]},
            "agent": {"database": db_url, "summaries": False},
            "ledger": {"keep_bodies": True, **ledger},
        }
    )
    return create_app(config, backends={"scripted": ScriptedBackend("scripted")})


def _ask(gateway: RunningServer, requests: int) -> None:
    client = openai_client(gateway.url, api_key=STATIC).with_options(timeout=_BOUND_S)
    for n in range(requests):
        prompt = f"prompt {n} " + "x" * PROMPT_BYTES
        reply = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": prompt}]
        )
        assert reply.choices[0].message.content


def _size(body: object) -> int:
    """A waiting body's size: its text's UTF-8 bytes, or an object's as JSON."""
    if body is None:
        return 0
    if isinstance(body, str):
        return len(body.encode())
    return len(orjson.dumps(body, default=str))


def _metric(gateway: RunningServer, name: str) -> float:
    text = httpx.get(
        gateway.url + "/metrics", headers={"authorization": f"Bearer {STATIC}"}, timeout=_BOUND_S
    ).text
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    raise AssertionError(f"{name} is not in /metrics")


def test_bodies_waiting_for_a_frozen_database_are_cut_when_queued(
    postgres_server: PostgresServer, pg_url: str
) -> None:
    db_url = f"{pg_url}?{SHORT}"
    app = _app(db_url, {"max_body_bytes": 16384})
    requests = 8
    with RunningServer(app, http=http_protocol(app)) as gateway:
        keeper = app.state.gateway.ledger.bodies
        assert keeper is not None
        with frozen(postgres_server):
            _ask(gateway, requests)
            wait_until(lambda: keeper.pending == requests, f"{requests} requests' bodies queued")
            counted = keeper.pending_bytes
            waiting = keeper.take()
        # 8 prompts of 5 MB: each waited cut to its bound, not whole.
        assert len(waiting) == requests
        sizes = [_size(body) for entry in waiting for body in entry[2:]]
        assert max(sizes) <= 16384 + MARKER_BYTES, sizes
        assert counted >= sum(sizes) and counted <= requests * 2 * (16384 + 1024)
        assert keeper.pending_bytes == 0 and keeper.dropped == 0
        # The rows waited too, and are written once the database answers again.
        rows = logged_rows(db_url, requests)
        assert all("bodies" not in row.facts for row in rows)


def test_past_the_queues_bound_bodies_are_dropped_counted_and_said_in_their_rows(
    postgres_server: PostgresServer, pg_url: str
) -> None:
    db_url = f"{pg_url}?{SHORT}"
    bound = 4 * 1024 * 1024
    # Each prompt is cut to 1 MiB: three requests' bodies fit in 4 MiB, not a fourth.
    app = _app(db_url, {"max_body_bytes": 1024 * 1024, "max_pending_body_bytes": bound})
    requests = 6
    with RunningServer(app, http=http_protocol(app)) as gateway:
        keeper = app.state.gateway.ledger.bodies
        assert keeper is not None
        with frozen(postgres_server):
            _ask(gateway, requests)
            wait_until(
                lambda: keeper.pending + keeper.dropped == requests,
                f"{requests} requests' bodies queued or dropped",
            )
            assert (keeper.pending, keeper.dropped) == (3, 3)
            assert keeper.pending_bytes <= bound
            assert _metric(gateway, "llmbridge_kept_bodies_dropped_total") == 3
        # Every row is written once the database thaws, and the bodies that waited.
        rows = logged_rows(db_url, requests)
        dropped = [row for row in rows if "bodies" in row.facts]
        assert len(dropped) == 3
        for row in dropped:
            assert "max_pending_body_bytes" in row.facts["bodies"]
            detail = logged_detail(db_url, row.request_id)
            assert detail is not None
            assert detail.request_body is None and detail.response_body is None
        kept = [row for row in rows if "bodies" not in row.facts]

        def bodies_written() -> bool:
            details = [logged_detail(db_url, row.request_id) for row in kept]
            return all(d is not None and d.request_body for d in details)

        wait_until(bodies_written, "the kept bodies written after the thaw")
        for row in kept:
            detail = logged_detail(db_url, row.request_id)
            assert detail is not None and detail.request_body is not None
            assert detail.request_body.endswith(f"...[cut at {1024 * 1024} bytes]")
            assert len(detail.request_body.encode()) <= 1024 * 1024 + MARKER_BYTES
