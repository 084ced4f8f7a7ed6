"""What a key's fields may hold, checked once for every way a key is made
(``llmbridge keys create``, ``POST /admin/keys``, the console's form: all go through
``KeyStore.create``), and a key's globs compiled once.

- **A name** is 1 to ``MAX_NAME`` characters, printable: no control character
  (Unicode ``Cc``: PostgreSQL refuses U+0000 in text, SQLite stores it) and no format
  character (``Cf``: U+202E, the right-to-left override, shows ``rtl\\u202eevil`` as
  "rtllive"; U+200B, the zero-width space, makes two names look the same), nor a
  surrogate, a private-use character or a line or paragraph separator.
- **Globs** (``models``, and ``mcp_tools``: MCP tool names, ``<server>__<tool>``)
  are at most ``MAX_GLOBS`` per field, each at most ``MAX_GLOB_CHARS`` characters,
  none empty, printable. A key once held 50,001 model
  globs: each of its requests spent 14 s matching them on the event loop.
- **Matching** (``GlobSet``): the globs are compiled when the key's record is read
  (once per cache period, accounts/keys.py), never per request: names without
  wildcards go into a set, the rest into one regular expression (``fnmatch.translate``
  of each, the same case-sensitive rules as ``fnmatchcase``). A record read from a
  database written before the bound may hold more than ``MAX_GLOBS``: it still works,
  compiled once (``compiled_globs`` keeps the last ones compiled, so the cache's
  refresh of a key every few seconds compiles nothing again). ``may_start_with`` says
  whether any name beginning with a prefix can match (the MCP gateway asks it of
  ``<server>__``: whether a key reaches a server's resources, mcp/permissions.py).
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase, translate
from functools import lru_cache

from llmbridge.core.errors import InvalidRequestError

__all__ = [
    "MAX_GLOBS",
    "MAX_GLOB_CHARS",
    "MAX_NAME",
    "GlobSet",
    "compiled_globs",
    "first_unprintable",
    "has_control",
    "validated_globs",
    "validated_name",
]

MAX_NAME = 200
"""The longest key name."""
MAX_GLOBS = 256
"""Globs one field of a key may hold (a team's models or tools fit many times)."""
MAX_GLOB_CHARS = 200
"""The longest glob (a model name is far shorter)."""

_UNPRINTABLE = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})
"""Control, format, surrogate and private-use characters, line and paragraph
separators: what shows as nothing, or as something else."""
_WILDCARDS = frozenset("*?[")
_EXAMPLES = {"model": "gpt-4o*", "tool": "github__*"}


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (U+0000 to U+001F, U+007F to U+009F),
    which no stored name or glob holds: PostgreSQL refuses U+0000 in text."""
    return any(unicodedata.category(c) == "Cc" for c in text)


def first_unprintable(text: str) -> tuple[int, str] | None:
    """The position and character of the first unprintable character in ``text``."""
    for position, char in enumerate(text):
        if unicodedata.category(char) in _UNPRINTABLE:
            return position, char
    return None


def _described(found: tuple[int, str]) -> str:
    position, char = found
    name = unicodedata.name(char, "unnamed")
    return f"U+{ord(char):04X} {name} at position {position}"


def validated_name(name: str) -> str:
    """``name`` as stored (stripped); ``InvalidRequestError`` (param ``name``) when
    it is empty, too long or not printable."""
    name = name.strip()
    if not name or len(name) > MAX_NAME:
        raise InvalidRequestError(
            f"a key's name must have 1 to {MAX_NAME} characters", param="name"
        )
    found = first_unprintable(name)
    if found is not None:
        raise InvalidRequestError(
            "a key's name must be printable: no control characters or invisible format "
            f"characters ({_described(found)})",
            param="name",
        )
    return name


def validated_globs(field: str, globs: Sequence[str] | None, what: str) -> list[str] | None:
    """``globs`` as stored for the key field ``field`` (``models``, ``mcp_tools``),
    globs of ``what`` (``model``, ``tool``); ``None`` (no restriction) when
    ``globs`` is ``None``. ``InvalidRequestError`` naming ``field`` for an empty list
    or glob (it would allow nothing: leaving the field out allows everything), more
    than ``MAX_GLOBS`` globs, one longer than ``MAX_GLOB_CHARS`` or one that is not
    printable."""
    if globs is None:
        return None
    example = _EXAMPLES.get(what, "name-*")
    if not globs:
        raise InvalidRequestError(
            f"{field} is empty, which would allow no {what}: give at least one glob, or "
            f"leave {field} out to allow every {what}",
            param=field,
        )
    if len(globs) > MAX_GLOBS:
        raise InvalidRequestError(
            f"{field} holds {len(globs)} globs; a key may hold at most {MAX_GLOBS} globs "
            f"in {field} (a glob such as '{example}' stands for many names)",
            param=field,
        )
    for glob in globs:
        if not glob.strip():
            raise InvalidRequestError(
                f"{field} holds an empty glob, which matches no {what}: give a {what} name "
                f"or glob (such as '{example}'), or leave {field} out to allow every {what}",
                param=field,
            )
        if len(glob) > MAX_GLOB_CHARS:
            raise InvalidRequestError(
                f"a glob in {field} must have at most {MAX_GLOB_CHARS} characters "
                f"(one has {len(glob)})",
                param=field,
            )
        found = first_unprintable(glob)
        if found is not None:
            raise InvalidRequestError(
                f"a glob in {field} must be printable: no control characters or invisible "
                f"format characters ({_described(found)})",
                param=field,
            )
    return list(globs)


@dataclass(frozen=True, slots=True)
class GlobSet:
    """Compiled globs: whether a name matches any of them, with no compilation."""

    exact: frozenset[str]
    """The globs without a wildcard: names compared as they are."""
    pattern: re.Pattern[str] | None
    """The others, as one expression (``None``: there are none)."""
    wild: tuple[str, ...] = ()
    """The globs in ``pattern``, as written (for ``may_start_with``)."""

    def matches(self, name: str) -> bool:
        if name in self.exact:
            return True
        return self.pattern is not None and self.pattern.match(name) is not None

    def may_start_with(self, prefix: str) -> bool:
        """Whether some name that begins with ``prefix`` matches one of the globs
        (``files__*``, ``files__read_*``, ``f*`` and ``*`` may for ``files__``;
        ``search__*`` may not)."""
        if any(name.startswith(prefix) for name in self.exact):
            return True
        return any(_glob_may_start_with(glob, prefix) for glob in self.wild)


@lru_cache(maxsize=1024)
def compiled_globs(globs: tuple[str, ...]) -> GlobSet:
    """``globs`` compiled (``fnmatchcase``'s rules: case-sensitive, ``*``, ``?``,
    ``[...]``); the last 1,024 sets compiled are kept."""
    wild = [g for g in globs if _WILDCARDS.intersection(g)]
    exact = frozenset(g for g in globs if not _WILDCARDS.intersection(g))
    # Each translation ends in \Z and groups itself, so the alternatives cannot mix.
    unique = tuple(dict.fromkeys(wild))
    pattern = re.compile("|".join(translate(g) for g in unique)) if wild else None
    return GlobSet(exact, pattern, unique)


@lru_cache(maxsize=4096)
def _glob_may_start_with(glob: str, prefix: str) -> bool:
    """Whether ``glob`` (``fnmatchcase``'s rules) matches some name beginning with
    ``prefix``: the glob's pieces are followed along ``prefix`` as a set of positions
    (a ``*`` stays where it is or steps past itself); any position still alive once
    ``prefix`` is read can be completed by some rest of the name."""
    pieces = _glob_pieces(glob)
    alive = _past_stars(pieces, {0})
    for char in prefix:
        following: set[int] = set()
        for at in alive:
            if at == len(pieces):
                continue
            piece = pieces[at]
            if piece == "*":
                following.add(at)
            elif piece == "?" or piece == char or (len(piece) > 1 and fnmatchcase(char, piece)):
                following.add(at + 1)
        alive = _past_stars(pieces, following)
        if not alive:
            return False
    return True


def _past_stars(pieces: tuple[str, ...], positions: set[int]) -> set[int]:
    """``positions`` and those reached by stepping past ``*`` pieces (which may match
    nothing)."""
    reached = set(positions)
    for at in positions:
        while at < len(pieces) and pieces[at] == "*":
            at += 1
            reached.add(at)
    return reached


def _glob_pieces(glob: str) -> tuple[str, ...]:
    """``glob`` cut as ``fnmatch.translate`` reads it: ``*``, ``?``, a ``[...]`` set
    (kept as a glob of its own, more than one character long) or one character (a
    ``[`` without its ``]`` is the character)."""
    pieces: list[str] = []
    at, end = 0, len(glob)
    while at < end:
        char = glob[at]
        at += 1
        if char == "[":
            close = at
            if close < end and glob[close] == "!":
                close += 1
            if close < end and glob[close] == "]":
                close += 1
            while close < end and glob[close] != "]":
                close += 1
            if close < end:
                pieces.append(glob[at - 1 : close + 1])
                at = close + 1
                continue
        if char == "*" and pieces and pieces[-1] == "*":
            continue  # "**" is "*"
        pieces.append(char)
    return tuple(pieces)
