"""How long the ``opencode`` backend waits for OpenCode, and what it says when it stops.

Three deadlines bound one prompt (``OpenCodeTimeouts``, seed 000's 20 / 30 s by
default): ``prompt`` from sending the prompt to its first output, ``idle`` once output
has come between two events, and, when set, ``total`` from the prompt to the end of
the reply. Each missed deadline is a ``BackendTimeoutError`` (a 504) whose message says
which setting's deadline passed, after how long, and the configuration key that
raises it, in every dialect alike (the gateway renders the message as it stands).

**A model on this machine.** Seed 000's defaults suit a hosted model, whose first
token comes in seconds. A model served on the gateway's own machine (the embedded
model behind the ``self`` provider, an Ollama or llama.cpp server on loopback) first
evaluates OpenCode's whole prompt on the local CPU or GPU: a Home Assistant request
through OpenCode on the embedded model took 57 s on a 2-core machine, so the 20 s
prompt deadline failed it every time. A provider is local when its URL is ``self`` or
a loopback address (``core.hosts.is_loopback_url``); a model on one gets ``LOCAL_PROMPT_TIMEOUT``
and ``LOCAL_IDLE_TIMEOUT`` instead of the defaults (``for_local_provider``). Settings
an operator gives explicitly always win. Scaling the default was chosen over timing
the first output from OpenCode's first event for the session: OpenCode's events
before the model's first token (the user message, the assistant message opening)
come within milliseconds of the prompt either way, so they say nothing about how
long the prompt's evaluation will take, and a dead provider (which OpenCode retries
for ever) must still be caught by the same deadline.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = [
    "LOCAL_IDLE_TIMEOUT",
    "LOCAL_PROMPT_TIMEOUT",
    "Deadlines",
    "OpenCodeTimeouts",
    "Stage",
    "for_local_provider",
]

LOCAL_PROMPT_TIMEOUT = 300.0
"""The prompt deadline for a model on a local provider: the embedded model evaluates
a full 8,192-token window in about 90 s on a 2-core machine (90 tokens/s), and a
request may wait for one other in its queue; 300 s covers both on a loaded machine."""
LOCAL_IDLE_TIMEOUT = 60.0
"""The idle deadline for a model on a local provider: twice the default, for a CPU
shared with other work between two tokens."""


@dataclass(frozen=True, slots=True)
class OpenCodeTimeouts:
    """Seconds. ``prompt``: from sending the prompt to its first output (OpenCode
    retries an unreachable provider for ever, so this is what catches a dead model);
    ``idle``: once output has come, the longest wait for the session's next event (a
    reply that keeps streaming is never cut; OpenCode's "retrying the provider"
    reports do not count as events, since they say the model is not answering);
    ``total``: from sending the prompt to the end of the turn, ``None`` for no limit;
    ``delete``: for the background abort and deletion of a session."""

    prompt: float = 20.0
    idle: float = 30.0
    total: float | None = None
    delete: float = 5.0
    local: frozenset[str] = frozenset()
    """Which of ``prompt`` and ``idle`` are the local-provider defaults rather than
    settings (named in a timeout's message)."""


def for_local_provider(timeouts: OpenCodeTimeouts, explicit: frozenset[str]) -> OpenCodeTimeouts:
    """``timeouts`` for a model on a local provider: the prompt and idle deadlines not
    in ``explicit`` (the settings the operator gave, by their names ``prompt_timeout``
    and ``idle_timeout``) become ``LOCAL_PROMPT_TIMEOUT`` and ``LOCAL_IDLE_TIMEOUT``."""
    prompt, idle = "prompt_timeout" not in explicit, "idle_timeout" not in explicit
    return replace(
        timeouts,
        prompt=LOCAL_PROMPT_TIMEOUT if prompt else timeouts.prompt,
        idle=LOCAL_IDLE_TIMEOUT if idle else timeouts.idle,
        local=frozenset(name for name, scaled in (("prompt", prompt), ("idle", idle)) if scaled),
    )


@dataclass(frozen=True, slots=True)
class Stage:
    """One deadline of a turn, as its timeout's message names it."""

    setting: str
    """The configuration key that sets this deadline (``prompt_timeout``...)."""
    seconds: float
    wording: str
    """What OpenCode failed to do, e.g. "did not start its reply within 20 s"."""


class Deadlines:
    """When one turn must next hear from OpenCode, and what missing it means.

    Before any output: ``prompt`` seconds from sending the prompt. After: ``idle``
    seconds from the last event heard. Both within ``total``, when it is set.
    """

    __slots__ = ("accept", "idle", "last_event", "prompt", "sent", "timeouts", "total")

    def __init__(self, timeouts: OpenCodeTimeouts, sent: float) -> None:
        self.timeouts = timeouts
        self.sent = sent
        self.last_event = sent
        # Worded once: next() runs for every event, and the words are rarely needed.
        t = timeouts
        self.accept = Stage(
            "prompt_timeout", t.prompt, f"did not accept the prompt within {t.prompt:g} s"
        )
        self.prompt = Stage(
            "prompt_timeout", t.prompt, f"did not start its reply within {t.prompt:g} s"
        )
        self.idle = Stage(
            "idle_timeout", t.idle, f"sent nothing more for {t.idle:g} s while replying"
        )
        self.total = (
            None
            if t.total is None
            else Stage("total_timeout", t.total, f"did not finish its reply within {t.total:g} s")
        )

    def heard(self, now: float) -> None:
        self.last_event = now

    def next(self, produced: bool, now: float) -> tuple[float, Stage]:
        """Seconds left until the nearest deadline, and that deadline."""
        t = self.timeouts
        if produced:
            at, stage = self.last_event + t.idle, self.idle
        else:
            at, stage = self.sent + t.prompt, self.prompt
        if self.total is not None and t.total is not None and self.sent + t.total < at:
            at, stage = self.sent + t.total, self.total
        return at - now, stage

    def message(self, backend: str, stage: Stage, now: float, retrying: str | None) -> str:
        """The timeout's message: which deadline passed, after how long, how to raise it."""
        local = " (its default for a model on a local provider)"
        default = local if stage.setting.removesuffix("_timeout") in self.timeouts.local else ""
        hint = f"; OpenCode was retrying its model provider: {retrying}" if retrying else ""
        return (
            f"backend '{backend}': OpenCode {stage.wording}{hint}. The `{stage.setting}` "
            f"deadline{default} passed {now - self.sent:.1f} s after the prompt was sent; "
            f"to wait longer, raise `{stage.setting}` (backends.{backend}.{stage.setting})"
        )
