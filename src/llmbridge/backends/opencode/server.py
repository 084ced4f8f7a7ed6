"""The OpenCode server process: spawned and owned by the gateway, or reached by URL.

A spawned ``opencode serve`` is isolated from the machine it runs on: its own
``HOME`` and ``XDG_*`` directories and an empty working directory, all in one
temporary directory removed at shutdown; its configuration passed whole in
``OPENCODE_CONFIG_CONTENT`` (the highest-priority source, so no file on the host can
change it); the model-catalog fetch, autoupdate, LSP downloads, external plugins and
Claude Code's settings switched off; a package registry pointed at a dead loopback
port, so its background plugin install cannot reach out; and a random password, so
no other local process can drive it. It listens on a free loopback port, parsed from
its ``opencode server listening on URL`` line, and is ready once
``GET /global/health`` answers.

The configuration makes OpenCode a plain LLM: an ``llmbridge`` agent with a short
prompt (replacing the coding-agent prompt) and every tool off, and every permission
denied. The backend also turns tools off on each prompt and creates each session with
a deny-all permission rule, so a server reached by URL is held to the same.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import re
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from llmbridge.core.errors import BackendUnavailableError
from llmbridge.core.hosts import is_loopback_url

__all__ = [
    "AGENT_NAME",
    "OpenCodeProvider",
    "OpenCodeServer",
    "SpawnSettings",
    "basic_auth",
    "local_providers",
    "server_config",
]

log = logging.getLogger("llmbridge.opencode")

AGENT_NAME = "llmbridge"
"""The agent the spawned server defines: a short prompt and no tools."""

AGENT_PROMPT = (
    "You are a helpful assistant answering through an API. Follow the system "
    "instructions you are given and reply to the user's message directly."
)

_LISTENING = re.compile(r"listening on (https?://\S+)")
_USERNAME = "opencode"
# Environment switches that keep a spawned server offline and quiet (see
# shared/reference/opencode-server.md, "What it tries to fetch").
_OFFLINE_ENV = {
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_PROJECT_CONFIG": "1",
    # The background install of @opencode-ai/plugin fails at once instead of fetching.
    "npm_config_registry": "http://127.0.0.1:9/",
}


def basic_auth(password: str | None, username: str = _USERNAME) -> dict[str, str]:
    """The ``authorization`` header for an OpenCode server with a password."""
    if not password:
        return {}
    token = base64.b64encode(f"{username}:{password}".encode()).decode()
    return {"authorization": f"Basic {token}"}


@dataclass(frozen=True, slots=True)
class OpenCodeProvider:
    """An OpenAI-compatible server written into the spawned OpenCode's configuration."""

    base_url: str
    models: Mapping[str, Mapping[str, int]] = field(default_factory=dict)
    """Model id -> limits such as ``{"context": 8192, "output": 1024}``."""
    api_key: str | None = None
    name: str | None = None
    local: bool = False
    """Serves its models from this machine though ``base_url`` may not say so (the
    gateway itself, ``url: self``, bound to a public address)."""


@dataclass(frozen=True, slots=True)
class SpawnSettings:
    command: str = "opencode"
    default_model: str | None = None
    """``PROVIDER/MODEL`` for the server's ``model`` setting."""
    providers: Mapping[str, OpenCodeProvider] = field(default_factory=dict)
    extra_config: Mapping[str, Any] = field(default_factory=dict)
    """Merged over the generated configuration (a user's own providers, say)."""
    startup_timeout: float = 60.0
    plain: bool = True
    """OpenCode as a plain LLM (the gateway's backend): the ``llmbridge`` agent and
    every permission denied. ``False`` (the profiler, which measures OpenCode as the
    agent it is) leaves agents and permissions to ``extra_config``."""
    environment: Mapping[str, str] | None = None
    """The variables the server gets besides its isolation and offline switches;
    ``None`` passes the gateway's own environment on (so provider keys work)."""


def local_providers(settings: SpawnSettings | None) -> set[str]:
    """The providers of a spawned server that serve their models from this machine:
    those marked ``local`` and those whose base URL is a loopback address, including
    the ones ``extra_config`` defines (an Ollama on 127.0.0.1, say)."""
    if settings is None:
        return set()
    local = {pid for pid, p in settings.providers.items() if p.local or is_loopback_url(p.base_url)}
    extra = settings.extra_config.get("provider")
    for pid, spec in extra.items() if isinstance(extra, Mapping) else []:
        options = spec.get("options") if isinstance(spec, Mapping) else None
        base_url = options.get("baseURL") if isinstance(options, Mapping) else None
        if isinstance(base_url, str) and is_loopback_url(base_url):
            local.add(str(pid))
    return local


def server_config(settings: SpawnSettings) -> dict[str, Any]:
    """The complete configuration given to a spawned server."""
    config: dict[str, Any] = {
        "autoupdate": False,
        "share": "disabled",
        "instructions": [],
        "plugin": [],
    }
    if settings.plain:
        config["permission"] = "deny"
        config["agent"] = {
            AGENT_NAME: {
                "mode": "primary",
                "prompt": AGENT_PROMPT,
                "tools": {"*": False},
                "permission": "deny",
            }
        }
    if settings.default_model:
        # The small model is what OpenCode would use for titles and summaries; every
        # session gets a title, but a configured main model keeps it off the network.
        config["model"] = config["small_model"] = settings.default_model
    if settings.providers:
        config["provider"] = {
            pid: {
                "npm": "@ai-sdk/openai-compatible",
                "name": p.name or pid,
                "options": {"baseURL": p.base_url, "apiKey": p.api_key or "none"},
                "models": {
                    mid: ({"limit": dict(limits)} if limits else {})
                    for mid, limits in p.models.items()
                },
            }
            for pid, p in settings.providers.items()
        }
    return _merge(config, settings.extra_config)


def _merge(base: dict[str, Any], extra: Mapping[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, Mapping) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


class OpenCodeServer:
    """Where the OpenCode server is, and, for a spawned one, its process.

    ``url`` is ``None`` until ``start`` (spawned) or fixed from the start (by URL).
    """

    def __init__(
        self,
        *,
        url: str | None = None,
        password: str | None = None,
        spawn: SpawnSettings | None = None,
    ) -> None:
        if (url is None) == (spawn is None):
            raise ValueError("give either the URL of a running server or spawn settings")
        self.url = url.rstrip("/") if url else None
        self.password = password
        self.spawn = spawn
        self.restarts = 0
        self._process: asyncio.subprocess.Process | None = None
        self._home: tempfile.TemporaryDirectory[str] | None = None
        self._reader: asyncio.Task[None] | None = None
        self._lock = asyncio.Lock()

    @property
    def spawned(self) -> bool:
        return self.spawn is not None

    @property
    def exited(self) -> bool:
        """A spawned server whose process has ended (never true for a URL)."""
        return self.spawned and (self._process is None or self._process.returncode is not None)

    @property
    def workdir(self) -> Path | None:
        """A spawned server's (empty, temporary) project directory."""
        return None if self._home is None else Path(self._home.name) / "work"

    @property
    def headers(self) -> dict[str, str]:
        return basic_auth(self.password)

    async def start(self) -> None:
        if self.spawn is not None:
            await self._spawn(self.spawn)

    async def restart_if_exited(self) -> bool:
        """Restart a spawned server that died; ``True`` when it was restarted.

        Concurrent callers share one restart. A failed restart raises
        ``BackendUnavailableError``; the next caller tries again.
        """
        if not self.exited:
            return False
        async with self._lock:
            if not self.exited:
                return True  # another request restarted it meanwhile
            assert self.spawn is not None
            if self._process is not None:
                code = self._process.returncode
                log.warning("the OpenCode server exited (code %s); restarting it", code)
                self.restarts += 1
            await self._stop_process()
            await self._spawn(self.spawn)
            return True

    async def stop(self) -> None:
        await self._stop_process()
        if self._home is not None:
            self._home.cleanup()
            self._home = None

    # -- spawning -----------------------------------------------------------------

    def _command(self, command: str) -> str:
        found = shutil.which(command)
        if found is None:
            raise BackendUnavailableError(
                f"cannot start OpenCode: '{command}' is not on PATH. Install it with "
                "`npm install -g opencode-ai@1.18.33`, set the backend's `command` to the "
                "binary, or connect to a running server with --opencode-url"
            )
        # Absolute: the server runs in its own working directory, where a relative
        # path (tests/e2e/node_modules/.bin/opencode) would not resolve.
        return os.path.abspath(found)

    def _environment(self, home: Path, settings: SpawnSettings) -> dict[str, str]:
        inherited = os.environ if settings.environment is None else settings.environment
        env = {k: v for k, v in inherited.items() if not k.startswith("OPENCODE_")}
        env.setdefault("PATH", os.environ.get("PATH", "/usr/bin:/bin"))
        for name, sub in (
            ("HOME", "home"),
            ("XDG_CONFIG_HOME", "config"),
            ("XDG_DATA_HOME", "data"),
            ("XDG_CACHE_HOME", "cache"),
            ("XDG_STATE_HOME", "state"),
        ):
            path = home / sub
            path.mkdir(parents=True, exist_ok=True)
            env[name] = str(path)
        env.update(_OFFLINE_ENV)
        env["OPENCODE_CONFIG_CONTENT"] = orjson.dumps(server_config(settings)).decode()
        assert self.password is not None
        env["OPENCODE_SERVER_PASSWORD"] = self.password
        return env

    async def _spawn(self, settings: SpawnSettings) -> None:
        command = self._command(settings.command)
        if self._home is None:
            self._home = tempfile.TemporaryDirectory(prefix="llmbridge-opencode-")
        home = Path(self._home.name)
        workdir = home / "work"  # an empty project directory, whatever happens in it
        workdir.mkdir(exist_ok=True)
        self.password = self.password or secrets.token_urlsafe(24)
        process = await asyncio.create_subprocess_exec(
            command,
            "serve",
            "--port",
            "0",
            "--hostname",
            "127.0.0.1",
            "--pure",
            cwd=workdir,
            env=self._environment(home, settings),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        self._process = process
        try:
            async with asyncio.timeout(settings.startup_timeout):
                url = await self._await_listening(process)
        except TimeoutError:
            await self._stop_process()
            raise BackendUnavailableError(
                f"OpenCode did not start listening within {settings.startup_timeout:g} s"
            ) from None
        self.url = url
        self._reader = asyncio.create_task(self._log_output(process))
        log.info("OpenCode server pid %d listening on %s", process.pid, url)

    async def _await_listening(self, process: asyncio.subprocess.Process) -> str:
        assert process.stdout is not None
        seen: list[str] = []
        while True:
            raw = await process.stdout.readline()
            if not raw:
                await process.wait()
                output = " | ".join(seen[-5:]) or "no output"
                raise BackendUnavailableError(
                    f"OpenCode exited with code {process.returncode} before listening: {output}"
                )
            line = raw.decode("utf-8", errors="replace").strip()
            seen.append(line)
            if match := _LISTENING.search(line):
                return match.group(1).rstrip("/")

    async def _log_output(self, process: asyncio.subprocess.Process) -> None:
        # Keeps the pipe drained (a full pipe would block the server) and its log ours.
        assert process.stdout is not None
        while raw := await process.stdout.readline():
            log.debug("opencode: %s", raw.decode("utf-8", errors="replace").rstrip())

    async def _stop_process(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.returncode is None:
            process.terminate()
            try:
                async with asyncio.timeout(5):
                    await process.wait()
            except TimeoutError:
                process.kill()
                await process.wait()
        if self._reader is not None:
            self._reader.cancel()
            self._reader = None
