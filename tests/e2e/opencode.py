"""A gateway whose ``opencode`` backend spawns the real, pinned OpenCode server.

OpenCode's model provider is the same gateway (the ``self`` provider URL): OpenCode
calls back into ``/v1/chat/completions``, where the model names route to the other
backends given (a scripted one for exact decision paths, the embedded model for real
generations). So every test drives the real ``opencode serve`` from npm on loopback,
and nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from llmbridge.backends.base import Backend
from llmbridge.backends.opencode import OpenCodeBackend
from llmbridge.gateway.app import create_app
from llmbridge.gateway.config import GatewayConfig
from llmbridge.serving.build import build_backend
from tests.conftest import RunningServer
from tests.e2e.clients import BIN
from tests.waiting import wait_until

OPENCODE = BIN / "opencode"


STARTUP_SECONDS = 180.0
"""How long the gateway may take to start: its startup spawns OpenCode and waits for
it, and loads the embedded model, which on a loaded 2-core machine takes longer than
``RunningServer``'s 10 s."""


class _SlowStartingServer(RunningServer):
    """``RunningServer`` given ``STARTUP_SECONDS`` to start, and stopped (so its OpenCode
    is too) when it does not start in time."""

    def __enter__(self) -> RunningServer:
        self._thread.start()

        def started() -> bool:
            if not self._thread.is_alive():
                raise RuntimeError("the gateway failed to start")
            return bool(self.server.started)

        try:
            wait_until(started, "the gateway over OpenCode started", STARTUP_SECONDS)
        except AssertionError:
            self.__exit__(None, None, None)
            raise
        return self


def opencode_binary() -> str:
    """The pinned binary (the newest under ``make compat``). Missing means the suite was
    not set up: fail, never skip."""
    if not os.access(OPENCODE, os.X_OK):
        pytest.fail(
            f"{OPENCODE} is missing. Run `make test` (or `make install`), which installs "
            "the pinned opencode-ai in tests/e2e/.",
            pytrace=False,
        )
    return str(OPENCODE)


@contextmanager
def gateway_over_opencode(
    others: dict[str, Backend],
    provider_models: dict[str, dict[str, int]],
    *,
    default_model: str,
    routes: list[dict[str, Any]],
    provider_url: str = "self",
    **opencode: Any,
) -> Iterator[tuple[RunningServer, OpenCodeBackend]]:
    """The gateway with ``others`` plus an ``opencode`` backend (the default) whose
    provider ``gw`` serving ``provider_models`` is this gateway, or the one at
    ``provider_url``."""
    sock = RunningServer.reserve()
    port = sock.getsockname()[1]
    settings: dict[str, Any] = {
        # health_cache_s 0: the tests read /health right after killing the server.
        "server": {"port": port, "health_cache_s": 0},
        "backends": {
            **{name: {"type": "scripted"} for name in others},
            "opencode": {
                "type": "opencode",
                "command": opencode_binary(),
                "model": default_model,
                "providers": {"gw": {"url": provider_url, "models": provider_models}},
                **opencode,
            },
        },
        "models": routes,
        "default_backend": "opencode",
    }
    config = GatewayConfig.model_validate(settings)
    backend = build_backend("opencode", config.backends["opencode"], config.server.serving_host())
    assert isinstance(backend, OpenCodeBackend)
    app = create_app(config, backends={**others, "opencode": backend})
    started = time.monotonic()
    with _SlowStartingServer(app, sock=sock) as server:
        print(f"gateway over OpenCode started in {time.monotonic() - started:.1f} s")
        yield server, backend
