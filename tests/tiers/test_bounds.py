"""The over-admission bound of each mode, reached on purpose and never passed (docs/two-tiers.md).

Fixed windows make "admitted in a window" a plain count. Every scenario runs on
one shared MemoryStore standing for the global tier, N TwoTier instances for N
processes, and a ManualClock.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import MemoryStore, Rate
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier
from tests.tiers._helpers import SwitchableStore

#: 2023-11-14 22:13:00 UTC: a whole minute, so fixed windows start on it.
MINUTE = 1_699_999_980


def test_leases_worst_case_is_processes_times_k_minus_one_per_window() -> None:
    """10 processes, k=10, 600/minute: each buys a lease in the last second of a window and
    spends one unit; in the next window they spend the 9 units each still hold on top of the
    600 the window allows: 690 admitted, the bound 600 + 10 * 9 exactly, never more."""
    clock = ManualClock(MINUTE)
    store = MemoryStore(clock=clock)
    rate = Rate.parse("600/minute")
    fleet = [TwoTier(store, "fixed_window", lease=10, lease_ttl=60) for _ in range(10)]
    clock.advance(59.0)
    assert all(tier.hit("k", rate).allowed for tier in fleet)
    clock.advance(1.0)  # a new window: the store's count starts over; the leases do not
    admitted = 0
    for _ in range(100):
        admitted += sum(tier.hit("k", rate).allowed for tier in fleet)
    assert admitted == 600 + 10 * 9


@settings(max_examples=100, deadline=None)
@given(
    k=st.integers(1, 10),
    processes=st.integers(1, 5),
    limit=st.integers(5, 50),
    arrivals=st.lists(st.tuples(st.integers(0, 4), st.integers(0, 20_000_000)), max_size=200),
)
def test_leases_never_pass_the_bound_in_any_window(
    k: int, processes: int, limit: int, arrivals: list[tuple[int, int]]
) -> None:
    """Random arrivals over many fixed windows: admitted per window <= limit + N * (k - 1)."""
    clock = ManualClock(MINUTE)
    store = MemoryStore(clock=clock)
    rate = Rate(limit, 60)
    fleet = [TwoTier(store, "fixed_window", lease=k) for _ in range(processes)]
    per_window: dict[int, int] = {}
    for pick, gap_us in arrivals:
        clock.advance_us(gap_us)
        if fleet[pick % processes].hit("k", rate).allowed:
            window = clock.now_us() // 60_000_000
            per_window[window] = per_window.get(window, 0) + 1
    assert max(per_window.values(), default=0) <= limit + processes * (k - 1)


def test_the_local_policy_admits_up_to_processes_times_the_local_rate() -> None:
    """Store down, 4 processes, local=1.0 of 100/minute: 400 admitted in the minute, 4x the
    limit; local=0.25 (one share per process) brings it back to 100."""
    for fraction, expected in ((1.0, 400), (0.25, 100)):
        clock = ManualClock(MINUTE)
        store = SwitchableStore(clock=clock)
        store.down = True
        rate = Rate.parse("100/minute")
        fleet = [TwoTier(store, local=fraction, failure_mode="local") for _ in range(4)]
        admitted = sum(tier.hit("k", rate).allowed for _ in range(200) for tier in fleet)
        assert admitted == expected


def test_the_local_bucket_and_negative_cache_admit_nothing_the_store_would_not() -> None:
    """Store healthy: with a local bucket and the negative cache on, 5 processes admit exactly
    what the store alone admits (100 per minute) over three minutes of traffic."""
    clock = ManualClock(MINUTE)
    store = MemoryStore(clock=clock)
    rate = Rate.parse("100/minute")
    fleet = [TwoTier(store, "fixed_window", local=0.5) for _ in range(5)]
    admitted = 0
    for _ in range(3 * 60 * 10):  # every process sends one request per 100 ms for 3 minutes
        admitted += sum(tier.hit("k", rate).allowed for tier in fleet)
        clock.advance(0.1)
    assert admitted == 300
