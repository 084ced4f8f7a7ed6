"""Fitting a request to the backend its model resolved to, saying what changed.

``prepare`` (``fit.py``) runs the steps in order; each step that is more than a line
owns a module here or in ``features/``:

- ``capabilities``: what the model does itself (native tools, fill-in-the-middle);
- ``sampling``: sampling parameters fitted to what the backend takes;
- ``context_size``: the context window for a backend that allocates one per request
  (Ollama's ``num_ctx``);
- ``changes``: ``Changes``, what was changed, as data for the gateway's headers.

``serving.models.Models`` calls ``prepare`` for every request; this package's names
are re-exported here for it and for the gateway.
"""

from llmbridge.serving.prepare.changes import UNCHANGED, Changes
from llmbridge.serving.prepare.fit import Prepared, prepare

__all__ = ["UNCHANGED", "Changes", "Prepared", "prepare"]
