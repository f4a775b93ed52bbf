"""The over-admission bound of each mode, reached on purpose and never passed (docs/two-tiers.md).

Fixed windows make "admitted in a window" a plain count. Every scenario runs on
one shared MemoryStore standing for the global tier, N TwoTier instances for N
processes, and a ManualClock.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Limiter, MemoryStore, Rate
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier
from tests.tiers._helpers import SwitchableStore

#: 2023-11-14 22:13:00 UTC: a whole minute, so fixed windows start on it.
MINUTE = 1_699_999_980
PAGE = Path(__file__).resolve().parents[2] / "docs" / "two-tiers.md"
#: (local, admitted at once, admitted in each minute): 4 processes, store down, 100/minute.
OUTAGE_FIGURES = [(1.0, 400, [796, 400]), (0.25, 100, [196, 100])]
#: (algorithm, the fleet's admissions, the store alone's): 5 processes, 3 minutes, 100/minute.
LOCAL_BUCKET_FIGURES = [("fixed_window", 300, 300), ("gcra", 398, 399)]


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


@pytest.mark.parametrize(("fraction", "at_once", "by_minute"), OUTAGE_FIGURES)
def test_the_local_policy_admits_up_to_processes_times_the_local_rate(
    fraction: float, at_once: int, by_minute: list[int]
) -> None:
    """Store down, 4 processes, local=1.0 of 100/minute: each process's bucket (GCRA, full
    when the outage starts) admits its burst of 100 at once, 400 for the fleet, 4x the limit.
    Sent 10 requests a second each, the fleet admits 796 in the outage's first minute (199 a
    bucket: its burst, and 99 more as it refills at one per 0.6 s), then 400 a minute.
    local=0.25 (one share per process): 100 at once; 196 (25 + 24 a bucket), then 100."""
    rate = Rate.parse("100/minute")

    def fleet() -> tuple[ManualClock, list[TwoTier]]:
        clock = ManualClock(MINUTE)
        store = SwitchableStore(clock=clock)
        store.down = True
        return clock, [TwoTier(store, local=fraction, failure_mode="local") for _ in range(4)]

    clock, tiers = fleet()
    assert sum(tier.hit("k", rate).allowed for _ in range(200) for tier in tiers) == at_once
    clock, tiers = fleet()
    minutes = []
    for _ in by_minute:
        admitted = 0
        for _ in range(60 * 10):  # every process: one request per 100 ms
            admitted += sum(tier.hit("k", rate).allowed for tier in tiers)
            clock.advance(0.1)
        minutes.append(admitted)
    assert minutes == by_minute


@pytest.mark.parametrize(("algorithm", "fleet_admits", "store_admits"), LOCAL_BUCKET_FIGURES)
def test_the_local_bucket_and_negative_cache_admit_nothing_the_store_would_not(
    algorithm: str, fleet_admits: int, store_admits: int
) -> None:
    """Store healthy: with a local bucket (local=0.5) and the negative cache on, 5 processes
    sending 10 requests a second each for three minutes admit no more than the store alone
    admits under the same traffic (plain limiters). In fixed windows that is exactly 100 a
    minute, 300; GCRA (TwoTier's default) admits its burst of 100 at the start, then one
    request every 0.6 s: 399 by the store alone, 398 with the local buckets, which may deny
    what the store would allow, never the reverse (docs/two-tiers.md, Local bucket)."""
    rate = Rate.parse("100/minute")

    def admitted(fleet: Callable[[MemoryStore], list[Limiter]]) -> int:
        clock = ManualClock(MINUTE)
        limiters = fleet(MemoryStore(clock=clock))
        total = 0
        for _ in range(3 * 60 * 10):  # every process: one request per 100 ms for 3 minutes
            total += sum(limiter.hit("k", rate).allowed for limiter in limiters)
            clock.advance(0.1)
        return total

    assert admitted(lambda store: [TwoTier(store, algorithm, local=0.5) for _ in range(5)]) == (
        fleet_admits
    )
    assert admitted(lambda store: [Limiter(store, algorithm) for _ in range(5)]) == store_admits


def _paragraph(start: str) -> str:
    """The paragraph of the page that starts with ``start``, its lines joined by spaces."""
    (found,) = [p for p in PAGE.read_text("utf-8").split("\n\n") if p.startswith(start)]
    return " ".join(found.split())


def test_the_page_quotes_the_local_bucket_s_figures_for_each_algorithm() -> None:
    """docs/two-tiers.md gives the local bucket's figures as measured above, for each
    algorithm: it said 'exactly 300' of TwoTier's default, GCRA, whose fleet admits 398."""
    bucket = _paragraph("**Local bucket.**")
    (fixed, fixed_alone), (gcra, gcra_alone) = [figures[1:] for figures in LOCAL_BUCKET_FIGURES]
    assert fixed == fixed_alone
    assert f"admit {fixed} with `fixed_window`, exactly what the store alone admits" in bucket
    assert f"{gcra} with `gcra` (TwoTier's default), where the store alone admits {gcra_alone}" in (
        bucket
    )


def test_the_page_quotes_an_outage_s_figures_at_once_and_per_minute() -> None:
    """docs/two-tiers.md gives what the local failure mode admits at once and in a minute, as
    measured above: it said 400 and 100 'in the outage's first minute', an instant's figures
    (a minute admits 796 and 196)."""
    outage = _paragraph("**Failure `local`.**")
    (_, whole, (first, then)), (_, share, (share_first, share_then)) = OUTAGE_FIGURES
    assert f"`local=1.0` of 100/minute admit {whole} at once" in outage
    assert f"{first} in the outage's first minute" in outage
    assert f"then {then} a minute;" in outage
    assert f"`local=0.25` they admit {share} at once, {share_first} in the first minute" in outage
    assert f"and {share_then} a minute after" in outage
