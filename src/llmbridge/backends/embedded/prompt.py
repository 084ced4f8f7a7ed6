"""What the embedded backend hands llama-cpp-python: messages, options, prompt size.

Neutral messages become the plain ``{"role", "content"}`` messages a GGUF chat
template renders; generation parameters become ``create_chat_completion`` keywords;
and the templated prompt is tokenized exactly as llama-cpp-python will tokenize it,
so an overflow is reported before any generation and the tokens llama.cpp takes from
its prefix cache can be counted (``cached_prefix``).

The embedded model (SmolLM2-135M-Instruct) only knows ``system``, ``user`` and
``assistant`` turns of plain text: its template has no ``tool`` role, no tool-call
syntax and no images. So:

- tool results (a ``tool`` message, or Anthropic's ``tool_result`` blocks inside a
  user message) become user-visible text ``Tool result (name): content`` in a
  ``user`` turn;
- an assistant's tool calls become text ``Tool call: name({...})``, so the model sees
  what it asked for;
- earlier thinking is dropped (the model does not reason, and replaying it would only
  spend context);
- images raise ``UnsupportedFeatureError``: silently dropping them would let the model
  answer a question about a picture it never saw;
- a conversation without a system message gets ``DEFAULT_SYSTEM_PROMPT``. Without one
  the GGUF template inserts its own long persona prompt, after which the 135M model
  answers even "What is the capital of France?" with unrelated French phrases at
  temperature 0; with a short neutral prompt it answers "Paris".
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from typing import Any

import orjson

from llmbridge.core.errors import UnsupportedFeatureError
from llmbridge.core.messages import (
    ImagePart,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from llmbridge.core.request import ChatRequest

__all__ = [
    "DEFAULT_SYSTEM_PROMPT",
    "LlamaMessage",
    "cached_prefix",
    "count_prompt_tokens",
    "llama_chat_options",
    "prompt_tokens",
    "render_tool_call",
    "render_tool_result",
    "template_formatter",
    "to_llama_messages",
]

DEFAULT_SYSTEM_PROMPT = "You are a helpful assistant. Answer briefly and accurately."

LlamaMessage = dict[str, str]
"""One message as ``Llama.create_chat_completion`` takes it: ``role`` and ``content``."""


def to_llama_messages(messages: Sequence[Message]) -> list[LlamaMessage]:
    """Convert a conversation; raises ``UnsupportedFeatureError`` for images."""
    tool_names: dict[str, str] = {}
    converted: list[LlamaMessage] = []
    for message in messages:
        blocks: list[str] = []
        text_run: list[str] = []
        for part in message.parts:
            if isinstance(part, TextPart):
                text_run.append(part.text)
                continue
            if text_run:
                blocks.append("".join(text_run))
                text_run = []
            if isinstance(part, ImagePart):
                raise UnsupportedFeatureError(
                    "the embedded model cannot read images", param="messages"
                )
            if isinstance(part, ToolCallPart):
                tool_names[part.id] = part.name
                blocks.append(render_tool_call(part))
            elif isinstance(part, ToolResultPart):
                name = tool_names.get(part.tool_call_id) or part.name or message.name
                blocks.append(render_tool_result(part, name))
            # ThinkingPart: deliberately dropped (see the module docstring).
        if text_run:
            blocks.append("".join(text_run))
        role = "user" if message.role == "tool" else message.role
        converted.append({"role": role, "content": "\n\n".join(blocks)})
    if not converted or converted[0]["role"] != "system":
        converted.insert(0, {"role": "system", "content": DEFAULT_SYSTEM_PROMPT})
    return converted


def render_tool_call(part: ToolCallPart) -> str:
    """``Tool call: get_weather({"city": "Paris"})``."""
    if part.arguments or part.raw_arguments is None:
        arguments = orjson.dumps(part.arguments).decode()
    else:
        arguments = part.raw_arguments
    return f"Tool call: {part.name}({arguments})"


def render_tool_result(part: ToolResultPart, name: str | None) -> str:
    """``Tool result (get_weather): 18 °C``, or ``Tool error (...)`` for a failed call."""
    label = "Tool error" if part.is_error else "Tool result"
    if name:
        label = f"{label} ({name})"
    return f"{label}: {part.content}"


# Backend-specific options (``GenerationParams.extra``) passed on to llama.cpp.
_EXTRA_OPTIONS = {
    "typical_p": "typical_p",
    "tfs_z": "tfs_z",
    "mirostat": "mirostat_mode",  # Ollama's spelling
    "mirostat_mode": "mirostat_mode",
    "mirostat_tau": "mirostat_tau",
    "mirostat_eta": "mirostat_eta",
}


def llama_chat_options(request: ChatRequest) -> dict[str, Any]:
    """The ``create_chat_completion`` keywords for ``request`` (``max_tokens`` apart).

    Unset parameters are left out so llama-cpp-python's own defaults apply.
    """
    params = request.params
    options: dict[str, Any] = {}
    for name in (
        "temperature",
        "top_p",
        "top_k",
        "min_p",
        "seed",
        "repeat_penalty",
        "frequency_penalty",
        "presence_penalty",
    ):
        value = getattr(params, name)
        if value is not None:
            options[name] = value
    if params.stop:
        options["stop"] = list(params.stop)
    for key, option in _EXTRA_OPTIONS.items():
        if key in params.extra:
            options[option] = params.extra[key]
    fmt = request.response_format
    if fmt is not None and fmt.type != "text":
        # llama-cpp-python builds a JSON grammar for "json_object", and a grammar
        # from the schema when one is given under "schema".
        options["response_format"] = {"type": "json_object"}
        if fmt.type == "json_schema" and fmt.schema is not None:
            options["response_format"]["schema"] = fmt.schema
    return options


def template_formatter(llama: Any) -> Any | None:
    """The GGUF's chat template as llama-cpp-python renders it, or None if it has none."""
    template = llama.metadata.get("tokenizer.chat_template")
    if not template:
        return None
    chat_format = importlib.import_module("llama_cpp.llama_chat_format")

    def token_text(token: int) -> str:
        if token < 0:
            return ""
        return str(llama.detokenize([token], special=True).decode("utf-8", errors="replace"))

    return chat_format.Jinja2ChatFormatter(
        template=template,
        eos_token=token_text(llama.token_eos()),
        bos_token=token_text(llama.token_bos()),
        stop_token_ids=[llama.token_eos()],
    )


def prompt_tokens(
    llama: Any, formatter: Any | None, messages: list[LlamaMessage]
) -> list[int] | None:
    """The templated prompt's tokens, made the way ``create_chat_completion`` makes them
    (so they are the ones llama.cpp evaluates, and compares with its cache), or None
    when the GGUF has no chat template."""
    if formatter is None:
        return None  # llama-cpp-python's own overflow check still applies
    result = formatter(messages=messages)
    return list(
        llama.tokenize(
            result.prompt.encode("utf-8"), add_bos=not result.added_special, special=True
        )
    )


def count_prompt_tokens(
    llama: Any, formatter: Any | None, messages: list[LlamaMessage]
) -> int | None:
    """Tokens of the templated prompt, counted the way ``create_chat_completion`` does."""
    tokens = prompt_tokens(llama, formatter, messages)
    return None if tokens is None else len(tokens)


def cached_prefix(previous: Sequence[int], prompt: Sequence[int], *, requires_eval: bool) -> int:
    """Prompt tokens llama.cpp takes from its KV cache rather than evaluating: the
    common prefix of what the context holds (``previous``: ``input_ids[:n_tokens]``)
    and ``prompt``, as ``Llama.generate`` computes it. When the whole prompt matches,
    generate re-evaluates its last token to get fresh logits, unless the context holds
    exactly the prompt and its logits are live (``requires_eval`` false)."""
    common = 0
    for held, wanted in zip(previous, prompt, strict=False):
        if held != wanted:
            break
        common += 1
    if common == len(prompt) and prompt:
        if len(previous) == len(prompt) and not requires_eval:
            return common
        return common - 1
    return common
