"""Helpers shared by the tier tests: a MemoryStore that counts its calls, a metrics recorder."""

from __future__ import annotations

from collections.abc import Sequence

from ratewarden.decision import Decision
from ratewarden.errors import StorageUnavailableError
from ratewarden.metrics import Metrics
from ratewarden.rate import Rate
from ratewarden.storage.memory import MemoryStore


class CountingStore(MemoryStore):
    """A real MemoryStore that counts hits and the units charged through it."""

    def __init__(self, **options: object) -> None:
        super().__init__(**options)  # type: ignore[arg-type]
        self.calls = 0
        self.charged = 0

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        self.calls += 1
        decision = super().hit(algorithm, key, rates, cost)
        if decision.allowed:
            self.charged += cost
        return decision


class Recorder(Metrics):
    """Metrics hooks that keep what they are told."""

    __slots__ = ("breakers", "decisions", "degraded_calls")

    def __init__(self) -> None:
        self.degraded_calls: list[tuple[str, str, str]] = []
        self.breakers: list[tuple[str, str]] = []
        self.decisions: list[Decision] = []

    def degraded(self, *, rule: str, failure_mode: str, reason: str) -> None:
        self.degraded_calls.append((rule, failure_mode, reason))

    def breaker(self, *, name: str, state: str) -> None:
        self.breakers.append((name, state))

    def decision(self, *, rule: str, algorithm: str, decision: Decision) -> None:
        self.decisions.append(decision)


class SwitchableStore(CountingStore):
    """A MemoryStore that raises StorageUnavailableError while ``down`` (pure-logic tests only).

    The tests against a real stopped redis-server live in test_outage_redis.py.
    """

    def __init__(self, **options: object) -> None:
        super().__init__(**options)
        self.down = False

    def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        if self.down:
            self.calls += 1
            raise StorageUnavailableError("store switched off by the test")
        return super().hit(algorithm, key, rates, cost)

    def reset(self, algorithm: str, key: str, rates: Rate | Sequence[Rate]) -> None:
        if self.down:
            raise StorageUnavailableError("store switched off by the test")
        super().reset(algorithm, key, rates)
