"""Several servers behind one model: the order a route's deployments are tried in.

A route may list ``backends: [gpu1, {name: gpu2, weight: 2}]`` (serving/config.py
``Deployment``) instead of one ``backend``. Each request then goes to one of them,
picked by the route's ``strategy``, and the others, in order, are where it goes if
that one fails before its first byte (serving/models.py tries them as it tries
fallbacks; a deployment whose circuit is open is skipped and probed back by its
breaker as any backend is):

- ``least-busy`` (default): the fewest requests in flight, divided by the weight;
  the counts are the shared state's (``dep:<backend>``), so with Redis every worker
  and replica sees the same numbers. Reading the counts and taking a slot are two
  calls, so replicas that pick at the same moment may pick alike: the counts even
  out over the next requests (LiteLLM's least-busy reads and then counts, too).
- ``round-robin``: in turn through a cycle where each deployment has ``weight``
  turns, interleaved (nginx's smooth weighted round robin); the turn is the shared
  state's counter ``rr:<route>``, so replicas share one cycle.
- ``latency``: the lowest recent time to first token (the shared state's EWMA,
  ``ttft:<backend>``, fed at each reply's first event); a deployment not yet measured
  goes first, so each gets measured. Weights only break ties.

Ties (every count zero, say) go to the next deployment of the weighted cycle, kept
per process: a run of requests one at a time is spread by weight, not all sent to
the first.

**Affinity** (``affinity: true``): a request carrying a session key (the route's
``affinity_header``, else the client's session, ``client_session``: a session header
Claude Code or Codex sends, OpenAI's ``prompt_cache_key``, Claude Code's session in
``metadata.user_id``) goes to the same deployment while it is healthy, so the
server's KV cache for that conversation is reused. The deployments are ordered by
rendezvous hashing (Thaler and Ravishankar's highest random weight, weighted as in
Schindelhauer and Schomaker's logarithmic method): each (key, deployment) pair gets
a score from a hash of both, and the highest scoring healthy deployment serves. It
needs no shared state: every worker and replica computes the same order from the key
alone. When a deployment's circuit opens only the keys it served move (each to its
own second choice), and they come back when it recovers.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llmbridge.serving.config import Deployment, ModelRoute
from llmbridge.state.base import SharedState

__all__ = [
    "SESSION_HEADERS",
    "DeploymentPool",
    "client_session",
    "in_flight_key",
    "latency_key",
    "raw_client_session",
    "rendezvous_order",
    "session_key",
    "smooth_cycle",
]


def in_flight_key(backend: str) -> str:
    """The shared state's in-flight count of a deployment."""
    return f"dep:{backend}"


def latency_key(backend: str) -> str:
    """The shared state's EWMA of a deployment's time to first token."""
    return f"ttft:{backend}"


def smooth_cycle(weights: Sequence[int]) -> tuple[int, ...]:
    """One cycle of smooth weighted round robin (nginx, ngx_http_upstream_round_robin.c):
    index ``i`` appears ``weights[i]`` times, spread out (weights 5, 1, 1 give
    ``0 0 1 0 2 0 0``, not ``0 0 0 0 0 1 2``)."""
    total = sum(weights)
    current = [0] * len(weights)
    cycle: list[int] = []
    for _ in range(total):
        for index, weight in enumerate(weights):
            current[index] += weight
        best = max(range(len(weights)), key=current.__getitem__)  # the first on a tie
        current[best] -= total
        cycle.append(best)
    return tuple(cycle)


def _unit_hash(key: str, name: str) -> float:
    """A uniform number in (0, 1) from ``key`` and ``name``, the same in every process
    (``hash()`` is salted per process, so it would not do)."""
    digest = hashlib.blake2b(f"{key}\0{name}".encode(), digest_size=8).digest()
    return (int.from_bytes(digest, "big") + 0.5) / 2**64


def rendezvous_order(key: str, deployments: Sequence[Deployment]) -> list[int]:
    """Indexes of ``deployments``, the best for ``key`` first (module docstring).

    Weighted: the score ``-weight / ln(u)`` gives a deployment the share of keys its
    weight says, and removing one moves only the keys it had."""
    scores = [-d.weight / math.log(_unit_hash(key, d.name)) for d in deployments]
    return sorted(range(len(deployments)), key=lambda i: -scores[i])


# -- the session key -----------------------------------------------------------------

# Where the dialects' decoders keep the fields that carry a session (their
# ``provider_details`` keys: dialects/openai/request.py keeps unmodelled top-level
# fields under "openai", dialects/responses/request.py echoes prompt_cache_key under
# "responses" -> "echo", dialects/anthropic/request.py keeps metadata under "anthropic").
_OPENAI, _RESPONSES, _ANTHROPIC = "openai", "responses", "anthropic"
_LEGACY_SESSION = re.compile(r"_session_([0-9A-Za-z-]+)$")
"""Claude Code before 2.1 sent ``user_<hash>_account_<uuid>_session_<uuid>``."""


def _text(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def _member(value: object, name: str) -> object:
    return value.get(name) if isinstance(value, Mapping) else None


def claude_code_session(user_id: str) -> str:
    """The session in Claude Code's ``metadata.user_id``: a JSON object's
    ``session_id`` (2.1.x: ``{"device_id": ..., "account_uuid": ..., "session_id":
    ...}``, reference/captured/claude-code-2.1.330-messages-request.json), the
    ``_session_<uuid>`` suffix of the older form, else the whole value (one user's
    requests then keep to one deployment)."""
    if user_id.startswith("{"):
        try:
            parsed: object = json.loads(user_id)
        except ValueError:
            return user_id
        return _text(_member(parsed, "session_id")) or user_id
    legacy = _LEGACY_SESSION.search(user_id)
    return legacy.group(1) if legacy else user_id


def session_key(details: Mapping[str, Any] | None) -> str | None:
    """The session a decoded request names in its body, if any: OpenAI's
    ``prompt_cache_key`` (chat completions and Responses: Codex sends its
    conversation id there), or Claude Code's session in ``metadata.user_id``."""
    if not details:
        return None
    key = _text(_member(details.get(_OPENAI), "prompt_cache_key"))
    if key is None:
        echo = _member(details.get(_RESPONSES), "echo")
        key = _text(_member(echo, "prompt_cache_key"))
    if key is None:
        user_id = _text(_member(_member(details.get(_ANTHROPIC), "metadata"), "user_id"))
        key = claude_code_session(user_id) if user_id else None
    return key


SESSION_HEADERS = (
    "x-llmbridge-session-id",
    "x-claude-code-session-id",
    "session-id",
    "session_id",
)
"""The headers that name the client's session, in the order they are read:

- ``x-llmbridge-session-id``: the gateway's own, for any client that can add a header
  (Gemini CLI 0.61.0 sends no session id with an API key, but adds the headers of
  ``GEMINI_CLI_CUSTOM_HEADERS``);
- ``x-claude-code-session-id``: Claude Code (2.1.330: the ``session_id`` of its
  ``metadata.user_id`` too);
- ``session-id``: Codex CLI (0.169.0: the same id as its ``prompt_cache_key``, beside
  ``thread-id``);
- ``session_id``: Codex releases before it, and the clients that copy their headers.

Gemini CLI's ``x-gemini-api-privileged-user-id`` is not one: it is the installation's
id, the same in every session, sent only while its usage statistics are on."""


_SESSION_RANKS = {name.encode("latin-1"): rank for rank, name in enumerate(SESSION_HEADERS)}


def client_session(headers: Mapping[str, str], details: Mapping[str, Any] | None) -> str | None:
    """The session a request names: the first of ``SESSION_HEADERS`` it carries, else
    the one its body names (``session_key``). The key a route with ``affinity`` keeps
    on one deployment (unless its ``affinity_header`` gives another), and what the
    usage ledger records (``raw_client_session``). ``headers`` look-ups must ignore
    case (starlette's ``Headers``)."""
    for name in SESSION_HEADERS:
        value = headers.get(name)
        if value:
            value = value.strip()
            if value:
                return value
    return session_key(details)


def raw_client_session(
    raw: Iterable[tuple[bytes, bytes]], details: Mapping[str, Any] | None
) -> str | None:
    """``client_session`` from an ASGI scope's ``headers``, whose names the server
    gives in lower case (uvicorn does; starlette's ``Headers`` relies on it too): one
    pass over them with a dict look-up each, where four look-ups scanned them four
    times (every ledger row reads it; for Claude Code's 20 headers 2-3 µs instead of
    6-18 µs on a loaded 2-core machine)."""
    best, found = len(SESSION_HEADERS), None
    for name, value in raw:
        rank = _SESSION_RANKS.get(name)
        if rank is not None and rank < best:
            text = value.decode("latin-1").strip()
            if text:
                best, found = rank, text
    return found if found is not None else session_key(details)


# -- a route's deployments -----------------------------------------------------------


class DeploymentPool:
    """One route's deployments and its strategy: ``order`` says where a request goes
    first, then next (module docstring)."""

    __slots__ = (
        "_rotations",
        "_turn_key",
        "_turns",
        "affinity",
        "deployments",
        "in_flight_keys",
        "latency_keys",
        "route",
    )

    def __init__(self, route: ModelRoute) -> None:
        self.route = route
        self.deployments = route.deployments
        self.affinity = route.affinity
        names = [d.name for d in self.deployments]
        self.in_flight_keys = tuple(in_flight_key(n) for n in names)
        self.latency_keys = tuple(latency_key(n) for n in names)
        self._turn_key = f"rr:{route.name}"
        self._turns = itertools.count()
        cycle = smooth_cycle([d.weight for d in self.deployments])
        # Each starting turn's order, computed once: every deployment once, in the
        # order the cycle reaches them from that turn.
        self._rotations = tuple(
            tuple(dict.fromkeys(cycle[start:] + cycle[:start])) for start in range(len(cycle))
        )

    def _rotation(self, turn: int) -> tuple[int, ...]:
        return self._rotations[turn % len(self._rotations)]

    async def order(self, state: SharedState, affinity_key: str | None) -> Sequence[int]:
        """Indexes of ``deployments`` in the order to try them."""
        if self.affinity and affinity_key:
            return rendezvous_order(affinity_key, self.deployments)
        strategy = self.route.strategy
        if strategy == "round-robin":
            return self._rotation(await state.next_index(self._turn_key))
        # A stable sort of this turn's rotation: ties keep the cycle's order.
        rotation = self._rotation(next(self._turns))
        if strategy == "least-busy":
            counts = await state.in_flight(self.in_flight_keys)
            busy = [
                counts.get(key, 0) / d.weight
                for key, d in zip(self.in_flight_keys, self.deployments, strict=True)
            ]
            return sorted(rotation, key=busy.__getitem__)
        seen = await state.latencies(self.latency_keys)
        latency = [seen.get(key) for key in self.latency_keys]
        # Unknown first (so each gets measured), then the fastest.
        return sorted(rotation, key=lambda i: (latency[i] is not None, latency[i] or 0.0))
