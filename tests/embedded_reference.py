"""The embedded model called directly, in this process: what a real-model test compares
the gateway's answer with.

llama.cpp is compiled for the host CPU, so what SmolLM2-135M says changes between
machines and builds (at temperature 0 one machine answered "What is the
capital of France?" with ``Català: Català ...``). So no test asserts what the model
knows. Where the content matters, a test asserts that the answer that came through the
gateway equals what the same model gives here for the same prompt with the same greedy
settings, which holds on any CPU and any build:

- the same GGUF file (``default_model_path``), loaded as the worker loads it
  (``backends/embedded/worker.py``: ``n_ctx`` 8192, llama.cpp's default threads and
  batch sizes);
- the same chat template: ``create_chat_completion`` renders the GGUF's own, as the
  worker's call does;
- the same messages: a conversation without a system message gets the backend's
  ``DEFAULT_SYSTEM_PROMPT``, as ``to_llama_messages`` gives it;
- temperature 0 (greedy; the seed does not matter then) and the same ``max_tokens``.

Each call starts from an empty KV cache (``reset``), so earlier calls cannot matter.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from typing import Any

from llmbridge.backends.embedded.backend import (
    DEFAULT_FLASH_ATTN,
    default_model_path,
    physical_cores,
)
from llmbridge.backends.embedded.prompt import DEFAULT_SYSTEM_PROMPT

__all__ = ["DirectReply", "direct_completion", "direct_reply"]

N_CTX = 8192
"""The embedded backend's default context (``EmbeddedBackendConfig.n_ctx``)."""


@dataclass(frozen=True)
class DirectReply:
    text: str
    finish_reason: str
    """``stop`` (end of turn) or ``length`` (``max_tokens`` reached), llama.cpp's words."""
    completion_tokens: int


@functools.cache
def _llama() -> Any:
    llama_cpp = importlib.import_module("llama_cpp")
    # The worker's threads and attention: a sum split over other threads can round
    # differently, and a greedy reply follows the last bit of a logit.
    threads = physical_cores()
    return llama_cpp.Llama(
        model_path=str(default_model_path()),
        n_ctx=N_CTX,
        n_threads=threads,
        n_threads_batch=threads,
        flash_attn=DEFAULT_FLASH_ATTN,
        verbose=False,
    )


def direct_reply(messages: list[dict[str, str]], *, max_tokens: int, **options: Any) -> DirectReply:
    """The model's greedy reply to ``messages`` (``{"role", "content"}`` dicts; the
    backend's default system prompt is put first when there is no system message).
    ``options`` are further ``create_chat_completion`` keywords (``response_format``)."""
    if not messages or messages[0]["role"] != "system":
        messages = [{"role": "system", "content": DEFAULT_SYSTEM_PROMPT}, *messages]
    llama = _llama()
    llama.reset()
    result = llama.create_chat_completion(
        messages=messages, temperature=0.0, max_tokens=max_tokens, **options
    )
    choice = result["choices"][0]
    return DirectReply(
        text=choice["message"]["content"] or "",
        finish_reason=choice["finish_reason"],
        completion_tokens=result["usage"]["completion_tokens"],
    )


def direct_completion(prompt: str, *, max_tokens: int, again: bool = False) -> DirectReply:
    """The model's greedy continuation of ``prompt`` as it stands, without the chat
    template, as the worker completes a legacy completion (``create_completion``).

    ``again``: the continuation of the same prompt asked a second time, as a worker
    that just completed it answers: llama.cpp reuses the cached prompt and evaluates
    only its last token again, alone, and on some builds (the AVX2 one among them)
    that one-token evaluation picks another greedy token than the whole prompt's."""
    llama = _llama()
    llama.reset()
    result = llama.create_completion(prompt=prompt, temperature=0.0, max_tokens=max_tokens)
    if again:
        result = llama.create_completion(prompt=prompt, temperature=0.0, max_tokens=max_tokens)
    choice = result["choices"][0]
    return DirectReply(
        text=choice["text"],
        finish_reason=choice["finish_reason"] or "stop",
        completion_tokens=result["usage"]["completion_tokens"],
    )
