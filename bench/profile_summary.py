"""Where the gateway's CPU time goes, from a profile taken by ``bench/overhead.py``.

This file owns the reading of profiles, not their taking. It accepts:

- py-spy collapsed stacks (``overhead.py --py-spy FILE``, i.e. ``py-spy record -f raw
  --native``): every sample is put in one category (the socket write, the upstream
  HTTP client, llmbridge's stream decode or encode, ...) by its innermost frame that
  says something, so the shares add up to 100%. Samples of a thread that was waiting,
  not running (the event loop in ``epoll_wait``, a helper thread such as aiosqlite's
  blocked on its queue's lock), are counted apart and left out of the shares: py-spy
  records them when native frames are on, and they are no CPU;
- cProfile stats (``overhead.py --profile-gateway FILE``): the same categories over
  each function's own time (cProfile's overhead inflates many-small-call code, and
  time in uvloop's C code lands in its Python caller, so prefer py-spy).
"""

from __future__ import annotations

import argparse
import pstats
import re
from collections import Counter, defaultdict
from pathlib import Path

__all__ = ["categorise_frame", "is_waiting", "summarise_collapsed", "summarise_pstats"]

_SITE = re.compile(r".*/site-packages/|.*/src/|.*/lib/python3\.\d+/")
_NEUTRAL = re.compile(
    r"^(asyncio/|contextlib|dataclasses|typing|abc|enum|functools|codecs|weakref|_weakrefset|"
    r"<string>|<frozen|re/|collections/|copy|types)"
)
_STREAM_ENCODE = re.compile(r"encode|Encoder|Writer|_escape|_delta_frame|_tool_call_line|_error")

WRITE = "response write: uvicorn send -> socket write()"
CONNECT = "opening upstream TCP connections"
LOOP = "event loop (uvloop: epoll, socket reads, task switches)"


def short(frame: str) -> tuple[str, str]:
    """``("llmbridge/gateway/pipeline.py", "serve_chat")`` from a py-spy frame."""
    match = re.match(r"(.*) \((.*?):\d+\)$", frame)
    if match is None:
        return ("<native>", frame)
    function, path = match.groups()
    return (_SITE.sub("", path), function)


def categorise_frame(path: str, function: str) -> str | None:
    """The category of one Python frame, or ``None`` for frames that only pass time on
    (stdlib helpers, dataclass ``__init__``): their caller decides."""
    if _NEUTRAL.match(path) or path == "<native>":
        return None
    if path.startswith("llmbridge/"):
        return _llmbridge_category(path, function)
    for prefix, name in (
        ("pydantic", "request decode and validation (llmbridge + pydantic)"),
        ("httpx_sse", "SSE line parsing (httpx_sse)"),
        ("httpx/", "upstream HTTP client (httpx, httpcore, h11, anyio)"),
        ("httpcore", "upstream HTTP client (httpx, httpcore, h11, anyio)"),
        ("h11", "upstream HTTP client (httpx, httpcore, h11, anyio)"),
        ("anyio", "upstream HTTP client (httpx, httpcore, h11, anyio)"),
        ("sniffio", "upstream HTTP client (httpx, httpcore, h11, anyio)"),
        ("aiohttp", "upstream HTTP client (aiohttp, multidict, yarl)"),
        ("multidict", "upstream HTTP client (aiohttp, multidict, yarl)"),
        ("yarl", "upstream HTTP client (aiohttp, multidict, yarl)"),
        ("starlette", "ASGI framework (starlette routing, middleware, responses)"),
        ("uvicorn", "HTTP server (uvicorn, httptools)"),
        ("prometheus_client", "metrics (prometheus_client)"),
        ("orjson", "JSON (orjson)"),
    ):
        if path.startswith(prefix):
            return name
    return None


def _llmbridge_category(path: str, function: str) -> str:
    if re.match(r"llmbridge/dialects/\w+/(request|types)\.py", path):
        return "request decode and validation (llmbridge + pydantic)"
    if re.match(r"llmbridge/dialects/\w+/stream\.py", path):
        if _STREAM_ENCODE.search(function):
            return "llmbridge stream encode (dialect -> bytes)"
        return "llmbridge stream decode (bytes -> events)"
    if path.startswith("llmbridge/core/parts_manager") or path.startswith("llmbridge/core/events"):
        return "llmbridge stream decode (bytes -> events)"
    if path.startswith("llmbridge/dialects/framing") or re.match(
        r"llmbridge/dialects/\w+/response\.py", path
    ):
        return "llmbridge stream encode (dialect -> bytes)"
    if path.startswith("llmbridge/core/accumulate"):
        return "llmbridge accumulate (non-streaming replies)"
    if path.startswith("llmbridge/gateway/metrics"):
        return "metrics (prometheus_client)"
    return "llmbridge glue (pipeline, routes, backends, streaming)"


def categorise_stack(frames: list[tuple[str, str]]) -> str:
    functions = {f for _, f in frames}
    if "RequestResponseCycle.send" in functions:
        return WRITE
    if functions & {"connect_tcp", "AsyncIOBackend.connect_tcp", "AsyncHTTPConnection._connect"}:
        return CONNECT
    for path, function in reversed(frames):
        if function == "Runner.run":
            return LOOP  # uvloop's C code: nothing in Python is running
        category = categorise_frame(path, function)
        if category is not None:
            return category
    return LOOP


_WAITS = re.compile(
    r"^(epoll_p?wait|poll|select|PyThread_acquire_lock_timed|pthread_cond_(timed)?wait)\b"
)


def is_waiting(frames: list[tuple[str, str]]) -> bool:
    """Whether a sample is a thread waiting, not running: its innermost named frame,
    past the unnamed libc frames inside it (the kernel call), is a wait (``epoll_wait``,
    ``poll``, a lock or condition variable a thread sleeps on)."""
    for path, function in reversed(frames):
        if path == "<native>" and function.startswith("0x"):
            continue
        return _WAITS.match(function) is not None
    return False


def summarise_collapsed(path: Path, top: int) -> str:
    categories: Counter[str] = Counter()
    leaves: Counter[str] = Counter()
    total = waiting = 0
    for line in path.read_text().splitlines():
        stack, _, count_text = line.rpartition(" ")
        if not stack or not count_text.isdigit():
            continue
        count = int(count_text)
        frames = [short(f) for f in stack.split(";")]
        if is_waiting(frames):
            waiting += count
            continue
        total += count
        categories[categorise_stack(frames)] += count
        path_, function = frames[-1]
        leaves[f"{function} ({path_})"] += count
    lines = [
        f"{total} samples (py-spy, native frames included); "
        f"{waiting} more of threads waiting (no CPU) left out",
        "",
        "share  category",
    ]
    lines += [f"{n / total:6.1%}  {name}" for name, n in categories.most_common()]
    lines += ["", f"innermost frames, top {top}:"]
    lines += [f"{n / total:6.1%}  {name}" for name, n in leaves.most_common(top)]
    return "\n".join(lines)


def summarise_pstats(path: Path, top: int) -> str:
    stats = pstats.Stats(str(path))
    raw: dict[tuple[str, int, str], tuple[int, int, float, float, object]]
    raw = stats.stats  # type: ignore[attr-defined]
    categories: dict[str, float] = defaultdict(float)
    own: dict[str, float] = defaultdict(float)
    total = 0.0
    for (filename, _, function), (_, _, tottime, _, _) in raw.items():
        total += tottime
        short_path = _SITE.sub("", filename)
        category = categorise_frame(short_path, function)
        if "httptools_impl" in filename and function == "send":
            category = WRITE
        categories[category or "stdlib, builtins and the event loop"] += tottime
        own[f"{function} ({short_path})"] += tottime
    lines = [f"{total:.2f} s of profiled time (cProfile own time)", "", "share  category"]
    lines += [f"{t / total:6.1%}  {name}" for name, t in _largest(categories)]
    lines += ["", f"functions by own time, top {top}:"]
    lines += [f"{t / total:6.1%}  {name}" for name, t in _largest(own)[:top]]
    return "\n".join(lines)


def _largest(values: dict[str, float]) -> list[tuple[str, float]]:
    return sorted(values.items(), key=lambda item: item[1], reverse=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="py-spy collapsed stacks or cProfile stats")
    parser.add_argument("--top", type=int, default=20)
    args = parser.parse_args(argv)
    if is_collapsed(args.profile):
        print(summarise_collapsed(args.profile, args.top))
    else:
        print(summarise_pstats(args.profile, args.top))


def is_collapsed(path: Path) -> bool:
    """py-spy's collapsed stacks are text lines ending in a sample count."""
    with path.open("rb") as file:
        head = file.read(4096)
    try:
        first = head.decode().splitlines()[0]
    except (UnicodeDecodeError, IndexError):
        return False
    return re.fullmatch(r".* \d+", first) is not None


if __name__ == "__main__":
    main()
