"""Leases over the memory store: k units bought per store call, spent here, never more than charged.

The same invariants against one real redis-server and a 3-primary Cluster are in
test_leases_redis.py.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import Rate
from ratewarden.errors import ConfigurationError
from ratewarden.testing import ManualClock
from ratewarden.tiers import LeaseBook, TwoTier
from tests.tiers._helpers import CountingStore

RATE = Rate.parse("600/minute")


def test_a_lease_of_ten_divides_store_calls_by_ten() -> None:
    """600/minute with k=10: 600 requests admitted with 60 store calls, the 601st denied."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, lease=10)
    allowed = sum(tiers.hit("k", RATE).allowed for _ in range(600))
    assert allowed == 600
    assert store.calls == 60 and tiers.counts.lease_hits == 540
    assert not tiers.hit("k", RATE).allowed


def test_a_lease_served_decision_reports_the_room_this_process_sees() -> None:
    """remaining = the store's remaining when the lease was bought + the units still held."""
    clock = ManualClock()
    tiers = TwoTier(CountingStore(clock=clock), lease=10)
    first = tiers.hit("k", RATE)  # buys 10: store remaining 590, 9 held
    assert first.remaining == 599
    clock.advance(0.5)
    second = tiers.hit("k", RATE)
    assert second.remaining == 598 and second.allowed and second.retry_after == 0.0
    assert second.reset_after == pytest.approx(first.reset_after - 0.5)


def test_near_the_limit_a_partial_lease_takes_what_is_left() -> None:
    """12/minute with k=5: leases of 5, 5, then 2 (one extra call), so all 12 are admitted."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, lease=5)
    rate = Rate.parse("12/minute")
    assert sum(tiers.hit("k", rate).allowed for _ in range(12)) == 12
    assert store.charged == 12
    assert store.calls == 4


def test_a_denied_lease_reports_the_exact_wait_of_the_request() -> None:
    """Out of units: the retry time is that of the shortfall (one unit), not of a whole lease."""
    clock = ManualClock()
    tiers = TwoTier(CountingStore(clock=clock), lease=5)
    rate = Rate.parse("10/minute")
    for _ in range(10):
        tiers.hit("k", rate)
    denied = tiers.hit("k", rate)
    assert not denied.allowed and denied.retry_after == 6.0 and denied.cost == 1


def test_a_request_costlier_than_a_lease_buys_its_own_cost() -> None:
    """cost 25 with k=10: one store call of 25, nothing left over."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, lease=10)
    assert tiers.hit("k", RATE, cost=25).allowed
    assert store.charged == 25
    assert tiers.leases is not None and tiers.leases.outstanding(clock.now_us()) == 0


def test_unused_units_expire_with_the_window() -> None:
    """A balance lives one period by default; then its units are wasted and a new lease bought."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, lease=10)
    tiers.hit("k", RATE)
    clock.advance(59.999999)
    tiers.hit("k", RATE)
    assert store.calls == 1
    clock.advance(0.000001)
    tiers.hit("k", RATE)
    assert store.calls == 2
    assert tiers.leases is not None and tiers.leases.wasted == 8


def test_lease_ttl_shortens_the_life_of_a_balance() -> None:
    """lease_ttl=1: a balance unspent for a second is dropped."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, lease=10, lease_ttl=1.0)
    tiers.hit("k", RATE)
    clock.advance(1.0)
    tiers.hit("k", RATE)
    assert store.calls == 2


def test_a_balance_is_capped_at_k_minus_one() -> None:
    """Two concurrent buyers of one key each add k; what is above k - 1 is dropped, not kept."""
    from ratewarden.decision import Decision

    book = LeaseBook(10)
    grant = Decision(
        allowed=True, limit=600, remaining=590, reset_after=1.0, retry_after=0.0, cost=10
    )
    assert book.credit("k", grant, 1, 0, 1_000_000).units == 9
    assert book.credit("k", grant, 1, 0, 1_000_000).units == 9
    assert book.wasted == 9


@pytest.mark.parametrize(
    ("bad", "what"), [(0, "lease size"), (True, "lease size"), (2.5, "lease size")]
)
def test_bad_lease_settings_are_configuration_errors(bad: object, what: str) -> None:
    """The lease size is a whole number of units >= 1."""
    with pytest.raises(ConfigurationError, match=what):
        TwoTier(CountingStore(), lease=bad)  # type: ignore[arg-type]


@pytest.mark.parametrize("bad", [0, -1, float("inf"), "1s", True])
def test_bad_lease_ttl_is_a_configuration_error(bad: object) -> None:
    """lease_ttl is a positive, finite number of seconds."""
    with pytest.raises(ConfigurationError, match="lease_ttl"):
        TwoTier(CountingStore(), lease=5, lease_ttl=bad)  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(
    limit=st.integers(1, 60),
    k=st.integers(1, 12),
    processes=st.integers(1, 6),
    order=st.lists(st.integers(0, 5), max_size=150),
    costs=st.lists(st.integers(1, 4), min_size=1, max_size=8),
)
def test_n_processes_with_leases_never_admit_more_than_the_limit(
    limit: int, k: int, processes: int, order: list[int], costs: list[int]
) -> None:
    """Any interleaving of N limiters with leases of k over one store, in one window:
    admitted units never exceed the limit, every admitted unit was charged first, and
    once every process has been asked until denied, the whole limit was admitted."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    fleet = [TwoTier(store, lease=k) for _ in range(processes)]
    rate = Rate(limit, 3600)
    admitted = 0
    for step, pick in enumerate(order):
        cost = costs[step % len(costs)]
        if fleet[pick % processes].hit("key", rate, cost).allowed:
            admitted += cost
        assert admitted <= store.charged <= limit
    # Drain with cost 1 until every process is refused: nothing is left anywhere.
    for tier in fleet:
        while tier.hit("key", rate).allowed:
            admitted += 1
            assert admitted <= limit
    held = sum(t.leases.outstanding(clock.now_us()) for t in fleet if t.leases is not None)
    assert held == 0
    assert admitted == store.charged == limit


def test_leases_on_layered_rates_respect_every_layer() -> None:
    """A lease is charged to every layer at once. 3 processes with k=4 on (10/second burst 3,
    25/hour): 3 admitted at one instant (the burst; a whole lease of 4 never fits, so 3 are
    bought); over the next hour, one request per second each, never more charged than the hourly
    layer allows (25 + one per 144 s) and all of it in the end, every charged unit admitted,
    held, or counted wasted."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    rates = (Rate.parse("10/second", burst=3), Rate.parse("25/hour"))
    fleet = [TwoTier(store, lease=4) for _ in range(3)]
    admitted = sum(t.hit("k", rates).allowed for _ in range(5) for t in fleet)
    assert admitted == 3
    for second in range(1, 3601):
        clock.advance(1.0)
        admitted += sum(t.hit("k", rates).allowed for t in fleet)
        assert store.charged <= 25 + second // 144
    now = clock.now_us()
    books = [t.leases for t in fleet if t.leases is not None]
    held = sum(book.outstanding(now) for book in books)
    wasted = sum(book.wasted for book in books)
    assert admitted + held + wasted == store.charged
    # The hourly layer's whole allowance (25 at once, then one per 144 s) was bought: a partial
    # lease near the limit buys what every layer has left, not what the binding layer reports.
    assert store.charged == 25 + 3600 // 144


def test_a_local_bucket_in_front_of_leases_stops_requests_before_they_spend() -> None:
    """local=0.5 of 10/minute with k=5: one lease bought, five admitted, the sixth stopped by the
    bucket without touching the lease or the store."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, local=0.5, lease=5)
    rate = Rate.parse("10/minute")
    assert [tiers.hit("k", rate).allowed for _ in range(6)] == [True] * 5 + [False]
    assert store.calls == 1 and store.charged == 5
    assert tiers.counts.local_denials == 1
