"""Two replicas on one Redis and one PostgreSQL: what happens to usage, to a
replica killed with -9, and to everyone when Redis goes away.

Two ``llmbridge serve`` processes on different loopback ports share a Redis
(``--redis-url``: limits' windows, in-flight counts) and a PostgreSQL database
(``--db``: keys and the usage ledger), with a scripted backend each. Keys are made by
``llmbridge keys create`` on the shared database, as an operator would. Each test has
its own ``redis-server`` (one of them kills it) and its own database. The rpm-10-of-30
test across two replicas in every dialect is tests/accounts/test_replicas.py.

- usage: requests in every dialect, streamed and not, alternated between the replicas:
  ``GET /admin/usage`` totals equal the sum of the ``usage`` the clients received;
- kill -9: one replica dies with requests in flight; the other serves every request
  sent to it, each recorded exactly once, nothing twice; the dead replica's in-flight
  slots stop counting once its heartbeat expires (state/redis.py), so the key's
  ``max_parallel`` is whole again;
- Redis killed mid-load: no 5xx, ``/health`` says ``degraded`` on both, each replica
  then holds the rpm limit for its own traffic (state/failover.py), and ``/health`` is
  ``up`` again once Redis is back.
"""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner
from google import genai
from google.genai import types as genai_types

from llmbridge.cli import cli
from tests.conftest import anthropic_client, ollama_client, openai_client
from tests.servers import PostgresServer, RedisServer, _admin, free_port
from tests.waiting import scaled, value_until, wait_until

MASTER = "sk-master-replicas-r6"
HI = [{"role": "user", "content": "hi"}]
START_PATIENCE_S = scaled(60.0)  # a start with migrations on a busy machine


@dataclass
class Replica:
    """One ``llmbridge serve`` process."""

    url: str
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def name(self) -> str:
        """As the ledger's ``replica`` column names it (accounts/ledger.replica_name)."""
        return f"{socket.gethostname()}:{self.process.pid}"

    def health(self) -> dict[str, Any]:
        reply = httpx.get(self.url + "/health", timeout=5)
        body: dict[str, Any] = reply.json()
        return body


@dataclass
class Cluster:
    redis: RedisServer
    database: str
    db_name: str
    postgres: PostgresServer
    workdir: Path
    replicas: list[Replica] = field(default_factory=list)

    def start(self) -> tuple[Replica, Replica]:
        """Two replicas of one config: model ``scripted`` answers at once, model
        ``slow`` takes about 1.6 s (4 chunks, 400 ms apart), so its requests overlap."""
        config = self.workdir / "llmbridge.yaml"
        config.write_text(
            "backends:\n"
            "  scripted: {type: scripted, models: [scripted]}\n"
            "  slow: {type: scripted, models: [slow], chunks: 4, chunk_delay_ms: 400}\n"
            "models:\n"
            "  - {name: slow, backend: slow}\n"
            "default_backend: scripted\n"
        )
        for index in range(2):
            port = free_port()
            log = self.workdir / f"replica-{index}.log"
            command = [sys.executable, "-m", "llmbridge", "serve", "--config", str(config)]
            command += ["--port", str(port), "--db", self.database]
            command += ["--redis-url", self.redis.url, "--master-key", MASTER]
            with log.open("wb") as out:
                process = subprocess.Popen(
                    command, stdout=out, stderr=subprocess.STDOUT, cwd=self.workdir
                )
            self.replicas.append(Replica(f"http://127.0.0.1:{port}", process, log))
        for replica in self.replicas:
            _wait_until_up(replica)
        return self.replicas[0], self.replicas[1]

    def key(self, name: str, *limits: str) -> str:
        created = CliRunner().invoke(cli, ["keys", "create", name, *limits, "--db", self.database])
        assert created.exit_code == 0, created.output
        return created.stdout.strip()

    def rows(self, sql: str) -> list[tuple[Any, ...]]:
        """``sql`` on the shared database (asyncpg, from a thread with its own loop)."""
        import asyncpg

        async def fetch() -> list[tuple[Any, ...]]:
            conn = await asyncpg.connect(
                host=self.postgres.host,
                port=self.postgres.port,
                user="postgres",
                database=self.db_name,
            )
            try:
                return [tuple(r) for r in await conn.fetch(sql)]
            finally:
                await conn.close()

        with ThreadPoolExecutor(1) as pool:
            return pool.submit(asyncio.run, fetch()).result(timeout=60)


def _wait_until_up(replica: Replica) -> None:
    def up() -> bool:
        if replica.process.poll() is not None:
            raise AssertionError(f"llmbridge serve exited:\n{replica.log.read_text()[-3000:]}")
        try:
            return httpx.get(replica.url + "/health", timeout=1).status_code == 200
        except httpx.TransportError:
            return False

    wait_until(up, f"{replica.url} serving (log: {replica.log})", START_PATIENCE_S)


@pytest.fixture
def cluster(tmp_path: Path, postgres_server: PostgresServer) -> Iterator[Cluster]:
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server was not found on PATH; install it with `make redis`")
    redis = RedisServer(binary, free_port(), tmp_path)
    redis.start()
    name = "t_" + uuid.uuid4().hex[:12]
    _admin(postgres_server, f'CREATE DATABASE "{name}"')
    made = Cluster(redis, postgres_server.url(name), name, postgres_server, tmp_path)
    try:
        yield made
    finally:
        for replica in made.replicas:
            if replica.process.poll() is None:
                replica.process.terminate()
        for replica in made.replicas:
            try:
                replica.process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                replica.process.kill()
                replica.process.wait(timeout=10)
        redis.stop()
        _admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# -- one request per dialect, returning the usage the client received ------------------


def _openai(url: str, key: str, stream: bool) -> tuple[int, int]:
    client = openai_client(url, key)
    if not stream:
        reply = client.chat.completions.create(model="scripted", messages=HI)
        assert reply.choices[0].message.content and reply.usage is not None
        return reply.usage.prompt_tokens, reply.usage.completion_tokens
    chunks = list(
        client.chat.completions.create(
            model="scripted", messages=HI, stream=True, stream_options={"include_usage": True}
        )
    )
    usage = chunks[-1].usage
    assert usage is not None
    return usage.prompt_tokens, usage.completion_tokens


def _anthropic(url: str, key: str, stream: bool) -> tuple[int, int]:
    client = anthropic_client(url, key)
    if not stream:
        message = client.messages.create(model="scripted", max_tokens=64, messages=HI)
    else:
        with client.messages.stream(model="scripted", max_tokens=64, messages=HI) as events:
            message = events.get_final_message()
    assert message.content
    return message.usage.input_tokens, message.usage.output_tokens


def _ollama(url: str, key: str, stream: bool) -> tuple[int, int]:
    client = ollama_client(url, headers={"Authorization": f"Bearer {key}"})
    if not stream:
        reply = client.chat(model="scripted", messages=HI)
    else:
        reply = list(client.chat(model="scripted", messages=HI, stream=True))[-1]
    assert reply.done and reply.prompt_eval_count is not None and reply.eval_count is not None
    return reply.prompt_eval_count, reply.eval_count


def _gemini(url: str, key: str, stream: bool) -> tuple[int, int]:
    client = genai.Client(api_key=key, http_options=genai_types.HttpOptions(base_url=url))
    try:
        if not stream:
            reply = client.models.generate_content(model="scripted", contents="hi")
        else:
            chunks = list(client.models.generate_content_stream(model="scripted", contents="hi"))
            reply = chunks[-1]
        usage = reply.usage_metadata
        assert usage is not None and usage.prompt_token_count is not None
        output = (usage.candidates_token_count or 0) + (usage.thoughts_token_count or 0)
        return usage.prompt_token_count, output
    finally:
        client.close()


CALLS = {"openai": _openai, "anthropic": _anthropic, "ollama": _ollama, "gemini": _gemini}


def _admin_usage(replica: Replica) -> list[dict[str, Any]]:
    reply = httpx.get(
        replica.url + "/admin/usage",
        params={"group_by": "key"},
        headers={"Authorization": f"Bearer {MASTER}"},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    data: list[dict[str, Any]] = reply.json()["data"]
    return data


def test_usage_totals_equal_the_sum_of_the_replies_usage(cluster: Cluster) -> None:
    first, second = cluster.start()
    key = cluster.key("metered")
    received: list[tuple[int, int]] = []
    n = 0
    for name, call in CALLS.items():
        for stream in (False, True, False, True):
            replica = (first, second)[n % 2]
            n += 1
            usage = call(replica.url, key, stream)
            assert usage[0] > 0 and usage[1] > 0, (name, stream, usage)
            received.append(usage)

    # The ledger writes in batches (about every second): wait for all of them, bounded.
    def written() -> list[dict[str, Any]] | None:
        found = [g for g in _admin_usage(second) if g["group"] == "metered"]
        return found if found and found[0]["requests"] >= len(received) else None

    groups = value_until(written, "every request in the ledger", step=0.2)
    assert len(groups) == 1, groups
    (group,) = groups
    assert group["requests"] == len(received) == 16
    assert group["input_tokens"] == sum(u[0] for u in received)
    assert group["output_tokens"] == sum(u[1] for u in received)
    assert group["errors"] == 0
    # Both replicas wrote their own requests, each once.
    by_replica = dict(
        cluster.rows("SELECT replica, count(*) FROM usage WHERE key_name = 'metered' GROUP BY 1")
    )
    assert by_replica == {first.name: 8, second.name: 8}


def _request(replica: Replica, key: str, model: str = "scripted") -> int:
    """One non-streamed OpenAI request; its status, 0 when the connection failed."""
    try:
        reply = httpx.post(
            replica.url + "/v1/chat/completions",
            headers={"Authorization": f"Bearer {key}"},
            json={"model": model, "messages": HI},
            timeout=30,
        )
    except httpx.TransportError:
        return 0
    return reply.status_code


def _open_stream(replica: Replica, key: str, opened: threading.Barrier) -> None:
    """A streamed request that has its first bytes (so it was admitted and holds a
    slot), then reads until the replica dies under it."""
    body = {"model": "slow", "messages": HI, "stream": True}
    headers = {"Authorization": f"Bearer {key}"}
    with (
        contextlib.suppress(httpx.TransportError),
        httpx.stream(
            "POST", replica.url + "/v1/chat/completions", json=body, headers=headers, timeout=30
        ) as reply,
    ):
        assert reply.status_code == 200
        chunks = reply.iter_raw()
        next(chunks)
        opened.wait(timeout=scaled(30))
        for _ in chunks:
            pass


def _burst(replica: Replica, key: str, count: int) -> list[int]:
    """``count`` slow requests at once (they overlap: each takes about 1.6 s)."""
    with ThreadPoolExecutor(count) as pool:
        return sorted(pool.map(lambda _: _request(replica, key, "slow"), range(count)))


def test_a_replica_killed_mid_load_leaves_the_other_serving_and_nothing_twice(
    cluster: Cluster,
) -> None:
    doomed, survivor = cluster.start()
    key = cluster.key("survivor", "--max-parallel", "8")
    served: list[tuple[float, int]] = []  # (when it was sent, status)
    stop = threading.Event()

    def load() -> None:
        while not stop.is_set():
            sent = time.monotonic()
            served.append((sent, _request(survivor, key)))

    opened = threading.Barrier(5)
    streams = [threading.Thread(target=_open_stream, args=(doomed, key, opened)) for _ in range(4)]
    loaders = [threading.Thread(target=load) for _ in range(2)]
    for thread in [*streams, *loaders]:
        thread.start()
    try:
        opened.wait(timeout=scaled(30))  # 4 streams admitted on the doomed replica: 4 slots
        doomed.process.kill()  # SIGKILL: no release, no flush, no goodbye
        doomed.process.wait(timeout=10)
        killed = time.monotonic()
        wait_until(
            lambda: any(sent > killed for sent, _ in served), "a request served after the kill"
        )
    finally:
        stop.set()
        for thread in [*streams, *loaders]:
            thread.join(timeout=60)
    # The survivor served every request, before and after the kill.
    assert {status for _, status in served} == {200}, served
    assert any(sent > killed for sent, _ in served)
    # The dead replica's 4 slots still count until its heartbeat expires (6 s after
    # its last acquire, state/redis.py): of 6 at once, exactly 4 get a slot.
    first_burst = _burst(survivor, key, 6)
    assert first_burst == [200] * 4 + [429] * 2, first_burst
    # Then they stop counting: the key's 8 slots are whole again (bounded wait).
    bursts = list(first_burst)

    def whole() -> bool:
        burst = _burst(survivor, key, 8)
        bursts.extend(burst)
        assert set(burst) <= {200, 429}, burst  # refused while the slots lived, never 5xx
        return burst == [200] * 8

    wait_until(whole, "the dead replica's slots to stop counting (its heartbeat's TTL)")
    # A graceful stop flushes the survivor's ledger; then count what was recorded.
    survivor.process.terminate()
    survivor.process.wait(timeout=30)
    recorded = cluster.rows(
        "SELECT replica, status, count(*) FROM usage WHERE key_name = 'survivor' GROUP BY 1, 2"
    )
    counts = {(replica, status): n for replica, status, n in recorded}
    # Every request the survivor answered, recorded once, by it, refusals included.
    assert counts[(survivor.name, 200)] == len(served) + bursts.count(200)
    assert counts[(survivor.name, 429)] == bursts.count(429)
    total, distinct = cluster.rows(
        "SELECT count(*), count(DISTINCT request_id) FROM usage WHERE key_name = 'survivor'"
    )[0]
    assert total == distinct
    # The killed replica lost what it had not flushed (its streams never finished);
    # nothing of it was recorded twice or by anyone else.
    assert {replica for replica, _ in counts} <= {doomed.name, survivor.name}
    assert counts.get((doomed.name, 200), 0) == 0


def test_redis_killed_mid_load_no_5xx_degraded_and_limits_per_replica(cluster: Cluster) -> None:
    first, second = cluster.start()
    key = cluster.key("outage", "--rpm", "6")
    before = [_request((first, second)[n % 2], key) for n in range(4)]
    assert before == [200] * 4  # counted once, in Redis
    assert first.health()["status"] == "up"
    cluster.redis.stop()  # SIGKILL: an outage as clients see it
    during = {first.name: [], second.name: []}
    for n in range(16):
        replica = (first, second)[n % 2]
        during[replica.name].append(_request(replica, key))
    every = during[first.name] + during[second.name]
    assert all(status < 500 for status in every), during
    # Each replica counts its own traffic now: 6 a minute each, whatever Redis held.
    for replica in (first, second):
        assert during[replica.name].count(200) == 6, during
        assert during[replica.name].count(429) == 2, during
        assert replica.health()["status"] == "degraded"
    cluster.redis.start()  # the same port, empty
    wait_until(
        lambda: all(r.health()["status"] == "up" for r in (first, second)),
        "both replicas back on Redis",
    )
    assert _request(first, key) == 200  # Redis's window started over when it did
