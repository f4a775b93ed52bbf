"""The negative cache: a key the store denied until T is denied here, with no store call."""

from __future__ import annotations

import math

import pytest

from ratewarden import Decision, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.testing import ManualClock
from ratewarden.tiers import NegativeCache, TwoTier
from tests.tiers._helpers import CountingStore

RATE = Rate.parse("3/minute")  # GCRA: one every 20 s, 3 back to back


def denial(retry_after: float, cost: int = 1) -> Decision:
    return Decision(
        allowed=False, limit=3, remaining=0, reset_after=60.0, retry_after=retry_after, cost=cost
    )


def test_a_denial_holds_until_its_retry_time_and_not_a_microsecond_longer() -> None:
    """remember() at t with retry 2.5 s: found at t + 2.499999 s, gone at t + 2.5 s."""
    cache = NegativeCache()
    assert cache.remember("k", denial(2.5), now_us=1_000)
    assert cache.lookup("k", 1, 1_000 + 2_499_999) is not None
    assert cache.lookup("k", 1, 1_000 + 2_500_000) is None
    assert len(cache) == 0  # the expired entry was dropped when looked up


def test_a_denial_answers_costlier_requests_but_not_cheaper_ones() -> None:
    """Denied at cost 5: cost 5 and 7 are denied too; cost 1 may fit, so it is not answered."""
    cache = NegativeCache()
    cache.remember("k", denial(1.0, cost=5), now_us=0)
    assert cache.lookup("k", 5, 10) is not None
    assert cache.lookup("k", 7, 10) is not None
    assert cache.lookup("k", 1, 10) is None
    assert cache.hits == 2


def test_allowed_decisions_and_hopeless_denials_are_not_cached() -> None:
    """Nothing to deny until: an allowed decision, a zero wait, a cost above capacity (inf)."""
    cache = NegativeCache()
    allowed = Decision(allowed=True, limit=3, remaining=2, reset_after=20.0, retry_after=0.0)
    assert not cache.remember("a", allowed, 0)
    assert not cache.remember("b", denial(0.0), 0)
    assert not cache.remember("c", denial(math.inf), 0)
    assert len(cache) == 0


def test_the_cache_is_bounded_least_recently_used_first() -> None:
    """max_keys=2: a third key pushes out the one used least recently."""
    cache = NegativeCache(max_keys=2)
    cache.remember("a", denial(10.0), 0)
    cache.remember("b", denial(10.0), 0)
    assert cache.lookup("a", 1, 1) is not None  # "a" is now the most recently used
    cache.remember("c", denial(10.0), 0)
    assert cache.lookup("b", 1, 1) is None
    assert cache.lookup("a", 1, 1) is not None and cache.lookup("c", 1, 1) is not None


@pytest.mark.parametrize("bad", [0, -1, True, 1.5, "10"])
def test_bad_size_is_a_configuration_error(bad: object) -> None:
    """The size must be a whole number >= 1."""
    with pytest.raises(ConfigurationError, match="max_keys"):
        NegativeCache(bad)  # type: ignore[arg-type]


def test_two_tier_denies_a_known_denied_key_locally_until_the_store_could_allow() -> None:
    """After the store's first denial no request reaches it until its retry time; then it does."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store)
    assert [tiers.hit("k", RATE).allowed for _ in range(3)] == [True] * 3
    first = tiers.hit("k", RATE)
    assert not first.allowed and first.retry_after == 20.0
    assert store.calls == 4
    clock.advance(5.0)
    again = [tiers.hit("k", RATE) for _ in range(50)]
    assert store.calls == 4, "a negatively cached key reached the store"
    assert {d.allowed for d in again} == {False}
    assert again[0].retry_after == 15.0  # the same instant, counted down exactly
    assert tiers.counts.negative_hits == 50
    clock.advance(15.0)
    assert tiers.hit("k", RATE).allowed
    assert store.calls == 5


def test_a_cheaper_request_still_asks_the_store() -> None:
    """Denied at cost 3 with one unit left; a cost-1 request goes to the store and is allowed."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store)
    assert tiers.hit("k", RATE, cost=2).allowed
    assert not tiers.hit("k", RATE, cost=3).allowed
    assert tiers.hit("k", RATE, cost=1).allowed
    assert store.calls == 3


def test_other_keys_and_other_rates_are_not_affected() -> None:
    """The cache is per key and per rates: the same key under another rate asks the store."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store)
    for _ in range(4):
        tiers.hit("k", RATE)
    other_rate = Rate.parse("10/minute")
    assert tiers.hit("k", other_rate).allowed
    assert tiers.hit("j", RATE).allowed
    assert store.calls == 6


def test_turned_off_every_denied_request_asks_the_store() -> None:
    """negative_cache=None: ten denials are ten store calls."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store, negative_cache=None)
    for _ in range(13):
        tiers.hit("k", RATE)
    assert store.calls == 13
    assert tiers.negative is None


def test_reset_forgets_the_cached_denial() -> None:
    """reset() clears the store and this process's memory of the denial."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    tiers = TwoTier(store)
    for _ in range(4):
        tiers.hit("k", RATE)
    tiers.reset("k", RATE)
    assert tiers.hit("k", RATE).allowed


def test_shadow_mode_reports_a_cached_denial_as_allowed_and_shadowed() -> None:
    """A cached denial under shadow=True is let through and marked, like any other denial."""
    clock = ManualClock()
    tiers = TwoTier(CountingStore(clock=clock))
    for _ in range(4):
        tiers.hit("k", RATE)
    decision = tiers.hit("k", RATE, shadow=True)
    assert decision.allowed and decision.shadowed


def test_max_hold_caps_how_long_a_denial_is_answered_here() -> None:
    """A 40 s denial with max_hold=1.5: found at +1.499999 s, gone at +1.5 s; a 1 s denial
    keeps its own, shorter, retry time."""
    cache = NegativeCache(max_hold=1.5)
    cache.remember("k", denial(40.0), now_us=0)
    assert cache.lookup("k", 1, 1_499_999) is not None
    assert cache.lookup("k", 1, 1_500_000) is None
    cache.remember("short", denial(1.0), now_us=0)
    assert cache.lookup("short", 1, 999_999) is not None
    assert cache.lookup("short", 1, 1_000_000) is None


@pytest.mark.parametrize("bad", [0, -1.0, True, math.inf, math.nan, "1"])
def test_bad_max_hold_is_a_configuration_error(bad: object) -> None:
    """max_hold must be a positive, finite number of seconds, or None."""
    with pytest.raises(ConfigurationError, match="max_hold"):
        NegativeCache(max_hold=bad)  # type: ignore[arg-type]


def _two_processes(negative: int | NegativeCache) -> tuple[ManualClock, CountingStore, TwoTier]:
    """A store and one process's tiers over it (the other process resets through the store)."""
    clock = ManualClock()
    store = CountingStore(clock=clock)
    return clock, store, TwoTier(store, negative_cache=negative)


def test_a_reset_by_another_process_is_heard_within_max_hold() -> None:
    """Process A's key is denied for ~20 s and cached; process B resets the key on the store.
    With max_hold=1 A admits again 1 s later (one store call), not 20 s later; a cached
    denial before then still reports the store's retry time, counting down."""
    clock, store, tiers = _two_processes(NegativeCache(max_hold=1.0))
    for _ in range(3):
        assert tiers.hit("k", RATE).allowed
    denied = tiers.hit("k", RATE)
    assert not denied.allowed and denied.retry_after > 19
    TwoTier(store).reset("k", RATE)  # process B: the store is cleared, A's cache is not
    clock.advance(0.5)
    calls = store.calls
    cached = tiers.hit("k", RATE)
    assert not cached.allowed and store.calls == calls  # still answered here
    assert cached.retry_after == pytest.approx(denied.retry_after - 0.5)
    clock.advance(0.5)
    assert tiers.hit("k", RATE).allowed and store.calls == calls + 1


def test_without_max_hold_a_reset_elsewhere_is_not_heard_until_the_retry_time() -> None:
    """The default keeps a denial until the store's retry time: a reset by another process
    goes unheard here until then (the gap max_hold closes)."""
    clock, store, tiers = _two_processes(10_000)
    for _ in range(4):
        tiers.hit("k", RATE)
    TwoTier(store).reset("k", RATE)
    clock.advance(10.0)
    assert not tiers.hit("k", RATE).allowed
    clock.advance(10.0)
    assert tiers.hit("k", RATE).allowed
