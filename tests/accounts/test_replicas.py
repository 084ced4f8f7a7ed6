"""Two replicas, one limit: two ``llmbridge serve`` processes on different
ports sharing one Redis (the limits' windows) and one PostgreSQL database (the keys).
A key with ``--rpm 10`` gets exactly 10 successes out of 30 requests alternated between
the two, in each dialect, through its official client: the window is counted once in
Redis, not once per replica (LiteLLM #27736, #40291)."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest
from click.testing import CliRunner

from llmbridge.cli import cli
from llmbridge.web.render import Dialect
from tests.accounts.test_limits import DIALECTS, Call, _attempt
from tests.servers import PostgresServer, RedisServer, _admin, free_port
from tests.waiting import serving

MASTER = "sk-master-replicas"


@pytest.fixture(scope="module")
def replicas(
    tmp_path_factory: pytest.TempPathFactory,
    postgres_server: PostgresServer,
    redis_server: RedisServer,
) -> Iterator[tuple[str, str, str]]:
    """Two gateways on one new PostgreSQL database and one emptied Redis, for the
    module: their URLs, and the database's."""
    tmp_path = tmp_path_factory.mktemp("replicas")
    name = "t_" + uuid.uuid4().hex[:12]
    _admin(postgres_server, f'CREATE DATABASE "{name}"')
    pg_url = postgres_server.url(name)
    redis_server.flush()
    redis_url = redis_server.url
    config = tmp_path / "llmbridge.yaml"
    config.write_text(
        "backends: {scripted: {type: scripted, models: [scripted]}}\ndefault_backend: scripted\n"
    )
    processes: list[subprocess.Popen[str]] = []
    urls: list[str] = []
    try:
        for _ in range(2):
            port = free_port()
            command = [sys.executable, "-m", "llmbridge", "serve", "--config", str(config)]
            command += ["--port", str(port), "--db", pg_url, "--redis-url", redis_url]
            command += ["--master-key", MASTER]
            processes.append(
                subprocess.Popen(
                    command,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.PIPE,
                    text=True,
                    cwd=tmp_path,
                )
            )
            urls.append(f"http://127.0.0.1:{port}")
        for url, process in zip(urls, processes, strict=True):
            _wait_until_up(url, process)
        yield urls[0], urls[1], pg_url
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()
        _admin(postgres_server, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def _wait_until_up(url: str, process: subprocess.Popen[str]) -> None:
    serving(url, process)


@pytest.mark.parametrize(
    ("dialect", "call", "error"), DIALECTS, ids=[str(d) for d, _, _ in DIALECTS]
)
def test_rpm_10_is_10_across_two_replicas(
    replicas: tuple[str, str, str], dialect: Dialect, call: Call, error: type[Exception]
) -> None:
    first, second, database = replicas
    # The key made by the CLI on the shared database, as an operator would.
    name = f"shared-{dialect}"
    created = CliRunner().invoke(cli, ["keys", "create", name, "--rpm", "10", "--db", database])
    assert created.exit_code == 0, created.output
    key = created.stdout.strip()
    statuses = [_attempt(call, error, (first, second)[n % 2], key)[0] for n in range(30)]
    assert statuses.count(200) == 10, statuses
    assert statuses.count(429) == 20, statuses
    assert statuses[:10] == [200] * 10  # nothing was refused while the window had room
