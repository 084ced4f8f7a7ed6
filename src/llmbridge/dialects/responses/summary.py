"""The summary in a ``compaction`` item llmbridge made (compaction.py says when).

Its ``encrypted_content`` is ``llmbridge.summary.v1.`` + the summary's text (URL-safe
base64): opaque to the client, as a compaction item is, and readable by llmbridge alone.
Sent back, the item is the summary as a user message (``SUMMARY_INTRO``, then the text)
where the item was: what any backend can read.
"""

from __future__ import annotations

import base64
import binascii

__all__ = ["SUMMARY_INTRO", "SUMMARY_PREFIX", "open_summary", "seal_summary"]

SUMMARY_PREFIX = "llmbridge.summary.v1."
SUMMARY_INTRO = (
    "The conversation before this point was compacted. What it said, as summarised "
    "when it was compacted:\n\n"
)
"""What precedes a summary when a compaction item is sent back to a model."""


def seal_summary(text: str) -> str:
    """The ``encrypted_content`` of a summary llmbridge made."""
    return SUMMARY_PREFIX + base64.urlsafe_b64encode(text.encode()).decode()


def open_summary(sealed: str) -> str | None:
    """The summary in ``sealed``; ``None`` when llmbridge did not make it (or it was
    altered)."""
    if not sealed.startswith(SUMMARY_PREFIX):
        return None
    try:
        return base64.urlsafe_b64decode(sealed[len(SUMMARY_PREFIX) :].encode()).decode()
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
