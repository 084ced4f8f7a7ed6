"""OpenAI's legacy completions: ``POST /v1/completions`` (docs/COMPLETIONS.md).

The route is the chat pipeline's (gateway/pipeline.py) with the completions codec
(dialects/openai/completions.py): the request carries a ``Completion`` and goes
through the serving layer like a chat, so a ``suffix`` is refused where the model
cannot fill a gap, and retries and fallbacks apply.
"""

from __future__ import annotations

from starlette.routing import Route

from llmbridge.dialects import openai
from llmbridge.gateway.pipeline import ChatCodec, chat_endpoint
from llmbridge.web.render import Dialect

__all__ = ["routes"]

COMPLETIONS = ChatCodec(
    dialect=Dialect.OPENAI,
    endpoint="/v1/completions",
    encode_stream=openai.encode_completion_stream,
    encode_response=openai.encode_completion_response,
    stream_media_type="text/event-stream",
)

routes = [
    Route(
        "/v1/completions",
        chat_endpoint(COMPLETIONS, openai.decode_completion_request),
        methods=["POST"],
    ),
]
