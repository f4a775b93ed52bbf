"""Run a traffic pattern through one algorithm and rate, in simulated time.

The runner decides every arrival with a ``Limiter`` on the in-process store,
whose ``ManualClock`` jumps from one arrival to the next: no sleeps, and an hour
of traffic takes a fraction of a second. Every arrival is one decision on one
key (the clients of a retry storm share it, as the callers of one API key do),
made by the same decision core as every other in ratewarden. ``decide`` is that
loop, for one rate here and for layered rates in ``layered``.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from ratewarden import algorithms
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import Limiter
from ratewarden.rate import Rate
from ratewarden.simulate._table import aligned
from ratewarden.simulate.patterns import MAX_ARRIVALS, Horizon, Pattern
from ratewarden.testing import ManualClock

__all__ = [
    "MAX_DURATION_S",
    "Run",
    "Summary",
    "check_duration",
    "check_pattern",
    "check_rate",
    "decide",
    "effective_rate",
    "format_table",
    "p99_wait",
    "run",
    "worst_window",
]

#: Simulations start here (the ManualClock default), so window edges fall where they would.
START_US = 1_700_000_000 * 1_000_000

#: The longest simulated run: 30 days.
MAX_DURATION_S = 30 * 86_400

#: Algorithms that count a limit per window and take no separate burst.
WINDOWED = ("fixed_window", "sliding_log", "sliding_window")


def effective_rate(algorithm: str, rate: Rate) -> Rate:
    """``rate`` as ``algorithm`` can take it: window algorithms drop a burst they cannot use."""
    if algorithm in WINDOWED and rate.burst is not None:
        return Rate(rate.limit, rate.period, None)
    return rate


@dataclass(frozen=True, slots=True)
class Summary:
    """One row of the table."""

    pattern: str
    algorithm: str
    rate: str
    offered: int
    admitted: int
    denied: int
    worst_window: int
    limit: int
    p99_wait_s: float | None

    @property
    def worst_ratio(self) -> float:
        """The worst trailing period as a multiple of the limit."""
        return self.worst_window / self.limit


@dataclass(frozen=True, slots=True)
class Run:
    """Every decision of one simulation, in arrival order (times relative to the start)."""

    pattern: str
    algorithm: str
    rate: Rate
    duration_us: int
    times_us: tuple[int, ...]
    costs: tuple[int, ...]
    allowed: tuple[bool, ...]
    delays_us: tuple[int, ...]

    def admitted_times(self) -> list[tuple[int, int]]:
        """``(time_us, cost)`` of the admitted requests."""
        return [
            (t, c) for t, c, ok in zip(self.times_us, self.costs, self.allowed, strict=True) if ok
        ]

    def summary(self) -> Summary:
        """Totals, the worst trailing period and (leaky bucket) the nearest-rank p99 wait."""
        admitted = sum(c for c, ok in zip(self.costs, self.allowed, strict=True) if ok)
        offered = sum(self.costs)
        return Summary(
            pattern=self.pattern,
            algorithm=self.algorithm,
            rate=str(self.rate),
            offered=offered,
            admitted=admitted,
            denied=offered - admitted,
            worst_window=worst_window(self.admitted_times(), self.rate.period_us),
            limit=self.rate.limit,
            p99_wait_s=p99_wait(self.algorithm, self.delays_us, self.allowed),
        )


def p99_wait(algorithm: str, delays_us: Sequence[int], allowed: Sequence[bool]) -> float | None:
    """The nearest-rank p99 of the admitted requests' waits (s), for the leaky bucket only."""
    if algorithm != "leaky_bucket":
        return None
    waits = sorted(d for d, ok in zip(delays_us, allowed, strict=True) if ok)
    if not waits:
        return None
    return waits[min(len(waits) - 1, math.ceil(0.99 * len(waits)) - 1)] / 1_000_000


def worst_window(admitted: Sequence[tuple[int, int]], period_us: int) -> int:
    """The most cost admitted in any trailing period ``(t - P, t]`` (times in order)."""
    worst = held = 0
    oldest = 0
    for t, cost in admitted:
        held += cost
        while admitted[oldest][0] <= t - period_us:
            held -= admitted[oldest][1]
            oldest += 1
        worst = max(worst, held)
    return worst


def run(pattern: Pattern, algorithm: str, rate: Rate, duration_s: float) -> Run:
    """Offer ``pattern`` for ``duration_s`` seconds to ``algorithm`` at ``rate``; one key.

    A ``pattern`` that is not a Pattern (text: ``parse`` reads it) or a ``rate`` that is not
    one Rate is a ``ConfigurationError``, as a bad algorithm or duration is, before anything
    runs."""
    check_pattern(pattern)
    module = algorithms.get(algorithm)
    rate = effective_rate(algorithm, check_rate(rate))
    module.params(rate)  # a rate the algorithm cannot take is refused before anything runs
    duration_us = check_duration(duration_s)
    times: list[int] = []
    costs: list[int] = []
    allowed: list[bool] = []
    delays: list[int] = []
    for t, cost, decision in decide(pattern, module.NAME, (rate,), duration_us):
        times.append(t)
        costs.append(cost)
        allowed.append(decision.allowed)
        delays.append(_us(decision.delay))
    return Run(
        pattern=pattern.describe(),
        algorithm=module.NAME,
        rate=rate,
        duration_us=duration_us,
        times_us=tuple(times),
        costs=tuple(costs),
        allowed=tuple(allowed),
        delays_us=tuple(delays),
    )


def decide(
    pattern: Pattern, algorithm: str, rates: tuple[Rate, ...], duration_us: int
) -> Iterator[tuple[int, int, Decision]]:
    """Every arrival of ``pattern`` decided on one key at ``rates`` (one, or several layers
    decided all or nothing), in time order: ``(time_us since the start, cost, decision)``.

    The pattern's loads are multiples of the first rate. A reactive pattern's next arrival
    is asked for once the decision before it has been taken from the iterator.
    """
    clock = ManualClock(START_US / 1_000_000)
    limiter = Limiter(algorithm=algorithm, clock=clock)
    one = rates[0] if len(rates) == 1 else rates  # one rate takes the store's single-rate path
    horizon = Horizon(START_US, duration_us, rates[0].limit, rates[0].period_us)
    stream = pattern.start(horizon)
    queue = [(t, seq, client, cost) for seq, (t, client, cost) in enumerate(stream.arrivals)]
    heapq.heapify(queue)
    seq = len(queue)
    decided = 0
    while queue:
        if decided >= MAX_ARRIVALS:
            raise ConfigurationError(
                f"{pattern.describe()}: more than {MAX_ARRIVALS:,} decisions in "
                f"{duration_us / 1_000_000:g} s; shorten the duration or slow the retries"
            )
        t, _, client, cost = heapq.heappop(queue)
        clock.advance_us(t - clock.now_us())
        decision = limiter.hit(_KEY, one, cost)
        decided += 1
        yield t - START_US, cost, decision
        following = stream.after((t, client, cost), decision.allowed, _us(decision.retry_after))
        if following is not None:
            heapq.heappush(queue, (following[0], seq, following[1], following[2]))
            seq += 1


#: The one key every arrival is decided on.
_KEY = "simulated"


def _us(seconds: float) -> int:
    """A Decision's seconds as the whole microseconds they came from (``NEVER`` for never)."""
    return algorithms.NEVER if math.isinf(seconds) else round(seconds * 1_000_000)


def check_pattern(pattern: object) -> Pattern:
    """``pattern`` when it is a Pattern (or has a Pattern's ``start`` and ``describe``);
    else ``ConfigurationError``, saying how to make one of text."""
    if isinstance(pattern, Pattern):
        return pattern
    if isinstance(pattern, str):
        raise ConfigurationError(
            f"pattern {pattern!r} is text, not a Pattern; read it with "
            f"ratewarden.simulate.parse({pattern!r})"
        )
    if callable(getattr(pattern, "start", None)) and callable(getattr(pattern, "describe", None)):
        return pattern  # type: ignore[return-value]  # a pattern of the caller's, duck-typed
    raise ConfigurationError(
        f"pattern {pattern!r} must be a Pattern: parse('steady:load=1'), or a class of "
        "ratewarden.simulate.patterns (Steady(load=1.0), ...)"
    )


def check_rate(rate: object) -> Rate:
    """``rate`` when it is one Rate; else ``ConfigurationError`` (text: parse it; several
    rates: ``run_layered``)."""
    if isinstance(rate, Rate):
        return rate
    if isinstance(rate, str):
        raise ConfigurationError(f"rate {rate!r} is not a Rate; use Rate.parse({rate!r})")
    if isinstance(rate, list | tuple):
        raise ConfigurationError(
            f"run takes one Rate, not {len(rate)}; several rates on one key are run_layered's"
        )
    raise ConfigurationError(f"rate {rate!r} must be a Rate (Rate.parse('10/second'))")


def check_duration(duration_s: float) -> int:
    """Whole microseconds of a duration from 1 us to ``MAX_DURATION_S``."""
    if not isinstance(duration_s, int | float) or not math.isfinite(duration_s):
        raise ConfigurationError(f"duration {duration_s!r} must be a number of seconds")
    duration_us = round(duration_s * 1_000_000)
    if not 1 <= duration_us <= MAX_DURATION_S * 1_000_000:
        raise ConfigurationError(
            f"duration {duration_s!r} s must be from 0.000001 s (1 us, the simulation's tick) "
            f"to {MAX_DURATION_S:,} s (30 days)"
        )
    return duration_us


def format_table(rows: Sequence[Summary]) -> str:
    """The summary rows as an aligned text table."""
    header = ("pattern", "algorithm", "rate", "offered", "admitted", "denied",
              "worst period", "p99 wait")  # fmt: skip
    lines = [header]
    for row in rows:
        wait = "-" if row.p99_wait_s is None else f"{row.p99_wait_s:.3f}s"
        lines.append(
            (
                row.pattern,
                row.algorithm,
                row.rate,
                str(row.offered),
                str(row.admitted),
                str(row.denied),
                f"{row.worst_window} ({row.worst_ratio:.2f}x)",
                wait,
            )
        )
    return aligned(lines, left=3)
