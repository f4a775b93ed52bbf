"""A metrics hook that records what the limiter and the middlewares report as degraded."""

from __future__ import annotations

from ratewarden.metrics import Metrics


class Recorded(Metrics):
    """Keeps every ``degraded`` call as (rule, failure_mode, reason)."""

    def __init__(self) -> None:
        self.degraded_calls: list[tuple[str, str, str]] = []

    def degraded(self, *, rule: str, failure_mode: str, reason: str) -> None:
        self.degraded_calls.append((rule, failure_mode, reason))
