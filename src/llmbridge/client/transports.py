"""How the adapter reaches a model: engines that turn a ``ChatRequest`` into neutral events.

An engine is anything whose ``chat`` is a ``core.stream.ChatFn`` (a request in, a
closeable ``EventStream`` of neutral events out) and that has ``aclose()`` for its
connections: exactly the ``backends.base.Backend`` contract, so every llmbridge
backend is an engine (the native Ollama, OpenAI-compatible and gateway constructors
use ``OllamaBackend`` and ``OpenAICompatBackend`` as they are). Two more live here:

- ``OpenAISDKTransport``: the seed's way, through the official ``openai`` client. The
  body is built by ``dialects.openai.encode_chat_request``, sent with the SDK's raw
  streaming response, and the SSE bytes are decoded by ``dialects.framing.aiter_sse``
  and ``dialects.openai.decode_chat_stream``: the same code the gateway runs. The SDK's
  exceptions are mapped to ``core.errors`` here and nowhere else. Its HTTP client
  belongs to one event loop, so there is one ``AsyncOpenAI`` per loop
  (``backends.loop_bound``), as there is one aiohttp pool per loop in the backends.
- ``AnthropicTransport``: ``/v1/messages``, the ``backends.anthropic.AnthropicBackend``
  under the adapter's own name.
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol

from llmbridge.backends.anthropic import ANTHROPIC_VERSION, AnthropicBackend
from llmbridge.backends.http import HTTPSettings, error_message
from llmbridge.backends.loop_bound import LoopBound
from llmbridge.core.errors import (
    BackendError,
    BackendHTTPError,
    BackendTimeoutError,
    BackendUnavailableError,
)
from llmbridge.core.events import StreamEvent
from llmbridge.core.request import ChatRequest
from llmbridge.core.stream import EventStream
from llmbridge.dialects import openai as openai_dialect
from llmbridge.dialects.framing import aiter_sse

if TYPE_CHECKING:
    import openai

__all__ = [
    "AnthropicTransport",
    "ChatEngine",
    "OpenAISDKTransport",
    "ollama_openai_url",
]

_DRAIN_LIMIT = 64 * 1024


class ChatEngine(Protocol):
    """What the adapter needs from a backend (``backends.base.Backend`` satisfies it).

    More than a ``ChatFn``: the adapter owns its engine and closes its connections
    (``aclose``). ``engine.chat`` itself is a ``ChatFn``."""

    def chat(self, request: ChatRequest) -> EventStream: ...

    async def aclose(self) -> None: ...


def ollama_openai_url(base_url: str) -> str:
    """Ollama's OpenAI-compatible root: ``base_url`` without a trailing ``/v1``, plus ``/v1``."""
    url = base_url.rstrip("/")
    url = url.removesuffix("/v1").rstrip("/")
    return url + "/v1"


class OpenAISDKTransport:
    """Chat completions through the official ``openai`` client, parsed by llmbridge's codec."""

    def __init__(
        self,
        base_url: str,
        api_key: str,
        *,
        name: str = "ollama",
        timeout: float = 600.0,
        max_retries: int = 2,
    ) -> None:
        try:
            import openai
        except ImportError as exc:  # pragma: no cover - depends on the environment
            raise ImportError(
                "OllamaAdapter's default constructor uses the official openai client: "
                "pip install openai (or use OllamaAdapter.native / .openai_compatible)"
            ) from exc
        self.name = name
        self.base_url = base_url

        def new_client() -> openai.AsyncOpenAI:
            return openai.AsyncOpenAI(
                base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
            )

        self._clients: LoopBound[openai.AsyncOpenAI] = LoopBound(new_client, _close_client)

    @property
    def client(self) -> openai.AsyncOpenAI:
        """The running event loop's ``AsyncOpenAI`` (made on first use in that loop)."""
        return self._clients.get()

    async def aclose(self) -> None:
        await self._clients.aclose()

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        body = openai_dialect.encode_chat_request(replace(request, stream=True))
        model, messages = body.pop("model"), body.pop("messages")
        del body["stream"]
        create = self.client.chat.completions.with_streaming_response.create
        async with (
            _mapped_sdk_errors(self.name),
            create(model=model, messages=messages, stream=True, extra_body=body) as response,
        ):
            chunks = response.iter_bytes()
            async for event in openai_dialect.decode_chat_stream(aiter_sse(chunks)):
                yield event
            # The decoder stops at [DONE]; read the body's end so the connection is reused.
            drained = 0
            async for chunk in chunks:
                drained += len(chunk)
                if drained > _DRAIN_LIMIT:
                    break


async def _close_client(client: openai.AsyncOpenAI) -> None:
    await client.close()


@asynccontextmanager
async def _mapped_sdk_errors(backend: str) -> AsyncIterator[None]:
    """Translate the openai SDK's (and its HTTP library's) exceptions into ``core.errors``."""
    import httpx2
    import openai

    try:
        yield
    except openai.APIStatusError as exc:
        message = error_message(exc.body) or exc.message
        raise BackendHTTPError(
            f"backend '{backend}' returned HTTP {exc.status_code}: {message}",
            backend_status=exc.status_code,
            backend=backend,
            body=exc.body,
        ) from exc
    except (openai.APITimeoutError, httpx2.TimeoutException) as exc:
        raise BackendTimeoutError(
            f"backend '{backend}' did not answer in time", backend=backend
        ) from exc
    except openai.APIConnectionError as exc:
        reason = exc.__cause__ or exc
        raise BackendUnavailableError(
            f"backend '{backend}' is unreachable: {reason}", backend=backend
        ) from exc
    except httpx2.TransportError as exc:
        raise BackendError(
            f"backend '{backend}' closed the connection unexpectedly: {exc}", backend=backend
        ) from exc
    except openai.APIError as exc:
        raise BackendError(f"backend '{backend}' failed: {exc.message}", backend=backend) from exc


class AnthropicTransport(AnthropicBackend):
    """Anthropic's Messages API for the adapter: ``backends.anthropic.AnthropicBackend``."""

    def __init__(
        self,
        base_url: str,
        api_key: str | None,
        *,
        name: str = "anthropic",
        anthropic_version: str = ANTHROPIC_VERSION,
        http: HTTPSettings | None = None,
    ) -> None:
        super().__init__(
            name, base_url, api_key=api_key, anthropic_version=anthropic_version, http=http
        )
