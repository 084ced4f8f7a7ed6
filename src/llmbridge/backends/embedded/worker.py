"""The embedded model's worker process: the only place llama.cpp runs.

``python -m llmbridge.backends.embedded.worker SETTINGS_JSON`` is spawned by the
gateway (``process.py``), never by a user. Native code can crash (it did:
llama-cpp-python dereferenced a NULL grammar and took the whole gateway down), so it
runs here, where a crash costs the request in flight and a respawn, not the gateway.

Pipes. Commands arrive on stdin, replies leave on the original stdout, both in
``wire.py`` frames. File descriptor 1 is then pointed at stderr, so whatever
native code prints can never corrupt the protocol. The process belongs to the gateway:
it ignores SIGINT (a Ctrl-C in the terminal is for the gateway, which finishes its
requests and then closes this pipe) and exits at once when stdin reaches end of file,
which is also what happens when the gateway dies in any way, SIGKILL included. So a
worker never outlives its gateway.

Threads. The main thread loads the chat model and reports ``ready``; a reader thread
reads commands and dispatches them: generations to one thread (one ``Llama`` holds one
KV cache; the gateway sends one at a time anyway), embeddings to another (a second
``Llama(embedding=True)``, loaded on first use), token counts to a third, so counting
never waits for a generation. ``cancel`` sets the request's flag, which a generation
checks at every token and an embedding batch between groups of inputs.

A ``chat`` command with ``completion`` (``prompt``, ``suffix``) completes text rather
than a conversation: the prompt without the chat template, or, with a suffix, the
GGUF's fill-in-the-middle tokens around prefix and suffix (``completion_tokens``);
``ready`` says whether the vocabulary has them (``fim``).

Replies per request id: ``started`` (prompt size, at the first token), text frames
(one per token: written at once, since a client is waiting for it), then one terminal
message: ``done`` (``cancelled`` true when stopped early; ``cached_tokens``, the prompt
tokens llama.cpp took from its KV cache instead of evaluating), ``failed`` (an error as
``core.errors`` names it), ``embedded`` or ``counted``.
"""

from __future__ import annotations

import ctypes
import importlib
import os
import re
import signal
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NoReturn

import orjson

from llmbridge.backends.embedded.prompt import (
    cached_prefix,
    count_prompt_tokens,
    prompt_tokens,
    template_formatter,
)
from llmbridge.backends.embedded.schema import grammar_error
from llmbridge.backends.embedded.wire import FrameReader, pack_json, pack_text
from llmbridge.core.errors import (
    BackendError,
    BackendUnavailableError,
    ContextLengthError,
    InvalidRequestError,
    LLMBridgeError,
)

__all__ = ["EMBED_CONTEXT", "completion_tokens", "context_error", "main"]

EMBED_CONTEXT = 2048
"""Tokens per input the embedding instance reads (longer inputs are truncated)."""
_POOLING_MEAN = 1  # llama_cpp.LLAMA_POOLING_TYPE_MEAN; the model's own default is per token

# llama-cpp-python raises a plain ValueError when the prompt overflows the context.
_CONTEXT_OVERFLOW = re.compile(r"Requested tokens \((\d+)\) exceed context window of (\d+)")


def context_error(prompt_tokens: int, n_ctx: int) -> ContextLengthError:
    return ContextLengthError(
        f"the prompt is {prompt_tokens} tokens but the embedded model's context window is "
        f"{n_ctx} tokens; shorten the conversation"
    )


@dataclass(frozen=True, slots=True)
class _ChatModel:
    llama: Any
    formatter: Any | None
    """The GGUF's chat template (``Jinja2ChatFormatter``), to count prompt tokens."""
    fim: tuple[int, int, int] | None = None
    """The vocabulary's fill-in-the-middle tokens (prefix, suffix, middle), if it has
    them all (SmolLM2-135M has none; code models such as Qwen2.5-Coder do)."""


def _fim_tokens(llama: Any) -> tuple[int, int, int] | None:
    """The GGUF's FIM token ids as llama.cpp reads them (``tokenizer.ggml.fim_*_token_id``
    or the tokens it recognises by text), or None when one is missing."""
    llama_cpp = importlib.import_module("llama_cpp")
    try:
        vocab = llama_cpp.llama_model_get_vocab(llama.model)
        ids = (
            int(llama_cpp.llama_vocab_fim_pre(vocab)),
            int(llama_cpp.llama_vocab_fim_suf(vocab)),
            int(llama_cpp.llama_vocab_fim_mid(vocab)),
        )
    except AttributeError:  # a llama-cpp-python without the FIM accessors
        return None
    return ids if min(ids) >= 0 else None


def completion_tokens(
    llama: Any, fim: tuple[int, int, int] | None, command: dict[str, Any]
) -> list[int]:
    """The prompt of a completion command as tokens: the text as it stands (special
    tokens parsed, as llama.cpp's server does), or for a ``suffix`` llama.cpp's own
    infill order, ``<PRE> prefix <SUF> suffix <MID>`` (its ``format_infill``)."""
    prompt = str(command["prompt"])
    suffix = command.get("suffix")
    if suffix is None:
        return list(llama.tokenize(prompt.encode("utf-8"), add_bos=True, special=True))
    if fim is None:
        raise InvalidRequestError(
            "'suffix' (fill-in-the-middle) is not supported: the embedded model's GGUF "
            "has no fill-in-the-middle tokens",
            param="suffix",
        )
    pre, suf, mid = fim
    bos = list(llama.tokenize(b"", add_bos=True, special=False))  # [BOS] if the model adds one
    prefix_tokens = llama.tokenize(prompt.encode("utf-8"), add_bos=False, special=False)
    suffix_tokens = llama.tokenize(str(suffix).encode("utf-8"), add_bos=False, special=False)
    return [*bos, pre, *prefix_tokens, suf, *suffix_tokens, mid]


class _Worker:
    def __init__(self, settings: dict[str, Any], out_fd: int) -> None:
        self.settings = settings
        self._out = out_fd
        self._write_lock = threading.Lock()
        self._loaded = threading.Event()
        self._chat: _ChatModel | None = None
        self._embed: Any = None
        self._cancels: dict[int, threading.Event] = {}
        self._chat_pool = ThreadPoolExecutor(1, "embedded-chat")
        self._embed_pool = ThreadPoolExecutor(1, "embedded-embed")
        self._count_pool = ThreadPoolExecutor(1, "embedded-count")

    # -- output ----------------------------------------------------------------------

    def send(self, frame: bytes) -> None:
        view = memoryview(frame)
        with self._write_lock:
            try:
                while view:
                    view = view[os.write(self._out, view) :]
            except OSError:  # the gateway is gone: nobody to work for
                os._exit(0)

    def reply(self, request_id: int, op: str, **fields: Any) -> None:
        self.send(pack_json({"op": op, "id": request_id, **fields}))

    def fail(self, request_id: int, exc: BaseException) -> None:
        error = _as_bridge_error(exc)
        self.reply(
            request_id,
            "failed",
            error={
                "type": type(error).__name__,
                "message": error.message,
                "param": error.param,
            },
        )

    # -- loading (main thread) -------------------------------------------------------

    def load(self) -> None:
        started = time.perf_counter_ns()
        try:
            llama = self._new_llama(
                n_ctx=int(self.settings["n_ctx"]),
                flash_attn=bool(self.settings.get("flash_attn", False)),
            )
        except Exception as exc:  # noqa: BLE001 - reported, then the process ends
            self.send(pack_json({"op": "load_failed", "id": 0, "message": str(exc)}))
            sys.stderr.flush()
            os._exit(3)
        try:
            formatter = template_formatter(llama)
        except Exception as exc:  # noqa: BLE001 - counting falls back to llama.cpp's check
            print(f"embedded worker: cannot render the chat template: {exc}", file=sys.stderr)
            formatter = None
        self._chat = _ChatModel(llama, formatter, _fim_tokens(llama))
        self._loaded.set()
        metadata = {str(k): str(v) for k, v in llama.metadata.items()}
        self.send(
            pack_json(
                {
                    "op": "ready",
                    "id": 0,
                    "pid": os.getpid(),
                    "n_ctx": int(llama.n_ctx()),
                    "n_embd": int(llama.n_embd()),
                    "metadata": metadata,
                    "fim": self._chat.fim is not None,
                    "load_ns": time.perf_counter_ns() - started,
                }
            )
        )

    def _new_llama(self, **kwargs: Any) -> Any:
        llama_cpp = importlib.import_module("llama_cpp")
        threads = self.settings.get("n_threads")
        return llama_cpp.Llama(
            model_path=self.settings["model_path"],
            # Generation and prompt evaluation alike: llama-cpp-python's defaults are
            # half the logical CPUs and all of them (the backend sends physical cores).
            n_threads=threads,
            n_threads_batch=threads,
            verbose=False,
            **kwargs,
        )

    def _chat_model(self) -> _ChatModel:
        self._loaded.wait()
        assert self._chat is not None
        return self._chat

    # -- commands (reader thread) ----------------------------------------------------

    def read_commands(self) -> NoReturn:
        reader = FrameReader()
        while True:
            try:
                data = os.read(0, 1 << 16)
            except OSError:
                data = b""
            if not data:  # the gateway closed the pipe, or died: stop now
                os._exit(0)
            for message in reader.feed(data):
                if isinstance(message, dict):
                    self.dispatch(message)

    def dispatch(self, command: dict[str, Any]) -> None:
        op, request_id = command.get("op"), int(command.get("id", 0))
        if op == "cancel":
            if (flag := self._cancels.get(request_id)) is not None:
                flag.set()
        elif op == "chat":
            self._cancels[request_id] = threading.Event()
            self._chat_pool.submit(self.chat, request_id, command)
        elif op == "embed":
            self._cancels[request_id] = threading.Event()
            self._embed_pool.submit(self.embed, request_id, command)
        elif op == "count":
            self._count_pool.submit(self.count, request_id, command)
        elif op == "spew":
            # Benchmark hook (bench/embedded_worker.py): ``count`` text frames, as fast as
            # the pipe takes them or ``pause_s`` apart, then ``done``: the transport's
            # cost per token alone.
            text = str(command.get("text", "x"))
            pause = float(command.get("pause_s", 0.0))
            for _ in range(int(command.get("count", 0))):
                self.send(pack_text(request_id, text))
                if pause:
                    time.sleep(pause)
            self.reply(request_id, "done", finish_reason="length")
        elif op == "crash":
            # Test hook (tests/backends/test_embedded_worker.py): die the way native code
            # does, by reading address 0 (SIGSEGV) inside a C call.
            ctypes.string_at(0)

    # -- chat (chat thread) ----------------------------------------------------------

    def chat(self, request_id: int, command: dict[str, Any]) -> None:
        cancel = self._cancels[request_id]
        try:
            self._generate(request_id, command, cancel)
        except Exception as exc:  # noqa: BLE001 - every failure is reported, mapped
            self.fail(request_id, exc)
        finally:
            self._cancels.pop(request_id, None)

    def _generate(self, request_id: int, command: dict[str, Any], cancel: threading.Event) -> None:
        model = self._chat_model()
        if cancel.is_set():  # the client left while the model was loading
            self.reply(request_id, "done", cancelled=True, output_tokens=0)
            return
        llama = model.llama
        completion = command.get("completion")
        options = dict(command["options"])
        if completion is not None and "response_format" in options:
            # create_completion has no response_format: JSON as llama.cpp's grammar.
            options.pop("response_format")
            command.setdefault(
                "grammar", importlib.import_module("llama_cpp.llama_grammar").JSON_GBNF
            )
        if (grammar := command.get("grammar")) is not None:
            # Checked by llama.cpp's own parser, NULL checked (schema.py).
            if (problem := grammar_error(llama, grammar)) is not None:
                param = command.get("param") or "response_format"
                raise InvalidRequestError(f"{param}: {problem}", param=param)
            grammars = importlib.import_module("llama_cpp.llama_grammar")
            options["grammar"] = grammars.LlamaGrammar.from_string(grammar, verbose=False)
        n_ctx = int(llama.n_ctx())
        if completion is None:
            messages = command["messages"]
            tokens = prompt_tokens(llama, model.formatter, messages)
        else:
            tokens = completion_tokens(llama, model.fim, completion)
        size = None if tokens is None else len(tokens)
        cached: int | None = None
        if tokens is not None:
            if len(tokens) >= n_ctx:
                raise context_error(len(tokens), n_ctx)
            options["max_tokens"] = max(1, min(options["max_tokens"], n_ctx - len(tokens)))
            # What the context holds now, before generate replaces it: the reused prefix.
            cached = cached_prefix(
                llama.input_ids[: llama.n_tokens].tolist(),
                tokens,
                requires_eval=bool(getattr(llama, "_requires_eval", True)),
            )
        begun = time.perf_counter_ns()
        first_token: int | None = None
        finish_reason: str | None = None
        if completion is None:
            stream = llama.create_chat_completion(messages=messages, stream=True, **options)
        else:
            assert tokens is not None  # a completion's prompt is always tokens
            stream = llama.create_completion(prompt=tokens, stream=True, **options)
        try:
            for chunk in stream:
                if cancel.is_set():
                    generated = int(llama.n_tokens) - (size or 0)
                    self.reply(request_id, "done", cancelled=True, output_tokens=generated)
                    return
                if first_token is None:
                    first_token = time.perf_counter_ns()
                    self.reply(request_id, "started", prompt_tokens=size)
                choice = chunk["choices"][0]
                text = choice["delta"].get("content") if completion is None else choice["text"]
                if text:
                    self.send(pack_text(request_id, text))
                finish_reason = choice.get("finish_reason") or finish_reason
        finally:
            stream.close()
        ended = time.perf_counter_ns()
        if first_token is None:
            first_token = ended
            self.reply(request_id, "started", prompt_tokens=size)
        output_tokens = None
        if size is not None:
            # Tokens evaluated after the prompt; the last one sampled is never
            # evaluated when the length limit stops generation.
            output_tokens = int(llama.n_tokens) - size
            output_tokens += 1 if finish_reason == "length" else 0
        self.reply(
            request_id,
            "done",
            finish_reason=finish_reason,
            output_tokens=output_tokens,
            cached_tokens=cached,
            prompt_eval_ns=first_token - begun,
            eval_ns=ended - first_token,
        )

    # -- token counts (count thread) -------------------------------------------------

    def count(self, request_id: int, command: dict[str, Any]) -> None:
        try:
            model = self._chat_model()
            # Tokenizing reads only the vocabulary, so it need not wait for a generation.
            tokens = count_prompt_tokens(model.llama, model.formatter, command["messages"])
            self.reply(request_id, "counted", tokens=tokens)
        except Exception as exc:  # noqa: BLE001
            self.fail(request_id, exc)

    # -- embeddings (embed thread) ---------------------------------------------------

    def embed(self, request_id: int, command: dict[str, Any]) -> None:
        cancel = self._cancels[request_id]
        try:
            llama, load_ns = self._embed_model()
            outcome = self._embed_groups(llama, command["inputs"], command["truncate"], cancel)
            if outcome is None:
                self.reply(request_id, "done", cancelled=True)
            else:
                vectors, tokens = outcome
                self.reply(request_id, "embedded", vectors=vectors, tokens=tokens, load_ns=load_ns)
        except Exception as exc:  # noqa: BLE001
            self.fail(request_id, exc)
        finally:
            self._cancels.pop(request_id, None)

    def _embed_model(self) -> tuple[Any, int]:
        if self._embed is not None:
            return self._embed, 0
        started = time.perf_counter_ns()
        size = min(int(self.settings["n_ctx"]), EMBED_CONTEXT)
        try:
            self._embed = self._new_llama(
                embedding=True, n_ctx=size, n_batch=size, n_ubatch=size, pooling_type=_POOLING_MEAN
            )
        except Exception as exc:
            raise BackendUnavailableError(f"could not load the embedding model: {exc}") from exc
        return self._embed, time.perf_counter_ns() - started

    @staticmethod
    def _embed_groups(
        llama: Any, inputs: list[str], truncate: bool, cancel: threading.Event
    ) -> tuple[list[list[float]], int] | None:
        """Vectors and tokens, or None when cancelled. Inputs are embedded in groups
        that fill one batch (as ``Llama.embed`` would batch them itself), and the
        cancel flag is checked between groups: a client that left stops the work
        within one batch's time (it used to hold the model for the rest)."""
        limit = int(llama.n_batch)
        sizes: list[int] = []
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
            sizes.append(min(count, limit))
        vectors: list[list[float]] = []
        tokens = 0
        start = 0
        while start < len(inputs):
            if cancel.is_set():
                return None
            stop, filled = start, 0
            while stop < len(inputs) and (stop == start or filled + sizes[stop] <= limit):
                filled += sizes[stop]
                stop += 1
            group, count = llama.embed(
                inputs[start:stop], normalize=True, truncate=True, return_count=True
            )
            vectors.extend(group)  # lists of Python floats already (llama_cpp.Llama.embed)
            tokens += int(count)
            start = stop
        return vectors, tokens


def _as_bridge_error(exc: BaseException) -> LLMBridgeError:
    """Map an exception from llama.cpp to ``core.errors`` (the one boundary)."""
    if isinstance(exc, LLMBridgeError):
        return exc
    if isinstance(exc, ValueError) and (match := _CONTEXT_OVERFLOW.search(str(exc))):
        return context_error(int(match[1]), int(match[2]))
    return BackendError(f"the embedded model failed: {exc}")


def main(argv: list[str]) -> NoReturn:
    settings = orjson.loads(argv[1])
    out_fd = os.dup(1)
    os.dup2(2, 1)  # stray native prints go to stderr, never into the protocol
    sys.stdout = sys.stderr
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    worker = _Worker(settings, out_fd)
    reader = threading.Thread(target=worker.read_commands, name="embedded-reader", daemon=True)
    reader.start()  # from now on, the gateway's end of file ends this process
    worker.load()
    reader.join()
    os._exit(0)


if __name__ == "__main__":
    main(sys.argv)
