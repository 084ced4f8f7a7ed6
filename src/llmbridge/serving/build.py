"""Backend construction: one configured backend from its configuration section.

Imports are lazy, so a configuration without the embedded model never loads
llama.cpp's bindings, and one without OpenCode never imports its client. ``Host``
says what a backend needs to know of the process that serves it: the gateway's own
``/v1`` address and key (OpenCode providers given as ``self`` call back into it) and
the size above which request bodies are encoded off the event loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from llmbridge.backends.base import Backend
from llmbridge.core.request_limits import RequestLimits
from llmbridge.serving.config import BackendConfig, OpenCodeBackendConfig, ServingConfig

__all__ = ["Host", "build_backend", "build_backends"]


@dataclass(frozen=True, slots=True)
class Host:
    """What backends need to know of the process serving them."""

    own_url: str | None = None
    """This gateway's OpenAI-compatible base URL (``http://127.0.0.1:PORT/v1``), for
    OpenCode providers given as ``self``; ``None`` when nothing serves HTTP."""
    own_key: str | None = None
    """A key this gateway accepts, sent by those providers."""
    offload_bytes: int = RequestLimits().offload_bytes
    """Requests estimated larger than this are encoded in a worker thread."""


def build_backends(config: ServingConfig, host: Host | None = None) -> dict[str, Backend]:
    """Every configured backend, by name (not started)."""
    return {name: build_backend(name, cfg, host) for name, cfg in config.backends.items()}


def build_backend(name: str, config: BackendConfig, host: Host | None = None) -> Backend:
    """Instantiate one configured backend (not started)."""
    host = host or Host()
    if config.type == "embedded":
        from llmbridge.backends.embedded.backend import EmbeddedBackend

        # Unset settings keep the backend's defaults (its module says why).
        optional = {"flash_attn": config.flash_attn} if config.flash_attn is not None else {}
        return EmbeddedBackend(
            name,
            model_path=config.model_path,
            public_name=config.public_name,
            n_ctx=config.n_ctx,
            n_threads=config.n_threads,
            max_output_tokens=config.max_output_tokens,
            max_queue=config.max_queue,
            queue_timeout=config.queue_timeout_s,
            max_embed_inputs=config.max_embed_inputs,
            **optional,
        )
    if config.type == "scripted":
        from llmbridge.backends.scripted import Script, ScriptedBackend

        size = max(1, len(config.reply) // config.chunks)
        chunks = [config.reply[i : i + size] for i in range(0, len(config.reply), size)]
        script = Script(text=chunks, chunk_delay=config.chunk_delay_ms / 1000)
        return ScriptedBackend(name, default=script, models=config.models)
    if config.type == "opencode":
        return _build_opencode(name, config, host)
    from llmbridge.backends.http import HTTPSettings

    http = HTTPSettings(
        connect=config.connect_timeout,
        read=config.read_timeout,
        total=config.total_timeout,
        max_connections=config.max_connections,
        keep_alive=config.keep_alive_s,
        offload_bytes=host.offload_bytes,
    )
    if config.type == "anthropic":
        from llmbridge.backends.anthropic import AnthropicBackend

        return AnthropicBackend(name, config.url, api_key=config.api_key, http=http)
    if config.type == "gemini":
        from llmbridge.backends.gemini import GeminiBackend

        return GeminiBackend(name, config.url, api_key=config.api_key, http=http)
    if config.type == "gemini_interactions":
        from llmbridge.backends.gemini_interactions import GeminiInteractionsBackend

        return GeminiInteractionsBackend(name, config.url, api_key=config.api_key, http=http)
    backend: Backend
    if config.type == "ollama":
        from llmbridge.backends.ollama import OllamaBackend

        backend = OllamaBackend(name, config.url, api_key=config.api_key, http=http)
        backend.with_structured_output(config.structured_output)
        return backend
    if config.type == "openai_responses":
        from llmbridge.backends.openai_responses import OpenAIResponsesBackend

        return OpenAIResponsesBackend(
            name,
            config.url,
            api_key=config.api_key,
            http=http,
            compaction=config.compaction != "summary",
        )
    from llmbridge.backends.openai_compat import OpenAICompatBackend

    backend = OpenAICompatBackend(name, config.url, api_key=config.api_key, http=http)
    backend.with_structured_output(config.structured_output)
    return backend


def _build_opencode(name: str, config: OpenCodeBackendConfig, host: Host) -> Backend:
    from llmbridge.backends.opencode import (
        OpenCodeBackend,
        OpenCodeProvider,
        OpenCodeTimeouts,
        SpawnSettings,
    )
    from llmbridge.backends.opencode.deadlines import for_local_provider

    timeouts = OpenCodeTimeouts(
        prompt=config.prompt_timeout,
        idle=config.idle_timeout,
        total=config.total_timeout,
        delete=config.delete_timeout,
    )
    # A model on this machine evaluates OpenCode's prompt on its CPU or GPU first:
    # longer deadlines unless the file sets them (backends/opencode/deadlines.py).
    local = for_local_provider(timeouts, frozenset(config.model_fields_set))
    common: dict[str, Any] = {
        "default_model": config.model,
        "timeouts": timeouts,
        "local_timeouts": local if local.local else None,
        "pool_size": config.pool_size,
    }
    if config.url is not None:
        return OpenCodeBackend(name, url=config.url, password=config.password, **common)
    providers: dict[str, OpenCodeProvider] = {}
    for pid, p in config.providers.items():
        own = p.url == "self"
        if own and host.own_url is None:
            raise ValueError(
                f"OpenCode provider {pid!r} is 'self', but nothing serves HTTP here: "
                "give its url instead"
            )
        providers[pid] = OpenCodeProvider(
            base_url=host.own_url if own and host.own_url else p.url,
            api_key=host.own_key if own and not p.api_key else p.api_key,
            models={
                mid: {k: v for k, v in limits.model_dump().items() if v is not None}
                for mid, limits in p.models.items()
            },
            local=own,
        )
    spawn = SpawnSettings(
        command=config.command,
        default_model=config.model,
        providers=providers,
        extra_config=config.opencode_config,
        startup_timeout=config.startup_timeout,
    )
    return OpenCodeBackend(name, spawn=spawn, **common)
