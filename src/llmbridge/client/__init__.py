"""The Python client: typed event streams from any backend (seed 003's ``OllamaAdapter``).

``OllamaAdapter.call`` streams ART-shaped events (``TOKEN``, ``METADATA``, ``ERROR``,
``END``); ``chat`` and ``stream`` give llmbridge's neutral response and events. The
adapter runs on llmbridge's own backends and codecs, so the gateway and the client
share one implementation. See docs/CLIENT.md.

Modules: ``adapter`` (the class), ``events`` (event, metadata and error values),
``prompt`` (prompt translation, R1 merging), ``request`` (model, tools, parameters),
``art_events`` (neutral events to ART events), ``transports`` (engines).
"""

from llmbridge.client.adapter import OllamaAdapter
from llmbridge.client.art_events import heal_tool_input
from llmbridge.client.events import (
    AdapterError,
    ErrorCode,
    EventType,
    LLMMetadata,
    StreamEvent,
    TextItem,
    TokenData,
    TokenType,
    ToolUseItem,
)
from llmbridge.client.prompt import Prompt, PromptMessage, translate_prompt
from llmbridge.client.request import RuntimeProviderConfig, ToolSchema
from llmbridge.client.transports import (
    AnthropicTransport,
    ChatEngine,
    OpenAISDKTransport,
)

INVALID_CONFIG = ErrorCode.INVALID_CONFIG
LLM_PROVIDER_ERROR = ErrorCode.LLM_PROVIDER_ERROR
PROMPT_TRANSLATION_FAILED = ErrorCode.PROMPT_TRANSLATION_FAILED

__all__ = [
    "INVALID_CONFIG",
    "LLM_PROVIDER_ERROR",
    "PROMPT_TRANSLATION_FAILED",
    "AdapterError",
    "AnthropicTransport",
    "ChatEngine",
    "ErrorCode",
    "EventType",
    "LLMMetadata",
    "OllamaAdapter",
    "OpenAISDKTransport",
    "Prompt",
    "PromptMessage",
    "RuntimeProviderConfig",
    "StreamEvent",
    "TextItem",
    "TokenData",
    "TokenType",
    "ToolSchema",
    "ToolUseItem",
    "heal_tool_input",
    "translate_prompt",
]
