"""The files the profiler reads but did not write, read within bounds: the sessions and
trajectories ``profile import`` reads, and the ``traces.jsonl`` that ``profile run
--resume`` continues (which a person may have edited, or copied from anywhere).

- **Only regular files** (a symlink to one is fine). A FIFO would hold the import until
  something wrote to it, a device such as ``/dev/zero`` never ends: ``open_regular``
  refuses them (``NotRegularFile``, which the import skips with a warning), and it
  opens without blocking and checks what it opened, so a file swapped for a FIFO after
  it was listed is refused too.
- **One line at a time** (``JsonLines``), none longer than
  ``InputLimits.max_line_bytes``: a longer one is an error naming the file and line, read
  no further than the limit. The files of one import together are at most
  ``max_bytes`` (a ``.json`` document is read whole, within it), which bounds what the
  import holds: the records it reports are made of what it read.
- **JSON that the reports can use** (``parse_json``), stricter than ``json.loads``:
  ``NaN`` and the infinities (``1e400`` reads as one) are refused, so are integers
  beyond 64 bits (``10**400``, as the gateway's own JSON parser refuses them) and
  nesting deeper than ``MAX_DEPTH`` levels (the standard library's parser would
  recurse until it failed, and the writers after it at a lower depth still).

Every refusal names the file and the line (``InputError``). ``InputValueError`` is the
same refusal before the file is known: the parser and the converters raise it, and
the readers add where.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

__all__ = [
    "MAX_DEPTH",
    "ByteBudget",
    "InputError",
    "InputLimits",
    "InputValueError",
    "JsonLines",
    "NotRegularFile",
    "file_kind",
    "not_regular",
    "open_regular",
    "parse_json",
    "read_document",
    "unexpected_shape",
]

MAX_DEPTH = 256
"""Nesting levels a JSON value may have. The gateway refuses tool arguments deeper than
its ``max_json_depth`` (128), and a record wraps them in a few levels more; the
reports' pure-Python JSON writer (``indent``) recurses once per level, so a deep value
must stop here, well under the interpreter's recursion limit (1,000)."""

_INT64 = 2**63
_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"')
_NOT_BRACKETS = re.compile(r"[^\[\]{}]+")
_PARENS = str.maketrans("[{]}", "(())")


@dataclass(frozen=True, slots=True)
class InputLimits:
    """How much the profiler reads of files it did not write (module docstring)."""

    max_line_bytes: int = 32 * 1024 * 1024
    """The longest line of a ``.jsonl`` file (a transcript's line, a record of
    ``traces.jsonl``), as the gateway's largest request body (``max_body_bytes``)."""
    max_bytes: int = 256 * 1024 * 1024
    """What one ``profile import`` reads from all its files together."""


class InputError(Exception):
    """A file the profiler will not read, saying where (file, line) and why."""

    def __init__(self, path: Path, reason: str, line: int | None = None) -> None:
        where = str(path) if line is None else f"{path} line {line}"
        super().__init__(f"{where}: {reason}")
        self.path, self.reason, self.line = path, reason, line


class NotRegularFile(InputError):
    """A FIFO, a device, a socket or a directory where a file was expected."""


class InputValueError(ValueError):
    """Valid JSON that no report can use, or a value out of range; ``offset``: where
    in the text parsed it is, when the parser knows (``literal``: the token it refused,
    which tells it)."""

    def __init__(self, reason: str, offset: int | None = None, literal: str | None = None):
        super().__init__(reason)
        self.reason, self.offset, self.literal = reason, offset, literal


def unexpected_shape(exc: BaseException, what: str) -> str:
    """Why a ``what`` (a line, a field) that reading raised ``exc`` on is of no use: an
    ``InputValueError``'s own reason, else the shape it was not (a ``KeyError``: the key
    it lacked)."""
    if isinstance(exc, InputValueError):
        return exc.reason
    if isinstance(exc, KeyError):
        return f"{what} of an unexpected shape (no {exc.args[0]!r})"
    return f"{what} of an unexpected shape ({exc})"


class ByteBudget:
    """The bytes one import may still read (``InputLimits.max_bytes``)."""

    def __init__(self, limits: InputLimits) -> None:
        self.limit = limits.max_bytes
        self.left = limits.max_bytes

    def take(self, count: int, path: Path, line: int | None = None) -> None:
        self.left -= count
        if self.left < 0:
            raise InputError(
                path,
                f"the import would read more than {self.limit:,} bytes in all (--max-bytes)",
                line,
            )


def not_regular(path: Path, mode: int) -> str:
    """Why ``path`` (its ``stat`` mode, after symlinks) is not read, in words."""
    link = ""
    if path.is_symlink():
        link = f" (a symbolic link to {os.readlink(path)})"
    return f"{file_kind(mode)}{link}, not a regular file"


def file_kind(mode: int) -> str:
    """What a file that is not a regular file is, in words."""
    if stat.S_ISFIFO(mode):
        return "a named pipe (FIFO)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "not a regular file"


def open_regular(path: Path) -> IO[bytes]:
    """``path`` opened for reading if it is a regular file (after symlinks), else
    ``NotRegularFile``; ``InputError`` when it cannot be opened."""
    try:
        mode = path.stat().st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, not_regular(path, mode))
        # O_NONBLOCK: were it swapped for a FIFO since, opening it must not wait for a
        # writer; the fstat below then refuses it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except OSError as exc:
        raise InputError(path, f"cannot be read: {exc.strerror or exc}") from exc
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(path, not_regular(path, mode))
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb")


class JsonLines:
    """A ``.jsonl`` file's lines as text, one at a time, each within
    ``max_line_bytes`` and taken from ``budget`` (module docstring). ``line`` is the
    number of the line last given (so an error found in it can name it), ``ended``
    whether that line had its newline: a last line without one was cut short (a writer
    killed mid-line), and is dropped if it is not UTF-8 (cut inside a character)."""

    def __init__(self, path: Path, limits: InputLimits, budget: ByteBudget | None = None) -> None:
        self.path, self.limits, self.budget = path, limits, budget
        self.line = 0
        self.ended = True

    def error(self, reason: str) -> InputError:
        """An error about the line last given."""
        return InputError(self.path, reason, self.line)

    def __iter__(self) -> Iterator[str]:
        cap = self.limits.max_line_bytes
        with open_regular(self.path) as file:
            while raw := file.readline(cap + 1):  # never more than the cap in memory
                self.line += 1
                if self.budget is not None:
                    self.budget.take(len(raw), self.path, self.line)
                self.ended = raw.endswith(b"\n")
                if len(raw) > cap and not self.ended:  # cap bytes and its newline fit
                    raise self.error(
                        f"longer than the {cap:,} bytes a line may have (--max-line-bytes)"
                    )
                try:
                    text = raw.decode("utf-8")
                except UnicodeDecodeError as exc:
                    if not self.ended:  # the last line, cut short inside a character
                        return
                    raise self.error(f"not UTF-8 text (byte {exc.start + 1} of the line)") from exc
                yield text

    def objects(self) -> Iterator[Any]:
        """Each line that is JSON, parsed by ``parse_json`` (blank lines and lines that
        are not JSON are passed over; a value no report can use is an error)."""
        for text in self:
            if not text.strip():
                continue
            try:
                yield parse_json(text)
            except InputValueError as exc:
                raise self.error(exc.reason) from exc
            except ValueError:
                continue


def read_document(path: Path, budget: ByteBudget) -> Any:
    """A ``.json`` file, read whole within ``budget`` and parsed by ``parse_json``;
    ``ValueError`` when it is not JSON, ``InputError`` naming the line of a value no
    report can use."""
    with open_regular(path) as file:
        raw = file.read(max(budget.left, 0) + 1)
    budget.take(len(raw), path)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(path, "not UTF-8 text", raw.count(b"\n", 0, exc.start) + 1) from exc
    try:
        return parse_json(text)
    except InputValueError as exc:
        where = None if exc.offset is None else text.count("\n", 0, exc.offset) + 1
        raise InputError(path, exc.reason, where) from exc


def parse_json(text: str) -> Any:
    """``text`` as JSON (module docstring): ``InputValueError`` for a value no report
    can use, with its offset; ``ValueError`` when it is not JSON."""
    try:
        value = _DECODER.decode(text)
    except InputValueError as exc:
        exc.offset = _locate(text, exc.literal)
        raise
    except RecursionError:
        raise InputValueError(
            f"nested deeper than {MAX_DEPTH} levels", _too_deep_at(text)
        ) from None
    # Fewer brackets than the limit cannot nest deeper (the common case, no scan).
    if text.count("[") + text.count("{") > MAX_DEPTH and _deeper_than_max(text):
        raise InputValueError(f"nested deeper than {MAX_DEPTH} levels", _too_deep_at(text))
    return value


def _constant(literal: str) -> Any:
    raise InputValueError(f"{literal} is not a finite number", literal=literal)


def _float(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):
        raise InputValueError(f"{literal} is not a finite number", literal=literal)
    return value


def _integer(literal: str) -> int:
    # Checked as text first: int() of thousands of digits is slow, and refused past
    # 4,300 digits with an error that names no place.
    if len(literal) > 20 or not -_INT64 <= (value := int(literal)) < 2 * _INT64:
        shown = literal if len(literal) <= 24 else f"{literal[:20]}... ({len(literal)} digits)"
        raise InputValueError(f"{shown} is out of range (beyond 64 bits)", literal=literal)
    return value


_DECODER = json.JSONDecoder(parse_constant=_constant, parse_float=_float, parse_int=_integer)
"""One decoder for every line (``json.loads`` with hooks builds one per call)."""


def _locate(text: str, literal: str | None) -> int | None:
    """Where the bare token ``literal`` first stands outside a string."""
    if literal is None:
        return None
    token = re.compile(
        r'"[^"\\]*(?:\\.[^"\\]*)*"|(?<![\w.+-])(' + re.escape(literal) + r")(?![\w.])"
    )
    for match in token.finditer(text):
        if match.group(1) is not None:
            return match.start(1)
    return None


def _deeper_than_max(text: str) -> bool:
    """Whether valid JSON ``text`` nests deeper than ``MAX_DEPTH``: its brackets outside
    strings, each pass taking away the innermost pairs (C-speed string operations; at
    most ``MAX_DEPTH`` passes)."""
    brackets = _NOT_BRACKETS.sub("", _STRING.sub("", text)).translate(_PARENS)
    for _ in range(MAX_DEPTH):
        inner = brackets.replace("()", "")
        if not inner or inner == brackets:
            return False
        brackets = inner
    return True


def _too_deep_at(text: str) -> int | None:
    """The offset of the first bracket past ``MAX_DEPTH`` levels (the error's place)."""
    depth = 0
    for match in re.finditer(r'"[^"\\]*(?:\\.[^"\\]*)*"|[\[\]{}]', text):
        char = match.group()
        if char in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                return match.start()
        elif char in "]}":
            depth -= 1
    return None
