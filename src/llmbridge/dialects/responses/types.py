"""Wire types of the body clients send to ``POST /v1/responses`` (OpenAI's Responses API).

Field names are exactly the API's (platform.openai.com/docs/api-reference/responses/create),
each with a one-line docstring; the shapes were checked against the requests Codex CLI
0.169.0 and the OpenAI Agents SDK 0.24.0 send (shared/reference/captured/) and against
the openai SDK's ``types/responses``. Every model allows extra fields, so a newer client's
additions are tolerated rather than refused; validation is strict about types, as the
API is. Only the inbound body is modelled: replies are plain dicts built by the codecs.

Tagged unions use ``validation.tag_discriminator``: an input item without ``type`` is a
``message`` (the Agents SDK sends ``{"role", "content"}``), and a tool of any type other
than ``function``, ``custom`` or ``namespace`` is a hosted tool (``web_search``,
``image_generation``...), which llmbridge leaves out of what the backend sees.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import Field, Tag

from llmbridge.dialects.openai.types import OpenAIWireModel, ReasoningEffort
from llmbridge.dialects.validation import tag_discriminator

__all__ = [
    "MAX_ITEM_ID_CHARS",
    "CompactionItem",
    "CompactionTriggerItem",
    "CustomTool",
    "CustomToolCallItem",
    "CustomToolCallOutputItem",
    "FunctionCallItem",
    "FunctionCallOutputItem",
    "FunctionTool",
    "HostedTool",
    "InputContentPart",
    "InputImagePart",
    "InputItem",
    "InputMessageItem",
    "InputTextPart",
    "InputTokensRequestBody",
    "ItemId",
    "McpApprovalRequestItem",
    "McpApprovalResponseItem",
    "McpCallItem",
    "McpItem",
    "McpListToolsItem",
    "McpTool",
    "NamespaceTool",
    "OutputTextPart",
    "ReasoningConfig",
    "ReasoningEffort",
    "ReasoningItem",
    "RefusalPart",
    "ResponsesRequestBody",
    "SummaryText",
    "TextConfig",
    "TextFormat",
    "Tool",
    "ToolChoiceObject",
]


MAX_ITEM_ID_CHARS = 64 * 1024
"""The longest item id or ``call_id`` (a 400 naming the field above it: ids
are the client's strings, kept with a stored response and sent on). Real ids run to
a few dozen characters; some gateways carry a Gemini thought signature inside a call
id (LiteLLM's ``__thought__``), which takes a few kilobytes."""

ItemId = Annotated[str, Field(max_length=MAX_ITEM_ID_CHARS)]
"""An input item's ``id`` or ``call_id``."""


# -- content parts ------------------------------------------------------------------


class InputTextPart(OpenAIWireModel):
    type: Literal["input_text"]
    "Always ``input_text``."
    text: str
    "The text."


class OutputTextPart(OpenAIWireModel):
    type: Literal["output_text"]
    "Always ``output_text`` (an earlier assistant reply sent back)."
    text: str
    "The text."
    annotations: list[Any] | None = None
    "Citations of the reply (ignored)."


class RefusalPart(OpenAIWireModel):
    type: Literal["refusal"]
    "Always ``refusal``."
    refusal: str
    "The model's refusal, sent back as assistant text."


class InputImagePart(OpenAIWireModel):
    type: Literal["input_image"]
    "Always ``input_image``."
    image_url: str | None = None
    "An ``http(s)`` URL or a ``data:<media type>;base64,<data>`` URL."
    file_id: str | None = None
    "An uploaded file's id (llmbridge stores no files: refused)."
    detail: str | None = None
    "Requested detail: ``auto``, ``low`` or ``high`` (ignored)."


InputContentPart = Annotated[
    Annotated[InputTextPart, Tag("InputTextPart")]
    | Annotated[OutputTextPart, Tag("OutputTextPart")]
    | Annotated[RefusalPart, Tag("RefusalPart")]
    | Annotated[InputImagePart, Tag("InputImagePart")],
    tag_discriminator(
        "type",
        {
            "input_text": "InputTextPart",
            "output_text": "OutputTextPart",
            "refusal": "RefusalPart",
            "input_image": "InputImagePart",
        },
    ),
]

# -- input items --------------------------------------------------------------------


class InputMessageItem(OpenAIWireModel):
    type: Literal["message"] = "message"
    "Always ``message`` (may be left out)."
    role: Literal["user", "developer", "system", "assistant"]
    "Who speaks; ``developer`` and ``system`` are instructions."
    content: str | list[InputContentPart]
    "Text, or a list of text and image parts."
    id: ItemId | None = None
    "The item's id, when the client kept it (ignored)."
    status: str | None = None
    "The item's status, when sent back (ignored)."


class FunctionCallItem(OpenAIWireModel):
    type: Literal["function_call"]
    "Always ``function_call``: a call the model made earlier."
    call_id: ItemId
    "The call's id, echoed by the ``function_call_output`` that answers it."
    name: str
    "The function's name."
    arguments: str
    "The arguments, a JSON string."
    namespace: str | None = None
    "The ``namespace`` tool the function belongs to."
    id: ItemId | None = None
    "The item's id (ignored)."
    status: str | None = None
    "The item's status (ignored)."


class FunctionCallOutputItem(OpenAIWireModel):
    type: Literal["function_call_output"]
    "Always ``function_call_output``: a function's result."
    call_id: ItemId
    "The id of the call this answers."
    output: str | list[InputContentPart]
    "The result: text, or a list of content parts (their text is kept)."
    id: ItemId | None = None
    "The item's id (ignored)."
    status: str | None = None
    "The item's status (ignored)."


class CustomToolCallItem(OpenAIWireModel):
    type: Literal["custom_tool_call"]
    "Always ``custom_tool_call``: a call of a ``custom`` tool made earlier."
    call_id: ItemId
    "The call's id, echoed by the ``custom_tool_call_output`` that answers it."
    name: str
    "The custom tool's name."
    input: str
    "The freeform input the model wrote (a patch, say)."
    namespace: str | None = None
    "The ``namespace`` tool the custom tool belongs to."
    id: ItemId | None = None
    "The item's id (ignored)."
    status: str | None = None
    "The item's status (ignored)."


class CustomToolCallOutputItem(OpenAIWireModel):
    type: Literal["custom_tool_call_output"]
    "Always ``custom_tool_call_output``: a custom tool's result."
    call_id: ItemId
    "The id of the call this answers."
    output: str | list[InputContentPart]
    "The result: text, or a list of content parts (their text is kept)."
    id: ItemId | None = None
    "The item's id (ignored)."


class SummaryText(OpenAIWireModel):
    type: Literal["summary_text"] = "summary_text"
    "Always ``summary_text``."
    text: str
    "A summary of the model's reasoning."


class ReasoningText(OpenAIWireModel):
    type: str = "reasoning_text"
    "``reasoning_text`` (or ``text``)."
    text: str
    "The reasoning itself."


class ReasoningItem(OpenAIWireModel):
    type: Literal["reasoning"]
    "Always ``reasoning``: the model's reasoning in an earlier turn."
    summary: list[SummaryText] = Field(default_factory=list)
    "Summaries of the reasoning, as the server gave them."
    content: list[ReasoningText] | None = None
    "The reasoning text itself, where a server gives it."
    encrypted_content: str | None = None
    "Opaque reasoning state; kept only when llmbridge issued it (request.py)."
    id: ItemId | None = None
    "The item's id (ignored)."
    status: str | None = None
    "The item's status (ignored)."


class McpListToolsItem(OpenAIWireModel):
    type: Literal["mcp_list_tools"]
    "Always ``mcp_list_tools``: the tools an MCP server offered (kept, not sent on)."
    server_label: str
    "The server."
    id: ItemId | None = None
    "The item's id (ignored)."


class McpCallItem(OpenAIWireModel):
    type: Literal["mcp_call"]
    "Always ``mcp_call``: an MCP tool call the gateway ran earlier."
    id: ItemId
    "The call's id (the model sees it as its tool call's id)."
    server_label: str
    "The server it went to."
    name: str
    "The server's name of the tool."
    arguments: str
    "The arguments, a JSON string."
    output: str | None = None
    "The tool's output."
    error: Any = None
    "Its error (a string or an object), when it failed."
    approval_request_id: ItemId | None = None
    "The approval request it answered, when one was asked."
    status: str | None = None
    "The item's status (ignored)."


class McpApprovalRequestItem(OpenAIWireModel):
    type: Literal["mcp_approval_request"]
    "Always ``mcp_approval_request``: a call that waited on the client's approval."
    id: ItemId
    "The request's id, which an ``mcp_approval_response`` names."
    server_label: str
    "The server."
    name: str
    "The server's name of the tool."
    arguments: str
    "The arguments the model wrote, a JSON string."


class McpApprovalResponseItem(OpenAIWireModel):
    type: Literal["mcp_approval_response"]
    "Always ``mcp_approval_response``: the client's answer to an approval request."
    approval_request_id: ItemId
    "The ``mcp_approval_request`` it answers."
    approve: bool
    "Whether the call may run."
    reason: str | None = None
    "Why (shown to the model when the call is refused)."
    id: ItemId | None = None
    "The item's id (ignored)."


class CompactionItem(OpenAIWireModel):
    type: Literal["compaction", "compaction_summary"]
    "Always ``compaction`` (``compaction_summary``, its older name): a compacted conversation."
    encrypted_content: str
    "What stands for the conversation before it: opaque (request.py reads llmbridge's own)."
    id: ItemId | None = None
    "The item's id (ignored)."
    created_by: str | None = None
    "Who made it (ignored)."


class CompactionTriggerItem(OpenAIWireModel):
    type: Literal["compaction_trigger"]
    "Always ``compaction_trigger``: compact the conversation before it (Codex's remote compaction)."
    metadata: Any = None
    "What the client attached (ignored)."


McpItem = McpListToolsItem | McpCallItem | McpApprovalRequestItem | McpApprovalResponseItem

InputItem = Annotated[
    Annotated[InputMessageItem, Tag("InputMessageItem")]
    | Annotated[FunctionCallItem, Tag("FunctionCallItem")]
    | Annotated[FunctionCallOutputItem, Tag("FunctionCallOutputItem")]
    | Annotated[CustomToolCallItem, Tag("CustomToolCallItem")]
    | Annotated[CustomToolCallOutputItem, Tag("CustomToolCallOutputItem")]
    | Annotated[ReasoningItem, Tag("ReasoningItem")]
    | Annotated[McpListToolsItem, Tag("McpListToolsItem")]
    | Annotated[McpCallItem, Tag("McpCallItem")]
    | Annotated[McpApprovalRequestItem, Tag("McpApprovalRequestItem")]
    | Annotated[McpApprovalResponseItem, Tag("McpApprovalResponseItem")]
    | Annotated[CompactionItem, Tag("CompactionItem")]
    | Annotated[CompactionTriggerItem, Tag("CompactionTriggerItem")],
    tag_discriminator(
        "type",
        {
            "message": "InputMessageItem",
            "function_call": "FunctionCallItem",
            "function_call_output": "FunctionCallOutputItem",
            "custom_tool_call": "CustomToolCallItem",
            "custom_tool_call_output": "CustomToolCallOutputItem",
            "reasoning": "ReasoningItem",
            "mcp_list_tools": "McpListToolsItem",
            "mcp_call": "McpCallItem",
            "mcp_approval_request": "McpApprovalRequestItem",
            "mcp_approval_response": "McpApprovalResponseItem",
            "compaction": "CompactionItem",
            "compaction_summary": "CompactionItem",
            "compaction_trigger": "CompactionTriggerItem",
        },
        missing="InputMessageItem",
    ),
]

# -- tools --------------------------------------------------------------------------


class FunctionTool(OpenAIWireModel):
    type: Literal["function"]
    "Always ``function``."
    name: str
    "The function's name."
    description: str | None = None
    "What the function does, for the model."
    parameters: dict[str, Any] | None = None
    "A JSON Schema object for the arguments."
    strict: bool | None = None
    "Whether the model must follow the schema exactly."


class CustomTool(OpenAIWireModel):
    type: Literal["custom"]
    "Always ``custom``: a tool whose input is free text (Codex's ``apply_patch``)."
    name: str
    "The tool's name."
    description: str | None = None
    "What the tool does, for the model."
    format: dict[str, Any] | None = None
    "``{type: text}`` or ``{type: grammar, syntax, definition}``: what the input looks like."


NamespacedTool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")] | Annotated[CustomTool, Tag("CustomTool")],
    tag_discriminator("type", {"function": "FunctionTool", "custom": "CustomTool"}),
]


class NamespaceTool(OpenAIWireModel):
    type: Literal["namespace"]
    "Always ``namespace``: function and custom tools grouped under one name."
    name: str
    "The namespace's name, joined to each tool's name for the backend (``ns__tool``)."
    description: str | None = None
    "What the namespace is for (added to each tool's description)."
    tools: list[NamespacedTool]
    "The tools inside the namespace."


class McpTool(OpenAIWireModel):
    type: Literal["mcp"]
    "Always ``mcp``: an MCP server whose tools the gateway runs for the model."
    server_label: str
    "The server: a name in the gateway's ``mcp.servers``."
    server_url: str | None = None
    "Its URL; only one that ``mcp.allowed_urls`` allows is accepted."
    allowed_tools: list[str] | dict[str, Any] | None = None
    "The tools the model may use: names, or ``{tool_names: [...]}``."
    require_approval: str | dict[str, Any] | None = None
    "``always`` (OpenAI's default), ``never``, or ``{always: {tool_names}, never: {tool_names}}``."
    headers: dict[str, str] | None = None
    "Headers for the server (a server the request connects to)."
    authorization: str | None = None
    "A bearer token for the server (a server the request connects to)."
    server_description: str | None = None
    "What the server is for (added to its tools' descriptions)."


class HostedTool(OpenAIWireModel):
    type: str
    "A tool OpenAI runs itself (``web_search``, ``image_generation``, ``file_search``...)."


Tool = Annotated[
    Annotated[FunctionTool, Tag("FunctionTool")]
    | Annotated[CustomTool, Tag("CustomTool")]
    | Annotated[NamespaceTool, Tag("NamespaceTool")]
    | Annotated[McpTool, Tag("McpTool")]
    | Annotated[HostedTool, Tag("HostedTool")],
    tag_discriminator(
        "type",
        {
            "function": "FunctionTool",
            "custom": "CustomTool",
            "namespace": "NamespaceTool",
            "mcp": "McpTool",
        },
        other="HostedTool",
    ),
]


class ToolChoiceObject(OpenAIWireModel):
    type: str
    "``function``, ``custom``, ``allowed_tools``, or a hosted tool's type."
    name: str | None = None
    "The function or custom tool the model must call."
    mode: str | None = None
    "For ``allowed_tools``: ``auto`` or ``required``."


# -- options ------------------------------------------------------------------------


class ReasoningConfig(OpenAIWireModel):
    effort: ReasoningEffort | None = None
    "How much the model should reason; ``none`` turns reasoning off."
    summary: Literal["auto", "concise", "detailed"] | None = None
    "Whether to summarise the reasoning (llmbridge streams the reasoning it gets)."
    generate_summary: Literal["auto", "concise", "detailed"] | None = None
    "The older name of ``summary``."


class TextFormat(OpenAIWireModel):
    type: Literal["text", "json_object", "json_schema"]
    "``text``, ``json_object`` (any JSON object) or ``json_schema``."
    name: str | None = None
    "The schema's name (``json_schema``)."
    schema_: dict[str, Any] | None = Field(default=None, alias="schema")
    "The JSON Schema the output must match (``schema`` on the wire)."
    description: str | None = None
    "What the format is for."
    strict: bool | None = None
    "Whether the output must follow the schema exactly."


class TextConfig(OpenAIWireModel):
    format: TextFormat | None = None
    "The output's format."
    verbosity: str | None = None
    "``low``, ``medium`` or ``high`` (ignored)."


# -- the body -----------------------------------------------------------------------


class ResponsesRequestBody(OpenAIWireModel):
    """``POST /v1/responses``."""

    model: str
    "The model to use."
    input: str | list[InputItem]
    "A user message as a string, or the whole conversation as items."
    instructions: str | None = None
    "A system (developer) message placed before the input."
    tools: list[Tool] | None = None
    "Tools the model may call."
    tool_choice: Literal["none", "auto", "required"] | ToolChoiceObject | None = None
    "Whether and which tool the model must call."
    parallel_tool_calls: bool | None = None
    "Whether the model may call several tools in one turn."
    max_output_tokens: int | None = None
    "Maximum tokens to generate, reasoning included."
    temperature: float | None = None
    "Sampling temperature, 0 to 2."
    top_p: float | None = None
    "Nucleus sampling probability mass."
    reasoning: ReasoningConfig | None = None
    "Reasoning effort and summary."
    text: TextConfig | None = None
    "The output's format (``text.format``)."
    stream: bool | None = None
    "Stream the reply as server-sent events."
    store: bool | None = None
    "Whether to keep the response for ``previous_response_id`` (llmbridge keeps none)."
    include: list[str] | None = None
    "Extra output: ``reasoning.encrypted_content`` is honoured, the rest ignored."
    previous_response_id: str | None = None
    "Continue a stored response (refused: llmbridge is stateless)."
    conversation: str | dict[str, Any] | None = None
    "Continue a stored conversation (refused: llmbridge is stateless)."
    background: bool | None = None
    "Run in the background and poll (refused when true)."
    prompt_cache_key: str | None = None
    "The client's prompt cache key: deployment affinity, and sent on to OpenAI backends."
    generate: bool | None = None
    "``false``: prepare a response to continue from, without output (Codex's WebSocket warm-up)."
    metadata: dict[str, str] | None = None
    "Key-value pairs echoed in the response."
    client_metadata: dict[str, Any] | None = None
    "Codex's per-turn metadata (ignored)."
    user: str | None = None
    "An end-user identifier (echoed)."
    safety_identifier: str | None = None
    "An end-user identifier (ignored)."
    service_tier: str | None = None
    "Processing tier (ignored)."
    truncation: str | None = None
    "``auto`` or ``disabled`` (ignored: an over-long input is a 400)."
    top_logprobs: int | None = None
    "Log probabilities per token (ignored)."
    max_tool_calls: int | None = None
    "A cap on hosted tool calls (ignored: llmbridge runs none)."


class InputTokensRequestBody(ResponsesRequestBody):
    """``POST /v1/responses/input_tokens``: the same body, ``model`` optional."""

    model: str | None = None  # type: ignore[assignment]
    "The model whose tokenizer counts (the default backend's when left out)."
