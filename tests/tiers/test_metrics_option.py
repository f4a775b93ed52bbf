"""``metrics=`` is checked where it is given: an object that is not a metrics object (a class
for an instance, ``object()``, None where a metrics object is required) is a
ConfigurationError naming the owner, the value and what to give, at construction; a class of
the caller's that has the hooks called, without subclassing ``Metrics``, keeps working."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import AsyncLimiter, AsyncMemoryStore, Limiter, Rate
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import FailureReport
from ratewarden.metrics import Metrics, PrometheusMetrics
from ratewarden.middleware import RateLimitMiddleware, Rule, RuleSet
from ratewarden.regions import ReconciledBudget
from ratewarden.storage.memory_regions import MemoryRegionStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, CircuitBreaker, TwoTier
from tests.middleware._helpers import ok
from tests.tiers._helpers import CountingStore, SwitchableStore

RATE = Rate.parse("10/minute")


class OwnHooks:
    """A user's metrics class that does not subclass Metrics: the hooks a limiter, its
    breaker and a failure mode call."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def decision(self, *, rule: str, algorithm: str, decision: Decision) -> None:
        self.calls.append("decision")

    def degraded(self, *, rule: str, failure_mode: str, reason: str) -> None:
        self.calls.append(f"degraded {failure_mode} {reason}")

    def store_latency(self, *, seconds: float) -> None:
        self.calls.append("store_latency")

    def breaker(self, *, name: str, state: str) -> None:
        self.calls.append(f"breaker {state}")


class NoBreakerHook:
    """A limiter's hooks, but no ``breaker``."""

    def decision(self, *, rule: str, algorithm: str, decision: Decision) -> None: ...

    def degraded(self, *, rule: str, failure_mode: str, reason: str) -> None: ...

    def store_latency(self, *, seconds: float) -> None: ...


LIMITERS: list[Callable[..., Any]] = [
    lambda metrics: Limiter(CountingStore(), metrics=metrics),
    lambda metrics: TwoTier(CountingStore(), metrics=metrics),
    lambda metrics: AsyncLimiter(AsyncMemoryStore(), metrics=metrics),
    lambda metrics: AsyncTwoTier(AsyncMemoryStore(), metrics=metrics),
]
OWNERS = ["Limiter", "TwoTier", "AsyncLimiter", "AsyncTwoTier"]


@pytest.mark.parametrize(("make", "owner"), list(zip(LIMITERS, OWNERS, strict=True)), ids=OWNERS)
@pytest.mark.parametrize(
    ("value", "said"),
    [
        (PrometheusMetrics, "that is a class; give an instance, PrometheusMetrics()"),
        (Metrics, "that is a class; give an instance, Metrics()"),
        (object(), "an object has no decision(), degraded(), store_latency()"),
        ("prometheus", "a str has no decision()"),
    ],
    ids=["PrometheusMetrics", "Metrics", "object()", "str"],
)
def test_a_limiter_refuses_what_is_not_a_metrics_object(
    make: Callable[..., Any], owner: str, value: object, said: str
) -> None:
    """``Limiter(metrics=PrometheusMetrics)`` (the class), ``object()`` or a string: refused
    when built, naming the class built, the value and what to give; before, each was taken
    and every hit charged the store, then raised TypeError or AttributeError."""
    with pytest.raises(ConfigurationError) as refused:
        make(value)
    message = str(refused.value)
    assert message.startswith(f"{owner}: metrics {value!r:.60} must be a Metrics: ")
    assert said in message
    assert "PrometheusMetrics()" in message or isinstance(value, type)


def test_the_two_tier_limiter_asks_for_the_hook_of_the_breaker_it_makes() -> None:
    """TwoTier makes a breaker that reports its transitions to ``metrics``: an object without
    ``breaker()`` is refused, unless the breaker is the caller's own."""
    with pytest.raises(ConfigurationError, match=r"a NoBreakerHook has no breaker\(\); give"):
        TwoTier(CountingStore(), metrics=NoBreakerHook())
    breaker = CircuitBreaker()
    assert TwoTier(CountingStore(), metrics=NoBreakerHook(), breaker=breaker).breaker is breaker
    assert Limiter(CountingStore(), metrics=NoBreakerHook()).hit("k", RATE).allowed


@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda m: CircuitBreaker(metrics=m), "CircuitBreaker: metrics None must be"),
        (
            lambda m: ReconciledBudget(
                "us",
                MemoryRegionStore(),
                {"eu": MemoryRegionStore()},
                {"us": RATE, "eu": RATE},
                sync_interval=1,
                replication_lag=0,
                metrics=m,
            ),
            "ReconciledBudget: metrics None must be",
        ),
    ],
    ids=["CircuitBreaker", "ReconciledBudget"],
)
def test_none_is_refused_where_a_metrics_object_is_required(
    make: Callable[[object], object], said: str
) -> None:
    """A breaker and a reconciled budget take a metrics object (NO_METRICS by default): None,
    a class or object() is refused when built, not at the first transition or sync round."""
    with pytest.raises(ConfigurationError, match=f"{said} a Metrics: leave metrics out for none"):
        make(None)
    with pytest.raises(ConfigurationError, match="that is a class; give an instance"):
        make(PrometheusMetrics)
    with pytest.raises(ConfigurationError, match="must be a Metrics: an object has no "):
        make(object())


def test_a_metrics_class_of_the_callers_own_is_taken_everywhere_and_called() -> None:
    """The same check everywhere: OwnHooks (no Metrics base) is taken by the middleware and a
    FailureReport (which refused any object not made from Metrics) as by a limiter; through a
    TwoTier over a store that goes down it is told of store round trips, decisions, the
    failure mode's answers and the breaker opening."""
    metrics = OwnHooks()
    rules = RuleSet([Rule("per-ip", "5/minute")])
    app = RateLimitMiddleware(ok, limiter=AsyncLimiter(), rules=rules, metrics=metrics)  # type: ignore[arg-type]
    assert app.failure_answer.report.metrics is metrics
    report = FailureReport("open", name="api", clock=ManualClock(), metrics=metrics)  # type: ignore[arg-type]
    assert report.metrics is metrics
    clock = ManualClock()
    store = SwitchableStore(clock=clock)
    tiers = TwoTier(store, metrics=metrics, failure_mode="local", clock=clock)
    assert tiers.metrics is metrics
    assert tiers.hit("k", RATE).allowed
    assert metrics.calls == ["store_latency", "decision"]
    store.down = True
    for _ in range(5):
        tiers.hit("k", RATE)
    assert "degraded local StorageUnavailableError" in metrics.calls
    assert "breaker open" in metrics.calls
