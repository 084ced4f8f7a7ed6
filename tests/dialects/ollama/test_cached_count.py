"""Ollama's cached prompt tokens: ``prompt_eval_count`` is the whole prompt
(ollama/ollama#5371) and ``prompt_eval_cached_count`` the part read from the cache
(ollama/ollama#17943); both directions keep them."""

from __future__ import annotations

from llmbridge.core.accumulate import accumulate_sync
from llmbridge.core.response import Timings, Usage
from llmbridge.dialects.ollama.stream import ChatFrameDecoder
from llmbridge.dialects.ollama.types import metrics


def test_a_final_frame_with_cached_tokens_decodes_into_usage() -> None:
    frame = {
        "model": "qwen3",
        "created_at": "2026-11-28T04:00:00Z",
        "message": {"role": "assistant", "content": "Hi."},
        "done": True,
        "done_reason": "stop",
        "prompt_eval_count": 21,
        "prompt_eval_cached_count": 16,
        "eval_count": 3,
    }
    reply = accumulate_sync(ChatFrameDecoder().feed(frame, final=True))
    assert reply.usage == Usage(input_tokens=21, output_tokens=3, cache_read_input_tokens=16)


def test_cached_tokens_are_encoded_beside_the_whole_prompt() -> None:
    usage = Usage(input_tokens=21, output_tokens=3, cache_read_input_tokens=16)
    assert metrics(usage, Timings()) == {
        "prompt_eval_count": 21,
        "prompt_eval_cached_count": 16,
        "eval_count": 3,
    }
    # A backend that says nothing of its cache: the field is left out, as Ollama does.
    assert "prompt_eval_cached_count" not in metrics(Usage(input_tokens=21), Timings())
