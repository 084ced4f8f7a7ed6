"""What the pass-through equivalence modules (tests/gateway/test_passthrough*.py) share:
the module-scoped fixtures (a scripted upstream, the ledger's database file, the key)
made by factories so each module names its own, the gateway over a module's backends
with the routes every module has (the model relayed, ``translated`` with ``passthrough:
false``, ``mapped``, a tools route set to relay), a POST to the gateway, a client that
leaves a relayed stream, the ledger row of a request id, two requests' rows compared
field by field, and an SSE frame as the backends write it. What a dialect's client
reads of a reply stays in its own module."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
import orjson
import pytest

from llmbridge.backends.base import Backend
from tests.conftest import RunningServer, create_key, ledger_rows, running_gateway
from tests.upstream import FakeUpstream
from tests.waiting import scaled, wait_until

if TYPE_CHECKING:
    from _pytest.fixtures import FixtureFunctionDefinition

COMPARED = ("status", "input_tokens", "output_tokens", "streamed", "cost_usd")
"""The ledger fields every module compares across the two paths."""


def upstream_fixture(*canned_paths: str) -> FixtureFunctionDefinition:
    """A module-scoped ``upstream``: a FakeUpstream served on loopback (with
    ``serve_canned`` on each of ``canned_paths``), as ``(fake, server)``."""

    @pytest.fixture(scope="module")
    def upstream() -> Iterator[tuple[FakeUpstream, RunningServer]]:
        fake = FakeUpstream()
        for path in canned_paths:
            fake.serve_canned(path)
        with RunningServer(fake.app) as server:
            yield fake, server

    return upstream


def database_fixture(folder: str) -> FixtureFunctionDefinition:
    """A module-scoped ``database``: the gateway's SQLite file in a temporary ``folder``."""

    @pytest.fixture(scope="module")
    def database(tmp_path_factory: pytest.TempPathFactory) -> Path:
        return tmp_path_factory.mktemp(folder) / "gateway.db"

    return database


def key_fixture(master: str, name: str) -> FixtureFunctionDefinition:
    """A module-scoped ``key``: a database key called ``name``, made with ``master``."""

    @pytest.fixture(scope="module")
    def key(gateway: RunningServer) -> str:
        return create_key(gateway.url, master, name)

    return key


def routes(
    backend: str, model: str, *, tools: str = "tools-trusted", **relayed: Any
) -> list[dict[str, Any]]:
    """The routes every module has, over ``backend``'s ``model``: the model itself,
    ``translated`` (``passthrough: false``), ``mapped`` (another name for it) and
    ``tools`` (``passthrough: true``, which relays a body naming tools); ``relayed``
    (Anthropic's ``thinking``) goes on each of them but ``mapped``."""
    return [
        {"name": model, "backend": backend, **relayed},
        {
            "name": "translated",
            "backend": backend,
            "model": model,
            **relayed,
            "passthrough": False,
        },
        {"name": "mapped", "backend": backend, "model": model},
        {"name": tools, "backend": backend, "model": model, **relayed, "passthrough": True},
    ]


@contextmanager
def passthrough_gateway(
    backends: dict[str, Backend],
    models: list[dict[str, Any]],
    *,
    master: str,
    database: Path,
    **config: Any,
) -> Iterator[RunningServer]:
    """The gateway over ``backends`` serving ``models``, with ``master`` as its master
    key and its ledger in ``database``; ``config`` adds settings (``resilience``)."""
    with running_gateway(
        backends,
        models=models,
        server={"master_key": master},
        agent={"database": str(database)},
        **config,
    ) as server:
        yield server


def gateway_fixture(
    backends: Callable[[str], dict[str, Backend]],
    models: list[dict[str, Any]],
    *,
    master: str,
    **config: Any,
) -> FixtureFunctionDefinition:
    """A module-scoped ``gateway``: :func:`passthrough_gateway` over the ``backends``
    made for the ``upstream`` fixture's URL, with the ledger in the ``database`` fixture's."""

    @pytest.fixture(scope="module")
    def gateway(
        upstream: tuple[FakeUpstream, RunningServer], database: Path
    ) -> Iterator[RunningServer]:
        _, up = upstream
        with passthrough_gateway(
            backends(up.url), models, master=master, database=database, **config
        ) as server:
            yield server

    return gateway


def bearer(key: str) -> dict[str, str]:
    """The ``Authorization`` header the OpenAI and Ollama clients send."""
    return {"Authorization": f"Bearer {key}"}


def post(
    gateway: RunningServer, path: str, body: object, headers: Mapping[str, str]
) -> httpx.Response:
    """POST ``body`` to the gateway's ``path``: bytes as they are, anything else as
    httpx's JSON."""
    if isinstance(body, bytes):
        return httpx.post(gateway.url + path, content=body, headers=headers, timeout=scaled(30))
    return httpx.post(gateway.url + path, json=body, headers=headers, timeout=scaled(30))


def leave_after_first_read(
    gateway: RunningServer, path: str, body: object, headers: Mapping[str, str]
) -> str:
    """POST ``body`` to ``path`` as :func:`post` does, read the relayed stream's first
    bytes and leave; the request's id."""
    sent: dict[str, Any] = {"content": body} if isinstance(body, bytes) else {"json": body}
    with httpx.stream(
        "POST", gateway.url + path, **sent, headers=headers, timeout=scaled(30)
    ) as reply:
        request_id = reply.headers["x-request-id"]
        assert reply.headers["x-llmbridge-path"] == "passthrough"
        next(reply.iter_bytes())
    return request_id


def ledger_row(database: Path, key_name: str, request_id: str) -> Any:
    """The ledger's row of ``request_id`` (a request of the key ``key_name``), once written."""

    def rows() -> list[Any]:
        return ledger_rows(database, key_name, 1)

    wait_until(
        lambda: any(r["request_id"] == request_id for r in rows()),
        what=f"the ledger row of {request_id}",
    )
    return next(r for r in rows() if r["request_id"] == request_id)


def rows_alike(
    database: Path,
    key_name: str,
    replies: Sequence[httpx.Response],
    fields: Sequence[str] = COMPARED,
) -> tuple[Any, Any]:
    """The ledger rows of two replies' requests, asserted equal in each of ``fields``."""
    one, other = (ledger_row(database, key_name, r.headers["x-request-id"]) for r in replies)
    for field in fields:
        assert one[field] == other[field], field
    return one, other


def sse_frame(data: object, event: str | None = None) -> bytes:
    """One SSE frame: an ``event:`` line where ``event`` is named, and ``data`` (a
    string as it is, anything else as JSON)."""
    named = b"" if event is None else b"event: " + event.encode() + b"\n"
    payload = data.encode() if isinstance(data, str) else orjson.dumps(data)
    return named + b"data: " + payload + b"\n\n"
