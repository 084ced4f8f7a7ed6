"""A ``ServingObserver`` for tests: the retries and fallbacks serving made."""

from __future__ import annotations


class Tally:
    """The retries and fallbacks serving made, by backend, in order."""

    def __init__(self) -> None:
        self.retries: list[str] = []
        self.fallbacks: list[str] = []

    def retry(self, backend: str) -> None:
        self.retries.append(backend)

    def fallback(self, backend: str) -> None:
        self.fallbacks.append(backend)
