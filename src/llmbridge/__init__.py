"""llmbridge: any LLM client, any LLM backend.

A client that speaks the Ollama, OpenAI or Anthropic API points at llmbridge, which
serves it from the configured backend. See docs/ARCHITECTURE.md for the layers.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
