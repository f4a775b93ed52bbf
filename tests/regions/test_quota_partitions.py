"""RegionalQuota's traffic shares stay within the limit when regions cannot all read each other.

A rebalance round moves "shrink first, grow after" (``regions/_taken.py``): every region
publishes the weights it took, and grows only to weights every region has taken. Before,
a region that could not read a peer kept its old shares while the others moved to new ones
(60/30/10 of 1000/minute: 600 + 39 + 922 = 1,561 allowed for as long as the cut lasted).

A cut here is one reader's reads of one peer failing while everyone else still reads that
peer: in this process (``MemoryRegionStore``s) a wrapper that fails the reads, on real
redis-servers a link of the reader's own (a ``FaultProxy``) that resets every connection.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import redis
from hypothesis import given, settings
from hypothesis import strategies as st
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratewarden import Limiter, Rate
from ratewarden.errors import StorageUnavailableError
from ratewarden.regions import DemandExchange, RegionalQuota, split_allowances, traffic_weights
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.memory_regions import MemoryRegionStore
from ratewarden.storage.regions import RegionStore
from ratewarden.testing import ManualClock
from tests._servers import HOST
from tests.faults._proxy import Fault, FaultProxy
from tests.regions._traffic import exchange_store, quota_store
from tests.regions.conftest import REGIONS, Region

SHARES = {"us": 60, "eu": 30, "ap": 10}
GLOBAL = Rate.parse("1000/minute")
#: The limits every interval is checked at (a burst is split the same way as a limit).
LIMITS = (1, 3, 7, 20, 1000, 6000)
#: The reproduction's demand per interval: all alike, then ap's rises to 500.
FIRST = {"us": 50, "eu": 50, "ap": 50}
LATER = {"us": 5, "eu": 5, "ap": 500}


class Cut:
    """A region's store as one reader sees it: every call passes until ``cut``, then its reads
    (and writes) fail as an unreachable Redis's do."""

    def __init__(self, store: MemoryRegionStore) -> None:
        self.store = store
        self.cut = False

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if not callable(method):
            return method

        def call(*args: Any) -> Any:
            if self.cut:
                raise StorageUnavailableError(f"{name}: cut off")
            return method(*args)

        return call


def _memory_fleet(
    links: Mapping[tuple[str, str], Cut] = {},
) -> tuple[dict[str, RegionalQuota], dict[str, DemandExchange], dict[str, MemoryRegionStore]]:
    """Three regions in this process; ``links[reader, peer]`` is how ``reader`` sees ``peer``."""
    clock = ManualClock(1_700_000_000)
    stores = {name: MemoryRegionStore(clock=clock) for name in REGIONS}
    quotas = {n: RegionalQuota(n, Limiter(MemoryStore(clock=clock)), SHARES) for n in REGIONS}
    exchanges = {
        reader: DemandExchange(
            reader, {peer: links.get((reader, peer), stores[peer]) for peer in REGIONS}
        )
        for reader in REGIONS
    }
    return quotas, exchanges, stores


def _run(
    quotas: Mapping[str, RegionalQuota],
    exchanges: Mapping[str, DemandExchange],
    intervals: int,
    cut: Callable[[], None],
) -> list[dict[str, int]]:
    """The reproduction: interval 1 offers FIRST, the others LATER; ``cut`` before the round
    that ends interval 2. Each region's allowance of GLOBAL after every round."""
    seen = []
    for interval in range(1, intervals + 1):
        if interval == 2:
            cut()
        for name, offers in (FIRST if interval == 1 else LATER).items():
            for _ in range(offers):
                quotas[name].hit(f"t{interval}", GLOBAL)
        for name, quota in quotas.items():
            quota.rebalance_round(exchanges[name], interval + 1)
        seen.append({name: quota.allowance(GLOBAL) for name, quota in quotas.items()})
    return seen


def test_a_region_that_cannot_read_a_peer_keeps_the_sum_within_the_limit_in_memory() -> None:
    """From interval 2 us cannot read ap, which eu and ap still read, and ap's demand rises to
    500 an interval: us keeps its 600; eu shrinks to its new 39 at once, and ap stays at its
    100 (the newest weights every region has taken) while us is held. 739 of 1,000 in every
    interval of the cut (1,561 before)."""
    link = Cut(MemoryRegionStore(clock=ManualClock(0)))
    quotas, exchanges, stores = _memory_fleet({("us", "ap"): link})
    link.store = stores["ap"]
    seen = _run(quotas, exchanges, 6, lambda: setattr(link, "cut", True))
    print(f"\n[regions] quotas with us unable to read ap: {seen}")
    assert all(sum(allowances.values()) <= GLOBAL.limit for allowances in seen)
    assert seen[-1] == {"us": 600, "eu": 39, "ap": 100}
    assert quotas["eu"].held == quotas["ap"].held == ("us",)
    assert quotas["eu"].shares == quotas["ap"].shares == {"us": 22, "eu": 22, "ap": 517}
    link.cut = False
    after = _run_more(quotas, exchanges, 7, 3)
    print(f"[regions] healed: {after}")
    assert all(sum(allowances.values()) <= GLOBAL.limit for allowances in after)
    assert after[-1] == split_allowances(GLOBAL.limit, {"us": 22, "eu": 22, "ap": 517})
    assert all(quota.held == () for quota in quotas.values())


def _run_more(
    quotas: Mapping[str, RegionalQuota],
    exchanges: Mapping[str, DemandExchange],
    first: int,
    count: int,
) -> list[dict[str, int]]:
    seen = []
    for interval in range(first, first + count):
        for name, offers in LATER.items():
            for _ in range(offers):
                quotas[name].hit(f"t{interval}", GLOBAL)
        for name, quota in quotas.items():
            quota.rebalance_round(exchanges[name], interval + 1)
        seen.append({name: quota.allowance(GLOBAL) for name, quota in quotas.items()})
    return seen


def test_a_region_that_cannot_read_a_peer_keeps_the_sum_within_the_limit_on_servers(
    regions: dict[str, Region],
) -> None:
    """The same on three real redis-servers: us reads ap through a link of its own, which
    resets every connection from interval 2, while eu and ap read ap through its shared link.
    Every interval stays within the limit, and the cut ends as in memory."""
    clock = ManualClock(1_700_000_000)
    own = FaultProxy(regions["ap"].server.port)  # type: ignore[union-attr]
    options = {"socket_timeout": 0.5, "socket_connect_timeout": 0.5, "retry": Retry(NoBackoff(), 0)}
    try:
        quotas = {
            n: RegionalQuota(n, Limiter(quota_store(r, clock)), SHARES) for n, r in regions.items()
        }
        exchanges = {
            reader: DemandExchange(
                reader,
                {
                    peer: RegionStore(redis.Redis(host=HOST, port=own.port, **options))
                    if (reader, peer) == ("us", "ap")
                    else exchange_store(r, clock, remote=peer != reader)
                    for peer, r in regions.items()
                },
            )
            for reader in regions
        }
        seen = _run(quotas, exchanges, 4, lambda: own.set_fault(Fault.RESET))
    finally:
        own.close()
    print(f"\n[regions] quotas on servers with us unable to read ap: {seen}")
    assert all(sum(allowances.values()) <= GLOBAL.limit for allowances in seen)
    assert seen[-1] == {"us": 600, "eu": 39, "ap": 100}
    assert quotas["eu"].held == ("us",)


class Down:
    """A region's store with its Redis down for every reader (itself included) while ``down``."""

    def __init__(self, store: MemoryRegionStore, down: Callable[[], bool]) -> None:
        self.store, self.down = store, down

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.store, name)
        if not callable(method):
            return method

        def call(*args: Any) -> Any:
            if self.down():
                raise StorageUnavailableError(f"{name}: down")
            return method(*args)

        return call


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.fixed_dictionaries({name: st.integers(0, 300) for name in REGIONS}),
            st.sets(st.sampled_from([(r, p) for r in REGIONS for p in REGIONS if r != p])),
            st.sets(st.sampled_from(REGIONS), max_size=1),
        ),
        min_size=1,
        max_size=12,
    )
)
def test_no_interval_allows_more_than_the_limit_whoever_cannot_read_whom(
    rounds: list[tuple[dict[str, int], set[tuple[str, str]], set[str]]],
) -> None:
    """Random demand, random cuts each round (which reader cannot read which peer, one way or
    both, and sometimes a region's Redis down for everyone, itself included): after every
    round, at every limit checked, the regions' allowances add up to no more than it."""
    cuts: set[tuple[str, str]] = set()
    down: set[str] = set()
    clock = ManualClock(1_700_000_000)
    stores = {name: MemoryRegionStore(clock=clock) for name in REGIONS}
    seen = {n: Down(stores[n], lambda n=n: n in down) for n in REGIONS}  # type: ignore[misc]
    links = {
        (r, p): Cut(seen[p])  # type: ignore[arg-type]
        for r in REGIONS
        for p in REGIONS
        if r != p
    }
    quotas = {n: RegionalQuota(n, Limiter(MemoryStore(clock=clock)), SHARES) for n in REGIONS}
    exchanges = {
        r: DemandExchange(r, {p: links.get((r, p), seen[p]) for p in REGIONS})  # type: ignore[misc]
        for r in REGIONS
    }
    for interval, (demand, cut, failed) in enumerate(rounds, start=1):
        cuts, down = cut, failed
        for pair, link in links.items():
            link.cut = pair in cuts
        for name, count in demand.items():
            quotas[name].hit("tenant", GLOBAL, count) if count else None
        for name, quota in quotas.items():
            try:
                quota.rebalance_round(exchanges[name], interval + 1)
            except StorageUnavailableError:
                assert name in down
        for limit in LIMITS:
            rate = Rate(limit, GLOBAL.period)
            total = sum(quota.allowance(rate) for quota in quotas.values())
            assert total <= limit, (interval, limit, {n: q.shares for n, q in quotas.items()})


@settings(max_examples=30, deadline=None)
@given(st.fixed_dictionaries({name: st.integers(0, 300) for name in REGIONS}))
def test_with_no_cuts_the_shares_reach_the_traffic_weights_a_round_after(
    demand: dict[str, int],
) -> None:
    """Steady demand and every region reading every other: the round after the first
    rebalance every region enforces exactly ``traffic_weights`` of the demand, and none is
    held; the round before, no region was over its new allowance or its old one."""
    quotas, exchanges, _ = _memory_fleet()
    weights = traffic_weights(demand, REGIONS)
    for interval in range(1, 5):
        for name, count in demand.items():
            if count:
                quotas[name].hit("tenant", GLOBAL, count)
        for name, quota in quotas.items():
            quota.rebalance_round(exchanges[name], interval + 1)
        for limit in LIMITS:
            rate = Rate(limit, GLOBAL.period)
            allowances = {name: quota.allowance(rate) for name, quota in quotas.items()}
            new, old = split_allowances(limit, weights), split_allowances(limit, SHARES)
            if interval == 2:  # the first rebalance: shrink to the new weights, grow later
                assert allowances == {n: min(new[n], old[n]) for n in REGIONS}
            if interval >= 3:
                assert allowances == new
        assert all(quota.held == () for quota in quotas.values())


def test_a_restarted_region_takes_up_the_weights_it_published() -> None:
    """eu restarts (a new quota on the static shares) after the shares moved: its next round
    reads the weights it published before and moves on from them with the others, so the
    regions agree again and stay within the limit."""
    quotas, exchanges, stores = _memory_fleet()
    _run(quotas, exchanges, 4, lambda: None)
    quotas["eu"] = RegionalQuota("eu", Limiter(MemoryStore(clock=stores["eu"].clock)), SHARES)
    after = _run_more(quotas, exchanges, 5, 2)
    assert quotas["eu"].shares == quotas["us"].shares == quotas["ap"].shares
    assert after[-1] == {"us": 39, "eu": 39, "ap": 922}
