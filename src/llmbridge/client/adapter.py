"""``OllamaAdapter``: seed 003's adapter, over any llmbridge backend.

It owns the per-call flow: resolve the model, translate the prompt (with R1 merging
where the model needs it) and the tools, build one neutral ``ChatRequest``, and hand
it to its engine (``client.transports``). ``call`` shapes the engine's neutral events
as ART's ``StreamEvent`` values (``client.art_events``); ``chat`` and ``stream`` give
the neutral response and events to people who do not want ART's shape.
"""

from __future__ import annotations

import os
import time
from collections.abc import AsyncGenerator, Iterable, Mapping, Sequence
from contextlib import aclosing
from types import TracebackType
from typing import Any, Self

from llmbridge.backends.http import HTTPSettings
from llmbridge.backends.ollama import OllamaBackend
from llmbridge.backends.openai_compat import OpenAICompatBackend, normalise_base_url
from llmbridge.client.art_events import art_events
from llmbridge.client.events import AdapterError, EventType, StreamEvent
from llmbridge.client.prompt import (
    Prompt,
    merge_consecutive_roles,
    needs_role_merging,
    translate_prompt,
)
from llmbridge.client.request import (
    RuntimeProviderConfig,
    ToolSchema,
    build_chat_request,
    resolve_model,
    translate_tools,
)
from llmbridge.client.transports import (
    AnthropicTransport,
    ChatEngine,
    OpenAISDKTransport,
    ollama_openai_url,
)
from llmbridge.core.accumulate import accumulate
from llmbridge.core.request import ChatRequest
from llmbridge.core.response import ChatResponse
from llmbridge.core.stream import EventStream

__all__ = ["DEFAULT_OLLAMA_URL", "OllamaAdapter"]

DEFAULT_OLLAMA_URL = "http://localhost:11434"
DEFAULT_GATEWAY_URL = "http://127.0.0.1:11435"
DEFAULT_ANTHROPIC_URL = "https://api.anthropic.com"
R1_MODELS: tuple[str, ...] = ("deepseek-r1",)

RuntimeConfig = RuntimeProviderConfig | Mapping[str, Any] | None


class OllamaAdapter:
    """Typed event streams from Ollama, any OpenAI-compatible server, Anthropic or llmbridge.

    ``OllamaAdapter(...)`` is the seed's adapter: Ollama's OpenAI-compatible API at
    ``base_url + "/v1"`` through the official ``openai`` client. The class methods
    ``native``, ``openai_compatible``, ``anthropic``, ``gateway`` and ``from_backend``
    build the same adapter over another engine. Use it as an async context manager (or
    call ``aclose``) to close its connections.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_OLLAMA_URL,
        default_model: str | None = None,
        api_key: str = "ollama",
        merge_roles_models: Iterable[str] = R1_MODELS,
        *,
        timeout: float = 600.0,
        max_retries: int = 2,
        engine: ChatEngine | None = None,
        neutral_stop_reasons: bool = False,
    ) -> None:
        """
        Args:
            base_url: the Ollama server; ``/v1`` is appended (a trailing ``/v1`` is
                not doubled).
            default_model: the model when neither the call nor the runtime config
                names one.
            api_key: sent as the bearer token; Ollama ignores it unless secured.
            merge_roles_models: model-name fragments (case-insensitive) that get
                R1-style merging of consecutive same-role messages.
            timeout, max_retries: passed to the ``openai`` client (its defaults are
                600 s and 2 retries of connection errors, 408/409/429 and 5xx).
            engine: use this engine instead of the ``openai`` client (the other
                constructors pass it).
            neutral_stop_reasons: METADATA's ``stop_reason`` in llmbridge's neutral
                names (``end_turn``, ``tool_use``, ``max_tokens``...) instead of the
                seed's, the provider's ``finish_reason`` (``stop``, ``tool_calls``,
                ``length``...), which ART code checks.
        """
        self.default_model = default_model
        self.neutral_stop_reasons = neutral_stop_reasons
        self.merge_roles_models = tuple(merge_roles_models)
        if engine is None:
            base_url = ollama_openai_url(base_url)
            engine = OpenAISDKTransport(base_url, api_key, timeout=timeout, max_retries=max_retries)
        self.base_url = base_url
        self.engine: ChatEngine = engine

    # -- other engines -------------------------------------------------------------

    @classmethod
    def _over(
        cls,
        engine: ChatEngine,
        base_url: str,
        default_model: str | None,
        merge_roles_models: Iterable[str],
        neutral_stop_reasons: bool,
    ) -> Self:
        """An adapter over an already-built engine (every constructor but the default)."""
        return cls(
            base_url,
            default_model,
            merge_roles_models=merge_roles_models,
            engine=engine,
            neutral_stop_reasons=neutral_stop_reasons,
        )

    @classmethod
    def native(
        cls,
        base_url: str = DEFAULT_OLLAMA_URL,
        *,
        default_model: str | None = None,
        api_key: str | None = None,
        merge_roles_models: Iterable[str] = R1_MODELS,
        http: HTTPSettings | None = None,
        neutral_stop_reasons: bool = False,
    ) -> Self:
        """Ollama's native API (``/api/chat``) through llmbridge's ``OllamaBackend``."""
        backend = OllamaBackend("ollama", base_url, api_key=api_key, http=http)
        return cls._over(
            backend, backend.base_url, default_model, merge_roles_models, neutral_stop_reasons
        )

    @classmethod
    def openai_compatible(
        cls,
        base_url: str,
        *,
        api_key: str | None = None,
        default_model: str | None = None,
        merge_roles_models: Iterable[str] = R1_MODELS,
        http: HTTPSettings | None = None,
        neutral_stop_reasons: bool = False,
    ) -> Self:
        """Any OpenAI-compatible server (vLLM, llama.cpp, OpenAI) via ``OpenAICompatBackend``.

        A URL without a path gets ``/v1``; one with a path is used as given.
        """
        backend = OpenAICompatBackend("openai", base_url, api_key=api_key, http=http)
        return cls._over(
            backend, backend.base_url, default_model, merge_roles_models, neutral_stop_reasons
        )

    @classmethod
    def gateway(
        cls,
        base_url: str = DEFAULT_GATEWAY_URL,
        *,
        api_key: str | None = None,
        default_model: str | None = None,
        merge_roles_models: Iterable[str] = R1_MODELS,
        http: HTTPSettings | None = None,
        neutral_stop_reasons: bool = False,
    ) -> Self:
        """An llmbridge gateway, through its OpenAI front (``/v1``)."""
        backend = OpenAICompatBackend(
            "llmbridge", normalise_base_url(base_url), api_key=api_key, http=http
        )
        return cls._over(
            backend, backend.base_url, default_model, merge_roles_models, neutral_stop_reasons
        )

    @classmethod
    def anthropic(
        cls,
        base_url: str = DEFAULT_ANTHROPIC_URL,
        *,
        api_key: str | None = None,
        default_model: str | None = None,
        merge_roles_models: Iterable[str] = R1_MODELS,
        http: HTTPSettings | None = None,
        neutral_stop_reasons: bool = False,
    ) -> Self:
        """Anthropic's Messages API, or any server with an Anthropic front (the gateway's).

        ``api_key`` defaults to the ``ANTHROPIC_API_KEY`` environment variable.
        """
        key = api_key if api_key is not None else os.environ.get("ANTHROPIC_API_KEY")
        engine = AnthropicTransport(base_url, key, http=http)
        return cls._over(
            engine, engine.base_url, default_model, merge_roles_models, neutral_stop_reasons
        )

    @classmethod
    def from_backend(
        cls,
        backend: ChatEngine,
        *,
        default_model: str | None = None,
        merge_roles_models: Iterable[str] = R1_MODELS,
        neutral_stop_reasons: bool = False,
    ) -> Self:
        """Over any llmbridge backend (embedded, scripted, ...) or engine, in process."""
        base_url = getattr(backend, "base_url", "")
        return cls._over(
            backend,
            base_url if isinstance(base_url, str) else "",
            default_model,
            merge_roles_models,
            neutral_stop_reasons,
        )

    # -- lifecycle -----------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the engine's connections."""
        await self.engine.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- requests ------------------------------------------------------------------

    def build_request(
        self,
        prompt: Prompt,
        *,
        model: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        provider_config: RuntimeConfig = None,
        **params: Any,
    ) -> ChatRequest:
        """The neutral request a call sends.

        Raises:
            AdapterError: ``INVALID_CONFIG`` (no model, a bad tool schema, parameter or
                runtime config) or ``PROMPT_TRANSLATION_FAILED``.
        """
        config = RuntimeProviderConfig.coerce(provider_config)
        resolved = resolve_model(model, config.model_id, self.default_model)
        messages = translate_prompt(prompt)
        if needs_role_merging(resolved, self.merge_roles_models):
            messages = merge_consecutive_roles(messages)
        merged_params = {**config.adapter_options, **params}
        return build_chat_request(resolved, messages, translate_tools(tools), merged_params)

    # -- ART's shape ---------------------------------------------------------------

    async def call(
        self,
        prompt: Prompt,
        *,
        model: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        stream: bool = True,
        call_context: str | None = None,
        provider_config: RuntimeConfig = None,
        **params: Any,
    ) -> AsyncGenerator[StreamEvent, None]:
        """Events for one call: TOKEN*, METADATA, END; or ERROR, END on failure.

        Never raises for a configuration, prompt or provider error: each is an ERROR
        event (``AdapterError`` data) followed by END. ``stream=False`` yields one
        response TOKEN (preceded by one thinking TOKEN when the model reasoned).
        ``call_context="AGENT_THOUGHT"`` makes tokens ``AGENT_THOUGHT_LLM_*``; anything
        else ``FINAL_SYNTHESIS_LLM_*``. ``provider_config`` is ART's runtime config.
        """
        started = time.perf_counter()
        try:
            request = self.build_request(
                prompt, model=model, tools=tools, provider_config=provider_config, **params
            )
        except AdapterError as exc:
            yield StreamEvent(EventType.ERROR, exc)
            yield StreamEvent(EventType.END)
            return

        def open_stream() -> EventStream:
            return self.engine.chat(request)

        events = art_events(
            open_stream,
            request,
            streaming=stream,
            call_context=call_context,
            started=started,
            neutral_stop_reasons=self.neutral_stop_reasons,
        )
        async with aclosing(events):
            async for event in events:
                yield event

    # -- the plain API -------------------------------------------------------------

    def stream(
        self,
        prompt: Prompt,
        *,
        model: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        provider_config: RuntimeConfig = None,
        **params: Any,
    ) -> EventStream:
        """The engine's neutral events (``llmbridge.core.events``) for one request.

        Close the stream (``contextlib.aclosing``) when stopping before its end, so the
        provider's connection is released at once.

        Raises:
            AdapterError: at once, for a configuration or prompt error.
            llmbridge.core.errors.LLMBridgeError: while iterating, for a provider
                failure before or during the stream. An error the provider reports
                inside its stream is yielded as ``StreamError``.
        """
        request = self.build_request(
            prompt, model=model, tools=tools, provider_config=provider_config, **params
        )
        return self.engine.chat(request)

    async def chat(
        self,
        prompt: Prompt,
        *,
        model: str | None = None,
        tools: Sequence[ToolSchema] | None = None,
        provider_config: RuntimeConfig = None,
        **params: Any,
    ) -> ChatResponse:
        """The complete neutral response (the accumulated stream).

        Raises:
            AdapterError: for a configuration or prompt error.
            llmbridge.core.errors.LLMBridgeError: for any provider failure.
        """
        events = self.stream(
            prompt, model=model, tools=tools, provider_config=provider_config, **params
        )
        # aclosing: an error that stops the accumulation closes the stream now.
        async with aclosing(events):
            return await accumulate(events)
