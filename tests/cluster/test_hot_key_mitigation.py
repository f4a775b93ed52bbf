"""A hot key at 10x its shard's comfortable rate, on the 3-primary Cluster, with and without
mitigation: admitted traffic within the stated bound, commands spread or reduced.

The load is simulated in ManualClock time, so the figures are exact and the test
never sleeps. ``COMFORTABLE`` is the script-call rate one primary is assumed to
serve comfortably for this key (a stand-in scaled to a test; benchmarks/_cluster.py
measures real ones). The key's limit is three times that: it is allowed more
than one shard should carry, which is exactly when a key must leave one shard.

Rates are per minute, not per second: a state key's TTL is set in Redis's own
(real) time from the simulated refill time, and a key that refills in 0.1 s
would expire whenever this shared machine pauses the test for longer, handing
the key a fresh burst. Per minute, the TTLs are seconds long. The ratios, which
are what the bounds speak of, are the same.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
import redis

from ratewarden import Rate
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import AsyncCellLimiter, CellLimiter, HotKeyDetector, HotKeyLimiter
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import TwoTier
from tests._servers import RedisCluster
from tests.cluster._nodes import evalsha_calls, reset_stats

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

PERIOD_US = 60_000_000
COMFORTABLE = 300  # script calls per period per primary, for this test
OFFERED = 10 * COMFORTABLE  # the hot key's arrival rate, per period
PERIODS = 2
REQUESTS = OFFERED * PERIODS
STEP_US = PERIOD_US // OFFERED
RATE = Rate(3 * COMFORTABLE, 60, burst=90)  # 900/minute, burst 90
#: What the key itself admits from rest over the run: the burst, plus the limit's share of the
#: time from the first request to the last (GCRA is exact, so this is the baseline's count).
ALLOWANCE = RATE.capacity + RATE.limit * (REQUESTS - 1) * STEP_US // PERIOD_US
KEY = "tenant:hot"


def offer(
    clock: ManualClock,
    hit: Callable[[int], Decision],
    requests: int = REQUESTS,
    step_us: int = STEP_US,
) -> int:
    """``requests`` evenly spaced ``step_us`` apart (``OFFERED`` per period); how many allowed."""
    allowed = 0
    for n in range(requests):
        allowed += hit(n).allowed
        clock.advance_us(step_us)
    return allowed


def store_on(cluster_client: redis.RedisCluster) -> tuple[RedisStore, ManualClock]:
    clock = ManualClock()
    return RedisStore(cluster_client, clock=clock, timeout=1.0), clock


def test_without_mitigation_every_command_lands_on_one_primary(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """The baseline: 6,000 decisions, all on the key's primary; it admits the allowance."""
    store, clock = store_on(cluster_client)
    reset_stats(redis_cluster)
    allowed = offer(clock, lambda n: store.hit("gcra", KEY, RATE))
    counts = sorted(evalsha_calls(redis_cluster).values())
    print(f"\nno mitigation: admitted {allowed} (allowance {ALLOWANCE}), evalsha {counts}")
    assert counts == [0, 0, REQUESTS]
    assert allowed == ALLOWANCE


def test_cells_keep_admissions_within_the_allowance_and_use_three_primaries(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """Three cells: never more than the key's allowance (shares add up exactly), at most the
    fragmentation bound (N - 2) * ceil(C / N) + N fewer, each primary runs at least a quarter
    of the key's commands, and none runs a third of the unmitigated primary's."""
    store, clock = store_on(cluster_client)
    cells = CellLimiter(store, 3)
    reset_stats(redis_cluster)
    allowed = offer(clock, lambda n: cells.hit(KEY, RATE))
    counts = evalsha_calls(redis_cluster)
    total = sum(counts.values())
    print(
        f"\ncells=3: admitted {allowed} (allowance {ALLOWANCE}), evalsha {sorted(counts.values())}"
    )
    assert allowed <= ALLOWANCE
    assert allowed >= ALLOWANCE - ((3 - 2) * 30 + 3)
    assert len([c for c in counts.values() if c >= total / 4]) == 3
    # Double denials are answered locally until a cell can have a unit: each primary runs
    # less than a third of what the one primary ran without mitigation.
    assert max(counts.values()) < REQUESTS / 3


def test_leases_keep_admissions_within_processes_times_k_minus_one(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """Three processes (three TwoTier, one store) with leases of k = 30 at 10x: admitted within
    the allowance +- 3 x 29. Leases do not spread the key: its one primary runs every command,
    and far over the limit they save few (a lease cannot be bought; the negative cache holds a
    denial for one emission interval only)."""
    store, clock = store_on(cluster_client)
    k, processes = 30, 3
    tiers = [TwoTier(store, lease=k) for _ in range(processes)]
    reset_stats(redis_cluster)
    allowed = offer(clock, lambda n: tiers[n % processes].hit(KEY, RATE))
    counts = sorted(evalsha_calls(redis_cluster).values())
    bound = ALLOWANCE + processes * (k - 1)
    print(
        f"\nleases k={k} x {processes} at 10x: admitted {allowed} (bound {bound}), evalsha {counts}"
    )
    assert ALLOWANCE - processes * (k - 1) <= allowed <= bound
    assert counts[:2] == [0, 0]


def test_leases_under_the_limit_cut_the_key_s_commands_by_about_k(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """At 800/minute against 900/minute, three processes with k = 30 send about 1/30 of the
    requests to the store (at most 2/30 here) and admit them all."""
    store, clock = store_on(cluster_client)
    k, processes, requests = 30, 3, 800
    tiers = [TwoTier(store, lease=k) for _ in range(processes)]
    reset_stats(redis_cluster)
    allowed = offer(clock, lambda n: tiers[n % processes].hit(KEY, RATE), requests, 75_000)
    calls = sum(evalsha_calls(redis_cluster).values())
    print(f"\nleases k={k} x {processes} under the limit: {calls} evalsha for {requests} requests")
    assert allowed == requests
    assert calls <= 2 * requests / k


def test_a_detected_key_moves_to_cells_without_a_fresh_allowance(
    redis_cluster: RedisCluster, cluster_client: redis.RedisCluster
) -> None:
    """A key turns hot after 20 hits on its own state: the cells are charged those 20 units, so
    in frozen time the key admits at most its capacity of 60 in all, not 60 more."""
    store, clock = store_on(cluster_client)
    detector = HotKeyDetector(20, interval=1.0, clock=clock)
    limiter = HotKeyLimiter(store, CellLimiter(store, 3), detector=detector)
    rate = Rate(60, 60)
    reset_stats(redis_cluster)
    allowed = sum(limiter.hit(KEY, rate).allowed for _ in range(200))
    print(f"\ndetected, then cells: admitted {allowed} of capacity 60")
    assert limiter.is_hot(KEY)
    assert 60 - (1 * 20 + 3) <= allowed <= 60
    assert len([c for c in evalsha_calls(redis_cluster).values() if c > 0]) == 3


def test_a_key_that_cools_returns_to_its_own_state_with_the_cells_usage(
    cluster_client: redis.RedisCluster,
) -> None:
    """After its hold runs out the key is decided on its own state again, which was charged what
    the cells used: it admits only what refilled (4 units in 4 s at 1/s), not a new capacity."""
    store, clock = store_on(cluster_client)
    detector = HotKeyDetector(20, interval=1.0, clock=clock)
    limiter = HotKeyLimiter(store, CellLimiter(store, 3), detector=detector, hold=2.0)
    rate = Rate(60, 60)
    while limiter.hit(KEY, rate).allowed:
        pass
    clock.advance(4.0)  # the detector forgets the burst; the hold (2 s) has run out
    assert limiter.hit("other", rate).allowed  # any call returns expired keys to the store
    assert not limiter.is_hot(KEY)
    again = sum(limiter.hit(KEY, rate).allowed for _ in range(30))
    assert again <= 4


def test_configured_hot_keys_use_leases_and_other_keys_the_store(
    cluster_client: redis.RedisCluster,
) -> None:
    """``hot_keys`` always go through the mitigation (here leases); other keys hit the store."""
    store, _ = store_on(cluster_client)
    tier = TwoTier(store, lease=10)
    limiter = HotKeyLimiter(store, tier, hot_keys=[KEY])
    for _ in range(25):
        limiter.hit(KEY, RATE)
        limiter.hit("cold", RATE)
    assert tier.counts.as_dict()["store_calls"] == 3  # 25 requests, leases of 10
    assert store.hit("gcra", "cold", RATE, 0).remaining == RATE.capacity - 25


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (TwoTier, "needs leases"),
        (lambda s: CellLimiter(s, 3, "token_bucket"), "one algorithm"),
        (lambda s: CellLimiter(MemoryStore(), 3), "same store"),
        (lambda s: "cells", "CellLimiter or a TwoTier"),
    ],
)
def test_bad_mitigations_are_refused(
    cluster_client: redis.RedisCluster, build: Callable[[RedisStore], object], message: str
) -> None:
    """A mitigation that would not help, or would keep other state, raises ConfigurationError."""
    store, _ = store_on(cluster_client)
    with pytest.raises(ConfigurationError, match=message):
        HotKeyLimiter(store, build(store))  # type: ignore[arg-type]


def test_hot_keys_given_as_one_string_are_refused(cluster_client: redis.RedisCluster) -> None:
    """``hot_keys="tenant:big"`` would be read as its characters and leave the key itself
    unmitigated: it is refused, and a list of that key is taken."""
    store, _ = store_on(cluster_client)
    with pytest.raises(ConfigurationError, match="hot_keys='tenant:big': pass a set of keys"):
        HotKeyLimiter(store, CellLimiter(store, 3), hot_keys="tenant:big")
    assert HotKeyLimiter(store, CellLimiter(store, 3), hot_keys=["tenant:big"]).hot_keys == {
        "tenant:big"
    }


@pytest.mark.parametrize("given", [None, 5])
def test_hot_keys_that_are_not_keys_are_refused(
    cluster_client: redis.RedisCluster, given: object
) -> None:
    """``hot_keys=None`` or a number is a ConfigurationError naming hot_keys, not a bare
    TypeError from iterating it."""
    store, _ = store_on(cluster_client)
    with pytest.raises(ConfigurationError, match=f"hot_keys={given!r} must be a set of keys"):
        HotKeyLimiter(store, CellLimiter(store, 3), hot_keys=given)  # type: ignore[arg-type]


@pytest.mark.parametrize("cells", [CellLimiter, AsyncCellLimiter])
def test_cells_without_a_store_are_refused(cells: type) -> None:
    """A limiter's ``None`` store is an in-process MemoryStore: cells over it would split one
    process's traffic, not a hot key's across the fleet. Refused, naming the fix."""
    with pytest.raises(ConfigurationError, match="needs the store the fleet shares"):
        cells(None)


def test_each_rate_set_of_a_detected_key_carries_its_own_usage(
    cluster_client: redis.RedisCluster,
) -> None:
    """One key under two rules (two rate sets, two states): each moves to cells with its own
    usage, so neither gets a fresh capacity in frozen time."""
    store, clock = store_on(cluster_client)
    detector = HotKeyDetector(20, interval=1.0, clock=clock)
    limiter = HotKeyLimiter(store, CellLimiter(store, 3), detector=detector)
    per_minute, per_hour = Rate(60, 60), Rate(90, 3600)
    admitted = {per_minute: 0, per_hour: 0}
    for n in range(400):
        rate = per_minute if n % 2 else per_hour
        admitted[rate] += limiter.hit(KEY, rate).allowed
    assert 60 - 23 <= admitted[per_minute] <= 60
    assert 90 - 33 <= admitted[per_hour] <= 90


def test_a_key_pushed_out_by_max_hot_returns_with_its_usage(
    cluster_client: redis.RedisCluster,
) -> None:
    """With room for one detected key, a second hot key pushes the first back to its own
    state, charged with what its cells used; moved in and out again, it never passes its
    capacity in frozen time."""
    store, clock = store_on(cluster_client)
    detector = HotKeyDetector(5, interval=1.0, clock=clock)
    limiter = HotKeyLimiter(store, CellLimiter(store, 3), detector=detector, max_hot=1)
    rate = Rate(30, 60)
    first = sum(limiter.hit("first", rate).allowed for _ in range(50))
    for _ in range(10):
        limiter.hit("second", rate)
    assert not limiter.is_hot("first") and limiter.is_hot("second")
    again = sum(limiter.hit("first", rate).allowed for _ in range(5))  # moved back in, too
    assert first + again <= 30
