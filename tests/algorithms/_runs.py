"""Random runs of requests, per algorithm: ``(rates, steps)`` for the differential tests.

A step is (microseconds to move the clock, cost), replayed by ``tests._differential``.
Each algorithm's steps keep every key's TTL above what Redis, which expires keys in
real time while the simulated clock may stand still, can drop early; the comments say
how. The property suite runs every algorithm on its own runs; the per-algorithm files
reuse them for their own differential checks.
"""

from __future__ import annotations

from hypothesis import HealthCheck
from hypothesis import strategies as st

from ratewarden import Rate
from tests._differential import Step
from tests.algorithms._limiter import SECOND

MS = 1_000
# Hypothesis may reuse a function-scoped Redis client: each example empties it first.
FIXTURES = [HealthCheck.function_scoped_fixture]

Rates = list[Rate]
Steps = list[Step]

COSTS = st.sampled_from([0, 1, 1, 1, 2, 3, 7, 21])

BUCKET_RATE_LISTS = [
    [Rate.parse("100/minute", burst=20)],
    [Rate.parse("3/second")],
    [Rate.parse("3/second"), Rate.parse("20/minute")],
]
BUCKET_DT = [0, 1, 999, 333_333, 600_000, 1_500_000, 61 * SECOND]


def _steps(dt: st.SearchStrategy[int], costs: st.SearchStrategy[int]) -> st.SearchStrategy[Steps]:
    return st.lists(st.tuples(dt, costs), min_size=1, max_size=40)


# GCRA: a write's TTL is at least one emission interval, so every rate here keeps that
# >= 100 ms. 30000/second is covered by the pure no-drift test.
GCRA_RATES = st.sampled_from(
    [*BUCKET_RATE_LISTS, [Rate.parse("7/second", burst=3), Rate.parse("5/10s", burst=2)]]
)
GCRA_STEPS = _steps(st.sampled_from(BUCKET_DT), COSTS)

# The token and leaky buckets: a step may also move the clock back (-250 ms).
BUCKET_RATES = st.sampled_from(
    [*BUCKET_RATE_LISTS, [Rate.parse("7/minute", burst=3), Rate.parse("5/10s", burst=2)]]
)
BUCKET_STEPS = _steps(st.sampled_from([*BUCKET_DT, -250_000]), COSTS)

WINDOW_COSTS = st.sampled_from([0, 1, 1, 1, 2, 3, 7, 11])
WINDOW_RATES = st.sampled_from(
    [
        [Rate.parse("10/second")],
        [Rate.parse("7/3s")],
        [Rate.parse("10/second"), Rate.parse("100/minute")],
        [Rate.parse("5/2s"), Rate.parse("13/7s"), Rate.parse("40/minute")],
    ]
)

# Fixed window: clock steps are whole multiples of 100 ms, so no key's TTL is under
# 100 ms: a key that lapsed while the simulated clock stood still would part the twins.
# One last probe at any microsecond reads that state and writes nothing read again.
COARSE_DT = st.sampled_from(
    [0, 0, 100 * MS, 300 * MS, 900 * MS, SECOND, 1_700 * MS, 6_300 * MS, 59_900 * MS, 61 * SECOND]
)
PROBE = st.tuples(st.integers(0, 120 * SECOND), WINDOW_COSTS)
FIXED_WINDOW_STEPS = st.tuples(_steps(COARSE_DT, WINDOW_COSTS), PROBE).map(
    lambda run: [*run[0], run[1]]
)

# Sliding window: every write sets a TTL above one period (2P - elapsed), at least a
# second here, so steps may be any number of microseconds.
SLIDING_WINDOW_DT = st.one_of(
    st.sampled_from([0, 1, 999, 333_333, 714_286, 999_999, 15 * SECOND, 59_999_999, 61 * SECOND]),
    st.integers(0, 3 * SECOND),
)
SLIDING_WINDOW_STEPS = _steps(SLIDING_WINDOW_DT, WINDOW_COSTS)

# Sliding log: every write sets a TTL of at least one period (its new entry is the
# newest), a second or more here, so steps may be any number of microseconds.
SLIDING_LOG_DT = st.one_of(
    st.sampled_from([0, 1, 999, 333_333, 999_999, 2_999_999, 59_999_999, 61 * SECOND]),
    st.integers(0, 3 * SECOND),
)
SLIDING_LOG_STEPS = _steps(SLIDING_LOG_DT, WINDOW_COSTS)

#: Each algorithm's random runs, as ``(rates, steps)``.
RUNS: dict[str, st.SearchStrategy[tuple[Rates, Steps]]] = {
    "gcra": st.tuples(GCRA_RATES, GCRA_STEPS),
    "token_bucket": st.tuples(BUCKET_RATES, BUCKET_STEPS),
    "leaky_bucket": st.tuples(BUCKET_RATES, BUCKET_STEPS),
    "fixed_window": st.tuples(WINDOW_RATES, FIXED_WINDOW_STEPS),
    "sliding_window": st.tuples(WINDOW_RATES, SLIDING_WINDOW_STEPS),
    "sliding_log": st.tuples(WINDOW_RATES, SLIDING_LOG_STEPS),
}
