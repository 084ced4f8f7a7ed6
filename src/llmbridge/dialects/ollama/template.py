"""The prompt template ``/api/show`` answers for a tool-calling model whose backend gave
none.

Ollama clients read ``template`` to learn what a model can do, not only to render
prompts: LiteLLM's ``ollama_chat/`` provider (and CrewAI, DSPy and aider through it)
says a model supports function calling only when its template mentions ``tools``
(``litellm/llms/ollama/common_utils.py``, ``_supports_function_calling``), and Ollama
itself derives the ``tools``, ``insert`` and ``thinking`` capabilities from a
template's ``.Tools``, ``.Suffix`` and ``<think>`` tags (``server/images.go``,
``goTemplateCapabilities``). A backend that is not Ollama (an OpenAI-compatible
server, Anthropic, Gemini, the scripted backend) has no template in Ollama's form, so
a model listed with the ``tools`` capability and ``template: ""`` was offered no tools.

``stand_in_template`` writes one in Ollama's own Go-template form (ChatML, as Ollama's
library templates for Qwen models are), with ``.System``, ``.Prompt`` and
``.Response`` always and ``.Tools``, ``.Suffix`` and ``.Thinking`` exactly when the
capabilities say so, so what a client infers from it agrees with ``capabilities``.
It describes the model; the gateway never renders it (the backend renders its own
prompt).
"""

from __future__ import annotations

from collections.abc import Collection

__all__ = ["stand_in_template"]

_SYSTEM = """{{- if .System }}<|im_start|>system
{{ .System }}<|im_end|>
{{ end }}"""

_SYSTEM_WITH_TOOLS = """{{- if or .System .Tools }}<|im_start|>system
{{- if .System }}
{{ .System }}
{{- end }}
{{- if .Tools }}

You may call one or more of these functions, each given as a JSON schema:
<tools>
{{- range .Tools }}
{{ . }}
{{- end }}
</tools>
To call one, answer with a JSON object in <tool_call></tool_call> tags:
<tool_call>
{"name": <function name>, "arguments": <arguments as a JSON object>}
</tool_call>
{{- end }}<|im_end|>
{{ end }}"""

_THINKING = """{{ if .Thinking }}<think>
{{ .Thinking }}
</think>
{{ end }}"""

_TOOL_CALLS = """{{- if .ToolCalls }}<tool_call>
{{ range .ToolCalls }}{"name": "{{ .Function.Name }}", "arguments": {{ .Function.Arguments }}}
{{ end }}</tool_call>
{{- end }}"""

_TOOL_RESULT = """{{- else if eq .Role "tool" }}<|im_start|>user
<tool_response>
{{ .Content }}
</tool_response><|im_end|>
"""


def stand_in_template(capabilities: Collection[str]) -> str:
    """A prompt template in Ollama's form for a model with ``capabilities`` (module
    docstring): ``.Tools`` only with ``tools``, ``.Suffix`` only with ``insert``,
    ``<think>`` tags only with ``thinking``."""
    tools = "tools" in capabilities
    insert = "insert" in capabilities
    parts = [
        "{{- if .Messages }}\n",
        _SYSTEM_WITH_TOOLS if tools else _SYSTEM,
        "\n{{- range $i, $_ := .Messages }}\n",
        "{{- $last := eq (len (slice $.Messages $i)) 1 }}\n",
        '{{- if eq .Role "user" }}<|im_start|>user\n{{ .Content }}<|im_end|>\n',
        '{{ else if eq .Role "assistant" }}<|im_start|>assistant\n',
        _THINKING if "thinking" in capabilities else "",
        "{{ .Content }}",
        _TOOL_CALLS if tools else "",
        "{{ if not $last }}<|im_end|>\n{{ end }}\n",
        _TOOL_RESULT if tools else "",
        "{{ end }}\n",  # the roles
        '{{- if and (ne .Role "assistant") $last }}<|im_start|>assistant\n{{ end }}\n',
        "{{- end }}\n",  # the messages
        "{{- else }}\n",  # one prompt (/api/generate)
        # Fill-in-the-middle through the FIM tokens, as Ollama's code-model templates do.
        "{{- if .Suffix }}<|fim_prefix|>{{ .Prompt }}<|fim_suffix|>{{ .Suffix }}<|fim_middle|>\n"
        "{{- else }}\n"
        if insert
        else "",
        _SYSTEM,
        "{{ if .Prompt }}<|im_start|>user\n{{ .Prompt }}<|im_end|>\n{{ end }}",
        "<|im_start|>assistant\n",
        "{{ end }}" if insert else "",
        "{{ end }}{{ .Response }}{{ if .Response }}<|im_end|>{{ end }}",
    ]
    return "".join(parts)
