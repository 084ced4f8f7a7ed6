"""Where the LiteLLM proxy's CPU time goes, from a py-spy profile taken by
``bench/compare.py --py-spy FILE --py-spy-target litellm``.

This file owns the reading of such a profile (py-spy ``record -f raw --native``
collapsed stacks): samples of idle threads (waiting on a lock, or in ``epoll_pwait``)
are dropped, and every other sample goes to the first category below whose marker
appears anywhere in its stack, so the shares add up to 100%. The order matters: a
sample in the auth dependency counts as auth even though the router is below it.
``bench/profile_summary.py`` does the same for llmbridge's own profiles.

Run: ``.venv/bin/python bench/litellm_profile.py FILE``.
"""

from __future__ import annotations

import argparse
from collections import Counter
from pathlib import Path

__all__ = ["CATEGORIES", "summarise"]

# (category, markers): the first category with any marker in the stack wins.
CATEGORIES: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "auth: otel module import, retried (and failing) per request",
        ("_seed_request_destinations",),
    ),
    ("auth: the rest of user_api_key_auth", ("user_api_key_auth",)),
    ("success logging and cost calculation", ("success_handler", "cost_calculator")),
    ("openai SDK: decoding each upstream SSE event into models", ("AsyncStream",)),
    ("CustomStreamWrapper: rebuilding each chunk as LiteLLM models", ("CustomStreamWrapper",)),
    ("serialising each chunk again", ("_serialize_streaming_chunk",)),
    ("upstream call: openai SDK, httpx, aiohttp", ("AsyncCompletions.create", "aiohttp_transport")),
    (
        "router, main.acompletion, request and response transforms",
        ("litellm/router.py", "litellm/main.py"),
    ),
    ("proxy endpoint and pre-call hooks", ("chat_completion (",)),
    (
        "response send: middleware send wrappers, uvicorn h11",
        ("send_with_security_headers", "RequestResponseCycle.send"),
    ),
    ("stream generator layers (fallbacks, hooks, keep-alive)", ("stream_response",)),
    ("FastAPI routing, dependencies, 17 middlewares", ("run_asgi",)),
    ("h11 parsing of requests", ("h11",)),
    ("other threads", ("thread_run",)),
)
OTHER = "event loop and the rest"


def _idle(stack: str) -> bool:
    last = stack.rsplit(";", 1)[-1]
    return "PyThread_acquire_lock_timed" in stack or "epoll_pwait" in last


def summarise(path: Path) -> tuple[int, Counter[str]]:
    """Busy samples, and samples per category."""
    shares: Counter[str] = Counter()
    busy = 0
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit() or _idle(stack):
            continue
        busy += int(count)
        name = next((c for c, marks in CATEGORIES if any(m in stack for m in marks)), OTHER)
        shares[name] += int(count)
    return busy, shares


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("profile", type=Path, help="py-spy raw (collapsed) output")
    args = parser.parse_args(argv)
    busy, shares = summarise(args.profile)
    print(f"{busy} busy samples")
    for name in [c for c, _ in CATEGORIES] + [OTHER]:
        if shares[name]:
            print(f"{shares[name] / max(busy, 1):6.1%}  {name}")


if __name__ == "__main__":
    main()
