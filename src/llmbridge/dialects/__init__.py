"""Wire formats of the APIs llmbridge speaks, both directions, no I/O.

Each subpackage (``ollama``, ``openai``, ``anthropic``) implements the same contract
(see docs/ARCHITECTURE.md) so the gateway's routes and the backends share one codec
per dialect.
"""
