"""What tests/e2e/test_litellm_client.py runs in LiteLLM's own virtualenv
(tests/e2e/.venv-litellm): LiteLLM's ``ollama_chat/`` provider against the gateway, as
CrewAI, DSPy and aider use it. ``python litellm_ollama_chat.py URL MODEL PLAIN_MODEL``
asks LiteLLM whether each model takes tools (it reads ``/api/show``'s template), then
runs one tool round with MODEL: a request with a tool, the tool's result sent back, the
final answer. It prints one JSON object with what LiteLLM said at each step (one
process: importing LiteLLM takes seconds).

Standalone: it imports LiteLLM, never llmbridge.
"""

from __future__ import annotations

import json
import os
import sys

# No network at import (LiteLLM otherwise fetches its price list), no telemetry.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ["LITELLM_TELEMETRY"] = "False"

import litellm

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather in a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}


def main(url: str, model: str, plain_model: str) -> None:
    os.environ["OLLAMA_API_BASE"] = url  # where LiteLLM looks a model up (/api/show)
    name = f"ollama_chat/{model}"
    supports = litellm.supports_function_calling(model=name)
    plain_supports = litellm.supports_function_calling(model=f"ollama_chat/{plain_model}")
    info = litellm.get_model_info(name)
    messages: list[dict[str, object]] = [
        {"role": "user", "content": "What is the weather in Paris?"}
    ]
    first = litellm.completion(model=name, api_base=url, messages=messages, tools=[WEATHER])
    message = first.choices[0].message
    calls = [
        {"id": call.id, "name": call.function.name, "arguments": call.function.arguments}
        for call in message.tool_calls or []
    ]
    messages.append(message.model_dump())
    for call in calls:
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": "18 C and sunny"})
    second = litellm.completion(model=name, api_base=url, messages=messages, tools=[WEATHER])
    print(
        json.dumps(
            {
                "supports_function_calling": supports,
                "plain_supports_function_calling": plain_supports,
                "max_input_tokens": info.get("max_input_tokens"),
                "first_finish_reason": first.choices[0].finish_reason,
                "tool_calls": calls,
                "answer": second.choices[0].message.content,
                "second_finish_reason": second.choices[0].finish_reason,
            }
        )
    )


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], sys.argv[3])
