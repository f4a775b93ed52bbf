"""The burst table: each algorithm's worst case, found by an attacker, not written down.

The attacker is greedy: from a rested key it fires at one instant until the
algorithm denies, then waits exactly the ``retry_after`` the denial names and
fires again, for three periods. For every algorithm here admitting earlier never
admits less later, so greedy is the most a caller can get; window algorithms
also depend on where the attack starts, so it starts at several phases of the
window (on an edge, mid-window, and one microsecond before an edge) and the
table keeps the worst. Per algorithm it reports:

- ``burst``: the most admitted within one emission interval ``T = period / limit``
  (what a caller gets back to back);
- ``worst period``: the most admitted in any trailing period ``(t - P, t]``, the
  window the sliding log counts;
- ``state``: the most integers the key's state ever held.

``analytic`` gives the textbook values the measurement must reproduce (a test
holds it to that): fixed window ``2L`` at the boundary; token bucket, leaky
bucket and GCRA ``B`` back to back (GCRA's ``tau / T + 1``) and ``B + L - 1``
in a period, i.e. ``B - 1`` above the steady rate; sliding log nothing above
``L``; sliding window ``L`` back to back, but up to ``2L - 1`` in a trailing
period when the previous window's requests all came at its very end.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate._table import aligned
from ratewarden.simulate.runner import START_US, effective_rate, worst_window

__all__ = [
    "MAX_LIMIT",
    "MAX_LOG_LIMIT",
    "BurstRow",
    "analytic",
    "burst_table",
    "format_bursts",
    "measure",
]


@dataclass(frozen=True, slots=True)
class BurstRow:
    """One algorithm's worst case at one rate."""

    algorithm: str
    rate: str
    limit: int
    burst: int
    worst_period: int
    state_ints: int

    @property
    def over_limit(self) -> int:
        """How many the worst trailing period holds above the limit."""
        return self.worst_period - self.limit


def _size(state: object) -> int:
    """Integers in a state value (a sliding log holds two per entry)."""
    if state is None:
        return 0
    if isinstance(state, tuple):
        return sum(_size(item) for item in state)
    return 1


def _greedy(algorithm: str, rate: Rate, start_us: int) -> tuple[list[tuple[int, int]], int]:
    """Admitted ``(time_us, 1)`` of a greedy attacker, and the largest state seen."""
    module = algorithms.get(algorithm)
    params = module.params(rate)
    end_us = start_us + 3 * rate.period_us
    # More than any algorithm here can admit in three periods from rest.
    ceiling = 4 * rate.limit + 2 * rate.capacity + 8
    state = None
    now = start_us
    admitted: list[tuple[int, int]] = []
    largest = 0
    while now < end_us and len(admitted) < ceiling:
        outcome, new_state, _ttl = module.check(params, state, now, 1)
        if outcome.allowed:
            state = new_state
            largest = max(largest, _size(state))
            admitted.append((now - start_us, 1))
        elif outcome.retry_after_us == algorithms.NEVER:
            break
        else:
            now += outcome.retry_after_us
    return admitted, largest


def _burst(admitted: Sequence[tuple[int, int]], span_us: int) -> int:
    """The most admitted in any half-open span ``[s, s + span)``."""
    worst = 0
    oldest = 0
    for newest, (t, _) in enumerate(admitted):
        while admitted[oldest][0] <= t - span_us:
            oldest += 1
        worst = max(worst, newest - oldest + 1)
    return worst


#: The largest limit or burst the attack takes: it makes every decision one by one.
MAX_LIMIT = 10_000

#: The sliding log's reference implementation copies its log per decision (quadratic).
MAX_LOG_LIMIT = 1_000


def _check_size(algorithm: str, rate: Rate) -> None:
    ceiling = MAX_LOG_LIMIT if algorithm == "sliding_log" else MAX_LIMIT
    if max(rate.limit, rate.capacity) > ceiling:
        raise ConfigurationError(
            f"burst table for {algorithm} at {rate}: limit and burst must be at most "
            f"{ceiling:,} (the attack makes every decision); the closed forms scale with them"
        )


def measure(algorithm: str, rate: Rate) -> BurstRow:
    """Attack ``algorithm`` at ``rate`` from several phases and keep the worst of each measure."""
    rate = effective_rate(algorithm, rate)
    _check_size(algorithms.get(algorithm).NAME, rate)
    period = rate.period_us
    edge = (START_US // period + 1) * period
    span = max(1, period // rate.limit)
    burst = worst = largest = 0
    for start in (edge, edge + period // 2, edge - 1):
        admitted, size = _greedy(algorithm, rate, start)
        burst = max(burst, _burst(admitted, span))
        worst = max(worst, worst_window(admitted, period))
        largest = max(largest, size)
    return BurstRow(algorithm, str(rate), rate.limit, burst, worst, largest)


def analytic(algorithm: str, rate: Rate) -> BurstRow:
    """The textbook worst case (see the module docstring), for rates with ``T >= 2 us``."""
    rate = effective_rate(algorithm, rate)
    limit, capacity = rate.limit, rate.capacity
    values = {
        "fixed_window": (2 * limit, 2 * limit, 2),
        "sliding_log": (limit, limit, 2 * limit),
        "sliding_window": (limit, 2 * limit - 1, 3),
        "token_bucket": (capacity, capacity + limit - 1, 2),
        "gcra": (capacity, capacity + limit - 1, 2),
        "leaky_bucket": (capacity, capacity + limit - 1, 2),
    }
    burst, worst, state = values[algorithms.get(algorithm).NAME]
    return BurstRow(algorithm, str(rate), limit, burst, worst, state)


def burst_table(rate: Rate, names: Sequence[str] | None = None) -> list[BurstRow]:
    """``measure`` for every algorithm (or those named), in a stable order."""
    chosen = names or sorted(algorithms.ALGORITHMS)
    for name in chosen:  # refuse before the first (long) attack, not after
        _check_size(algorithms.get(name).NAME, effective_rate(name, rate))
    return [measure(name, rate) for name in chosen]


def format_bursts(rows: Sequence[BurstRow]) -> str:
    """The rows as an aligned text table, the worst period with its ratio to the limit."""
    header = ("algorithm", "rate", "burst", "worst period", "over limit", "state ints")
    lines = [header]
    lines += [
        (
            row.algorithm,
            row.rate,
            str(row.burst),
            f"{row.worst_period} ({row.worst_period / row.limit:.2f}x)",
            f"{row.over_limit:+d}",
            str(row.state_ints),
        )
        for row in rows
    ]
    return aligned(lines, left=2)
