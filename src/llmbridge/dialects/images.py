"""Inline image data: whether a client's base64 is base64 at all.

Every dialect carries images as base64 text (Ollama ``images``, OpenAI ``data:`` URLs,
Anthropic ``base64`` sources). Text that is not base64 used to be forwarded, and the
backend failed on it, or worse, did not; each dialect now answers 400
naming the part, in its own words.
"""

from __future__ import annotations

import binascii
import re

__all__ = ["first_bad_base64_byte", "is_base64", "split_base64_data_url"]

_ALPHABET = re.compile(r"[^A-Za-z0-9+/=]")


def split_base64_data_url(url: str) -> tuple[str | None, str] | None:
    """``(media type, payload)`` of a ``data:<type>[;params];base64,<payload>`` URL
    (RFC 2397; the media type ``None`` when empty), or ``None`` for anything else."""
    header, comma, payload = url.partition(",")
    if comma and header.startswith("data:") and header.endswith(";base64"):
        return header[5:-7].split(";")[0] or None, payload
    return None


def is_base64(data: str, *, line_breaks: bool = False) -> bool:
    """Whether ``data`` is padded standard base64 (RFC 4648 section 4).

    ``line_breaks``: CR and LF are skipped, as Go's decoder (Ollama's) skips them.
    """
    if line_breaks and ("\n" in data or "\r" in data):
        data = data.replace("\r", "").replace("\n", "")
    if not data.isascii():
        return False
    try:
        # One pass in C (about 1 GB/s); strict: no stray characters, exact padding.
        binascii.a2b_base64(data, strict_mode=True)
    except binascii.Error:
        return False
    return True


def first_bad_base64_byte(data: str) -> int:
    """Where Go's decoder would stop in ``data`` (for Ollama's "illegal base64 data at
    input byte N"): the first character outside the alphabet, else the end (the
    padding or the length is wrong)."""
    found = _ALPHABET.search(data.replace("\r", "").replace("\n", ""))
    if found is not None:
        return found.start()
    stripped = data.replace("\r", "").replace("\n", "")
    padding = stripped.find("=")
    return padding if 0 <= padding < len(stripped.rstrip("=")) else len(stripped)
