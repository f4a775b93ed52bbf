"""ReconciledBudget across three real redis-servers, peers reached through latency proxies,
(the tests on ``any_regions``) across three real Redis Clusters, one per region, and (the
tests on ``any_regions_or_memory``) across three regions in this process, each on its
MemoryRegionStore.

The exchange schedule and the windows follow a ManualClock where the algorithm
allows (the first tests); the last test runs in bounded real time with sync
threads. Every run prints the computed bound and the measured overshoot
(``pytest -s``) and asserts overshoot <= bound.
"""

from __future__ import annotations

import threading
import time

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratewarden.clock import SystemClock
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.regions import ReconciledBudget, SyncThread
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, free_port
from tests.faults._proxy import Fault
from tests.regions._traffic import build_fleet
from tests.regions.conftest import Region, all_keys, set_latency

RATES = {
    "us": Rate.parse("30/s", burst=1),
    "eu": Rate.parse("20/s", burst=1),
    "ap": Rate.parse("10/s", burst=1),
}
GLOBAL = Rate.parse("600/minute")
START = 1_700_000_040.0  # a whole minute: the run starts at a window's start
NO_RETRY = Retry(NoBackoff(), 0)  # a refused connection fails at once


def _report(name: str, bound: int, total: int, limit: int, extra: str = "") -> int:
    overshoot = max(0, total - limit)
    print(
        f"\n[regions] {name}: limit {limit}, admitted {total}, "
        f"overshoot {overshoot}, bound {bound}{extra}"
    )
    return overshoot


@pytest.mark.parametrize(("lag", "offered"), [(0.2, ("us", "eu", "ap")), (0.5, ("us", "ap"))])
def test_staggered_rounds_with_lag_stay_within_the_bound(
    any_regions_or_memory: dict[str, Region], lag: float, offered: tuple[str, ...]
) -> None:
    """Rounds staggered across the interval, each applied ``lag`` after its read while
    traffic flows: the window's total admissions exceed the limit by at most the bound,
    and after a final quiet round every region's exported overshoot equals the measured one.
    On a Cluster per region as on one server, and in this process.
    """
    regions = any_regions_or_memory
    set_latency(regions, 0.002)
    clock = ManualClock(START)
    fleet = build_fleet(regions, RATES, sync_interval=1.0, replication_lag=lag, clock=clock)
    budgets = fleet.budgets
    offsets = {"us": 0.0, "eu": 0.33, "ap": 0.66}
    pending: dict[str, tuple[float, object]] = {}
    tick = 0.02
    # Long enough for the offered regions' caps to run the limit out, and 4 s more.
    per_second = sum(RATES[name].limit / RATES[name].period_seconds for name in offered)
    seconds = GLOBAL.limit / per_second + 4
    for step in range(int(seconds / tick)):
        now = step * tick
        for name, budget in budgets.items():
            if name in pending and now >= pending[name][0]:
                budget.apply(pending.pop(name)[1])  # type: ignore[arg-type]
            phase = (now - offsets[name]) % 1.0
            if name not in pending and (phase < tick / 2 or phase > 1.0 - tick / 2):
                pending[name] = (now + lag, budget.fetch())
        for name in offered:
            if budgets[name].hit("tenant-a", GLOBAL).allowed:
                fleet.admitted[name] += 1
        clock.advance(tick)
    for view_name, (_, view) in pending.items():
        budgets[view_name].apply(view)  # type: ignore[arg-type]
    total = sum(fleet.admitted.values())
    overshoot = _report(
        f"manual clock, lag {lag} s, traffic in {offered}",
        fleet.bound,
        total,
        GLOBAL.limit,
        f", per region {fleet.admitted}",
    )
    assert overshoot <= fleet.bound
    assert total >= GLOBAL.limit * 0.9, "the regions should use the budget between them"
    for budget in budgets.values():
        assert budget.sync().complete
    for name in budgets:
        assert fleet.metrics.reports[name][-1] == overshoot


def test_an_idle_regions_share_flows_to_the_busy_one(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """Only us has traffic: after rounds it admits far past its static share (30/60 of 600)."""
    regions = any_regions_or_memory
    clock = ManualClock(START)
    fleet = build_fleet(regions, RATES, sync_interval=1.0, replication_lag=0.1, clock=clock)
    us = fleet.budgets["us"]
    static = us.default_cap(GLOBAL)
    admitted = 0
    for step in range(40 * 50):  # 40 s at 50 offers a second, capped at 30/s
        if step % 50 == 0:
            for budget in fleet.budgets.values():
                budget.sync()
        admitted += us.hit("tenant-b", GLOBAL).allowed
        clock.advance(0.02)
    print(f"\n[regions] idle peers: us static share {static}, admitted {admitted} of 600")
    assert static == 300
    assert admitted > 500
    assert admitted <= GLOBAL.limit + fleet.bound


def test_a_round_with_an_unreachable_peer_does_not_grow_the_budget(
    regions: dict[str, Region],
) -> None:
    """ap's link black-holed: us's round is incomplete, names ap, and its cap stays as it was."""
    clock = ManualClock(START)
    fleet = build_fleet(
        regions, RATES, sync_interval=1.0, replication_lag=5.0, clock=clock, link_timeout=0.2
    )
    us = fleet.budgets["us"]
    for _ in range(10):
        us.hit("tenant-c", GLOBAL)
        clock.advance(0.05)
    regions["ap"].link.set_fault(Fault.BLACKHOLE)
    key = us._hash_key(f"{GLOBAL.limit}:{GLOBAL.period_us}:tenant-c")
    before = regions["us"].local().hget(key, "cap")
    report = us.sync()
    assert (report.complete, report.failed) == (False, ("ap",))
    assert regions["us"].local().hget(key, "cap") == before is None
    regions["ap"].link.set_fault(Fault.NONE)
    assert us.sync().complete


def test_a_view_older_than_the_lag_merges_counts_but_keeps_the_cap(
    any_regions_or_memory: dict[str, Region],
) -> None:
    """Applied after more than replication_lag, a round is stale: the peers' counts are
    merged, but caps are not recomputed (us's next hit is still judged by its static share,
    300 of 600, not by the 299 a fresh round would have left it)."""
    regions = any_regions_or_memory
    clock = ManualClock(START)
    fleet = build_fleet(regions, RATES, sync_interval=1.0, replication_lag=0.1, clock=clock)
    eu, us = fleet.budgets["eu"], fleet.budgets["us"]
    eu.hit("tenant-d", GLOBAL)
    eu.sync()
    view = us.fetch()
    clock.advance(0.2)
    report = us.apply(view)
    assert (report.complete, report.stale, report.keys) == (False, True, 1)
    member = f"{GLOBAL.limit}:{GLOBAL.period_us}:tenant-d"
    window = clock.now_us() // GLOBAL.period_us
    assert us.local.read_counts([member]) == [[(window, "eu", 1)]]
    assert us.hit("tenant-d", GLOBAL).remaining == us.default_cap(GLOBAL) - 1 == 299
    if not regions["us"].in_memory:
        stored = regions["us"].local().hgetall(us._hash_key(member))
        assert stored[b"c:eu"] == b"1" and b"cap" not in stored


def test_windows_follow_redis_time_without_a_clock(any_regions: dict[str, Region]) -> None:
    """With no clock the scripts read each region's Redis TIME (on a Cluster, that of the
    primary of the key's slot); a window resets at its end."""
    regions = any_regions
    fleet = build_fleet(regions, RATES, sync_interval=1.0, replication_lag=0.1, clock=None)
    us = fleet.budgets["us"]
    decision = us.hit("tenant-e", Rate.parse("5/s"))
    assert decision.allowed and 0 < decision.reset_after <= 1.0
    assert decision.limit == 5 and decision.remaining == us.default_cap(Rate.parse("5/s")) - 1


def test_bad_configuration_and_input_are_refused_and_change_nothing(
    any_regions: dict[str, Region],
) -> None:
    """Missing or extra region rates, several global rates, a bad cost: ConfigurationError."""
    regions = any_regions
    local = RegionStore(regions["us"].local())
    peers = {"eu": RegionStore(regions["eu"].remote()), "ap": RegionStore(regions["ap"].remote())}
    with pytest.raises(ConfigurationError, match="give every region"):
        ReconciledBudget(
            "us", local, peers, {"us": RATES["us"]}, sync_interval=1, replication_lag=0
        )
    with pytest.raises(ConfigurationError, match="sync_interval"):
        ReconciledBudget("us", local, peers, RATES, sync_interval=0, replication_lag=0)
    with pytest.raises(ConfigurationError, match="weights"):
        ReconciledBudget(
            "us", local, peers, RATES, sync_interval=1, replication_lag=0, weights={"us": 1}
        )
    budget = ReconciledBudget("us", local, peers, RATES, sync_interval=1, replication_lag=0)
    with pytest.raises(ConfigurationError, match="twice"):
        budget.hit("k", [GLOBAL, Rate.parse("10/s"), GLOBAL])
    with pytest.raises(ConfigurationError, match="cost"):
        budget.hit("k", GLOBAL, cost=-1)
    with pytest.raises(ConfigurationError, match="key"):
        budget.hit("", GLOBAL)
    assert all_keys(regions["us"].local()) == []


@pytest.mark.parametrize(
    ("one_way", "interval", "lag"),
    [(0.010, 0.2, 0.25), (0.035, 0.5, 0.6)],
    ids=["20ms-rtt", "70ms-rtt-transatlantic"],
)
def test_real_time_three_regions_with_sync_threads(
    regions: dict[str, Region], one_way: float, interval: float, lag: float
) -> None:
    """Real time, ``one_way`` seconds each way on every cross-region link, rounds every
    ``interval`` in threads (a round reads two peers, two round trips each): three regions
    offer more than their caps for 2.5 s; the overshoot stays within the bound.
    """
    set_latency(regions, one_way)
    clock = _AlignedClock(period_s=60.0)  # real time, shifted to start at a window's start
    rates = {
        "us": Rate.parse("100/s", burst=1),
        "eu": Rate.parse("60/s", burst=1),
        "ap": Rate.parse("40/s", burst=1),
    }
    limit = Rate.parse("300/minute")
    fleet = build_fleet(regions, rates, sync_interval=interval, replication_lag=lag, clock=clock)
    stop = threading.Event()
    lock = threading.Lock()

    def offer(name: str) -> None:
        budget = fleet.budgets[name]
        while not stop.is_set():
            if budget.hit("tenant-f", limit).allowed:
                with lock:
                    fleet.admitted[name] += 1
            time.sleep(0.003)

    syncs = [SyncThread(b).start() for b in fleet.budgets.values()]
    workers = [threading.Thread(target=offer, args=(n,)) for n in fleet.budgets]
    for worker in workers:
        worker.start()
    time.sleep(2.5)
    stop.set()
    for worker in workers:
        worker.join(5)
    for sync in syncs:
        sync.stop()
    total = sum(fleet.admitted.values())
    rounds = {s.budget.region: s.rounds for s in syncs}
    complete = {s.budget.region: s.complete_rounds for s in syncs}
    overshoot = _report(
        f"real time, {one_way * 2000:.0f} ms RTT links, {interval} s rounds, lag {lag} s",
        fleet.bound,
        total,
        limit.limit,
        f", per region {fleet.admitted}, rounds {rounds}, complete {complete}",
    )
    assert all(r >= 3 for r in rounds.values()), "the sync threads should have run rounds"
    assert all(complete.values()), f"every region should reconcile at least once: {complete}"
    assert overshoot <= fleet.bound


class _AlignedClock(SystemClock):
    """The system clock shifted so that the first reading falls at the start of a window."""

    __slots__ = ("_offset_us",)

    def __init__(self, period_s: float) -> None:
        now = super().now_us()
        period_us = int(period_s * 1_000_000)
        self._offset_us = (now // period_us + 1) * period_us - now

    def now_us(self) -> int:
        return super().now_us() + self._offset_us

    def now(self) -> float:
        return self.now_us() / 1_000_000


def test_with_an_injected_clock_every_key_outlives_real_time(
    any_regions: dict[str, Region],
) -> None:
    """Redis counts TTLs in its own real time, which may run ahead of a test clock: a day at least.

    With Redis TIME the same keys live about two windows (the window hash) or two
    periods (the active set), as before.
    """
    regions = any_regions
    clock = ManualClock(START)
    fleet = build_fleet(regions, RATES, sync_interval=1.0, replication_lag=0.0, clock=clock)
    us = fleet.budgets["us"]
    assert us.hit("tenant-a", GLOBAL).allowed
    us.fetch()
    local = regions["us"].local()
    keys = all_keys(local)
    # The rate cap's GCRA key, the window hash, the active set; and the regions the budget
    # runs with, kept an hour as the round record is (no window's count depends on it).
    config = b"rw:regions:config:us"
    assert len(keys) == 4 and config in keys, keys
    for key in keys:
        if key != config:
            assert local.pttl(key) > 86_400_000 - 10_000, key
    assert 3_600_000 - 10_000 < local.pttl(config) <= 3_600_000


def test_the_deprecated_client_form_builds_the_same_budget_with_a_warning(
    any_regions: dict[str, Region],
) -> None:
    """Redis clients with clock, prefix and timeout (the form before RegionStore) still make a
    working budget for one release: a DeprecationWarning names RegionStore, and the keys it
    writes are those of the old form (the rate cap under <prefix>:region-rate), on a Cluster
    too."""
    regions = any_regions
    clock = ManualClock(START)
    peers = {"eu": regions["eu"].remote(), "ap": regions["ap"].remote()}
    with pytest.warns(DeprecationWarning, match=r"RegionStore\(client, clock="):
        budget = ReconciledBudget(
            "us",
            regions["us"].local(),
            peers,
            RATES,
            sync_interval=1.0,
            replication_lag=1.0,
            clock=clock,
            prefix="old",
            timeout=0.5,
        )
    assert budget.hit("tenant-g", GLOBAL).allowed
    assert budget.sync().complete
    assert sorted(all_keys(regions["us"].local())) == [
        b"old:region-rate:{tenant-g}:gcra:30:1000000:1",
        b"old:regions:active:us",
        b"old:regions:config:us",
        b"old:regions:round:us",
        b"old:{tenant-g}:region:600:60000000",
    ]


def test_a_budget_runs_on_region_stores_only(regions: dict[str, Region]) -> None:
    """Anything but a region store per region, stores with different prefixes, or store
    options given to the budget: a ConfigurationError saying what to pass instead (the memory
    stores' refusals: test_memory_fleets.py)."""
    local = RegionStore(regions["us"].local())
    peers = {"eu": RegionStore(regions["eu"].remote()), "ap": RegionStore(regions["ap"].remote())}
    options = {"sync_interval": 1.0, "replication_lag": 0.0}
    with pytest.raises(ConfigurationError, match="MemoryStore; it must be a RegionStore"):
        ReconciledBudget("us", MemoryStore(), peers, RATES, **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="'ap' is a MemoryStore; it must be a Region"):
        ReconciledBudget("us", local, {**peers, "ap": MemoryStore()}, RATES, **options)  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="every region must use the same"):
        other = RegionStore(regions["eu"].remote(), prefix="other")
        ReconciledBudget("us", local, {**peers, "eu": other}, RATES, **options)
    with pytest.raises(ConfigurationError, match="belong to the stores"):
        ReconciledBudget("us", local, peers, RATES, clock=ManualClock(START), **options)
    with pytest.raises(ConfigurationError, match="a Redis Cluster has only database 0"):
        RegionStore.from_url("redis+cluster://127.0.0.1:7000/1")
    with pytest.raises(ConfigurationError, match=r"needs a redis\.Redis client .* not int"):
        RegionStore(7)  # type: ignore[arg-type]


def test_a_region_store_maps_every_redis_failure_at_its_boundary() -> None:
    """Nothing listening: the budget's script and each exchange call raise
    StorageUnavailableError naming the server, never a redis-py error."""
    port = free_port()
    client = redis.Redis(
        host=HOST, port=port, socket_timeout=0.2, socket_connect_timeout=0.2, retry=NO_RETRY
    )
    store = RegionStore(client, timeout=0.2)
    member = f"{GLOBAL.limit}:{GLOBAL.period_us}:tenant-h"
    calls = {
        "apply": lambda: store.apply(store.budget_hit(member, "us", 1, 10)),
        "apply_all": lambda: store.apply_all([store.budget_hit(member, "us", 1, 10)]),
        "publish_active": lambda: store.publish_active("us", {member: 1}, 0),
        "active": lambda: store.active("us", 0, 10),
        "read_counts": lambda: store.read_counts([member]),
        "publish_demand": lambda: store.publish_demand("us", 1, 1),
        "demand": lambda: store.demand("us", 1),
        "hit": lambda: store.hit("gcra", "tenant-h", RATES["us"]),
    }
    for name, call in calls.items():
        with pytest.raises(StorageUnavailableError, match=f"{HOST}:{port}"):
            call()
            pytest.fail(f"{name} did not raise")


def test_a_region_store_from_a_url_talks_to_that_server(regions: dict[str, Region]) -> None:
    """RegionStore.from_url builds its own client on the URL's server: what it publishes is
    there, under its prefix."""
    url = f"redis://{HOST}:{regions['us'].server.port}/0"
    store = RegionStore.from_url(url, prefix="url", timeout=0.5)
    assert store.ping()
    store.publish_demand("us", 1, 9)
    assert regions["us"].local().hget("url:regions:demand:us", "1") == b"9"
    store.close()
