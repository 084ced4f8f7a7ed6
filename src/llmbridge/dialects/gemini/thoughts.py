"""Gemini's thought signatures, carried across turns in a thinking signature.

Gemini attaches an opaque ``thoughtSignature`` to a part of its reply (the first
``functionCall`` of a turn, or a text or thought part) and wants it back on the same part
of the same turn in the next request; a tool loop on a thinking model fails without it.
The core holds it as a ``ThinkingPart`` (empty text unless the part was a thought)
directly before the part it was attached to; its ``signature`` is ``GEMINI.carry(origin,
token)``, so only the backend that issued it gets it back (``dialects/carried.py``).
"""

from __future__ import annotations

from llmbridge.dialects.carried import Carrier

__all__ = ["GEMINI"]

GEMINI = Carrier(prefix="llmbridge.gemini.v1.", provider="gemini")
