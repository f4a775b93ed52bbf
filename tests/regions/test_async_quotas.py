"""AsyncRegionalQuota and AsyncDemandExchange against their blocking twins: one sequence, both
twins, identical answers.

Equal setups: the same three redis-servers and links (or the same three Redis Clusters,
one per region, for the random sequences), one ManualClock, the blocking twins' keys under
the prefix ``s`` and the asyncio twins' under ``a``.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from typing import Any

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import AsyncLimiter, Limiter
from ratewarden.rate import Rate
from ratewarden.regions import (
    AsyncDemandExchange,
    AsyncRegionalQuota,
    DemandExchange,
    RegionalQuota,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests._servers import STORE_TIMEOUT
from tests.faults._proxy import Fault
from tests.regions.conftest import Region, set_latency

SHARES = {"us": 60, "eu": 30, "ap": 10}
GLOBALS = (
    Rate.parse("100/minute"),
    Rate.parse("7/s", burst=3),
    Rate.parse("1/minute"),
)


class Pair:
    """The blocking and the asyncio quotas and exchanges of every region."""

    def __init__(self, regions: dict[str, Region], clock: ManualClock) -> None:
        self.quotas = {
            name: RegionalQuota(
                name,
                Limiter(RedisStore(r.local(), clock=clock, prefix="s", timeout=STORE_TIMEOUT)),
                SHARES,
            )
            for name, r in regions.items()
        }
        self.aquotas = {
            name: AsyncRegionalQuota(
                name,
                AsyncLimiter(
                    AsyncRedisStore(r.alocal(), clock=clock, prefix="a", timeout=STORE_TIMEOUT)
                ),
                SHARES,
            )
            for name, r in regions.items()
        }
        self.exchanges = {
            name: DemandExchange(
                name,
                {
                    p: RegionStore(r.local() if p == name else r.remote(0.3, retries=0), prefix="s")
                    for p, r in regions.items()
                },
            )
            for name in regions
        }
        self.aexchanges = {
            name: AsyncDemandExchange(
                name,
                {
                    p: AsyncRegionStore(
                        r.alocal() if p == name else r.aremote(0.3, retries=0), prefix="a"
                    )
                    for p, r in regions.items()
                },
            )
            for name in regions
        }

    async def aclose(self) -> None:
        for quota in self.aquotas.values():
            await quota.limiter.store.aclose()
            await quota.limiter.store.client.aclose()
        for exchange in self.aexchanges.values():
            for store in exchange.stores.values():
                await store.aclose()
                await store.client.aclose()


def _steps(seed: int, count: int, *, faults: bool = True) -> Iterator[tuple[Any, ...]]:
    rng = random.Random(seed)
    interval = 1
    cut: set[str] = set()
    for _ in range(count):
        region = rng.choice(("us", "eu", "ap"))
        roll = rng.random()
        if roll < 0.7:
            rates: Any = rng.choice((GLOBALS[0], GLOBALS[1], GLOBALS[2], list(GLOBALS[:2])))
            yield ("hit", region, rng.choice(("t1", "t2")), rates, rng.choice((0, 1, 1, 2, 9)))
        elif roll < 0.85:
            yield ("advance", rng.choice((0.05, 0.3, 1.0, 20.0)))
        elif roll < 0.95:
            interval += 1
            yield ("round", interval)
        elif not faults:
            yield ("advance", 0.01)
        elif region in cut:
            cut.discard(region)
            yield ("heal", region)
        else:
            cut.add(region)
            yield ("fault", region)
    for region in sorted(cut):
        yield ("heal", region)


@pytest.mark.parametrize("seed", [1, 2])
async def test_random_sequences_give_identical_decisions_and_shares(
    any_regions: dict[str, Region], seed: int
) -> None:
    """Hits (one rate or layered, shares of 0 among them), clock steps, rebalance rounds in
    every region with links reset and healed (on servers; a Cluster region's links take no
    faults): every Decision, every round's result and every allowance is the same from both
    twins."""
    regions = any_regions
    faults = all(region.link is not None for region in regions.values())
    clock = ManualClock(1_700_000_000)
    pair = Pair(regions, clock)
    seen: dict[str, int] = {}
    try:
        for number, step in enumerate(_steps(seed, 300, faults=faults)):
            where = f"step {number}: {step}"
            if step[0] == "hit":
                _, region, key, rates, cost = step
                decision = pair.quotas[region].hit(key, rates, cost)
                assert decision == await pair.aquotas[region].hit(key, rates, cost), where
                label = "allowed" if decision.allowed else "denied"
                seen[label] = seen.get(label, 0) + 1
            elif step[0] == "advance":
                clock.advance(step[1])
            elif step[0] == "round":
                for name in regions:
                    weights = pair.quotas[name].rebalance_round(pair.exchanges[name], step[1])
                    aweights = await pair.aquotas[name].rebalance_round(
                        pair.aexchanges[name], step[1]
                    )
                    assert weights == aweights, where
                    label = "kept" if weights is None else "rebalanced"
                    seen[label] = seen.get(label, 0) + 1
            else:
                fault = Fault.RESET if step[0] == "fault" else Fault.NONE
                regions[step[1]].link.set_fault(fault)
            for name in regions:
                assert pair.quotas[name].shares == pair.aquotas[name].shares, where
                for rate in GLOBALS:
                    assert pair.quotas[name].allowance(rate) == pair.aquotas[name].allowance(rate)
    finally:
        await pair.aclose()
    assert set(seen) == {"allowed", "denied", "kept", "rebalanced"}, seen


async def test_the_exchanges_read_the_same_counts_and_name_the_same_missing(
    regions: dict[str, Region],
) -> None:
    """Through 20 ms links, with ap's link reset: both exchanges collect the same counts and
    name ap (and the region that published nothing) as missing; healed, ap is read again."""
    set_latency(regions, 0.010)
    clock = ManualClock(1_700_000_000)
    pair = Pair(regions, clock)
    try:
        for name, demand in (("us", 5), ("ap", 85)):
            pair.exchanges[name].publish(7, demand)
            await pair.aexchanges[name].publish(7, demand)
        assert pair.exchanges["eu"].collect(7) == await pair.aexchanges["eu"].collect(7)
        assert pair.exchanges["eu"].collect(7) == ({"us": 5, "eu": 0, "ap": 85}, ("eu",))
        regions["ap"].link.set_fault(Fault.RESET)
        missing = ({"us": 5, "eu": 0, "ap": 0}, ("eu", "ap"))
        assert pair.exchanges["us"].collect(7) == missing
        assert await pair.aexchanges["us"].collect(7) == missing
        regions["ap"].link.set_fault(Fault.NONE)
        assert await pair.aexchanges["us"].collect(7) == ({"us": 5, "eu": 0, "ap": 85}, ("eu",))
    finally:
        await pair.aclose()


async def test_bad_shares_input_and_twins_are_refused_alike(regions: dict[str, Region]) -> None:
    """Bad shares and bad hits raise the same ConfigurationError from both twins and count no
    demand; each twin refuses the other's limiter and exchange, and nothing reaches Redis."""
    sync_limiter = Limiter(RedisStore(regions["us"].local(), timeout=STORE_TIMEOUT))
    async_limiter = AsyncLimiter(AsyncRedisStore(regions["us"].alocal(), timeout=STORE_TIMEOUT))
    for shares in ({"eu": 1}, {"us": -1}, {"us": 0, "eu": 0}, {}):
        with pytest.raises(ConfigurationError) as sync_error:
            RegionalQuota("us", sync_limiter, shares)
        with pytest.raises(ConfigurationError) as async_error:
            AsyncRegionalQuota("us", async_limiter, shares)
        assert str(sync_error.value) == str(async_error.value)
    quota = RegionalQuota("us", sync_limiter, SHARES)
    aquota = AsyncRegionalQuota("us", async_limiter, SHARES)
    for key, rates, cost in (("", GLOBALS[0], 1), ("k", GLOBALS[0], -1), ("k", [], 1)):
        with pytest.raises(ConfigurationError) as sync_error:
            quota.hit(key, rates, cost)
        with pytest.raises(ConfigurationError) as async_error:
            await aquota.hit(key, rates, cost)
        assert str(sync_error.value) == str(async_error.value)
    assert quota.take_demand() == aquota.take_demand() == 0
    with pytest.raises(ConfigurationError, match="AsyncRegionalQuota needs an AsyncLimiter"):
        AsyncRegionalQuota("us", sync_limiter, SHARES)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="RegionalQuota needs a Limiter"):
        RegionalQuota("us", async_limiter, SHARES)  # type: ignore[arg-type]
    stores = {n: RegionStore(r.local()) for n, r in regions.items()}
    astores = {n: AsyncRegionStore(r.alocal()) for n, r in regions.items()}
    exchange, aexchange = DemandExchange("us", stores), AsyncDemandExchange("us", astores)
    with pytest.raises(ConfigurationError, match="takes an AsyncDemandExchange, not a Demand"):
        await aquota.rebalance_round(exchange, 3)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="takes a DemandExchange, not an AsyncDemand"):
        quota.rebalance_round(aexchange, 3)
    with pytest.raises(ConfigurationError, match="is a RegionStore; it must be an AsyncRegion"):
        AsyncDemandExchange("us", stores)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="must include this region 'us'"):
        AsyncDemandExchange("us", {"eu": astores["eu"]})
    with pytest.raises(ConfigurationError, match="takes one mapping of region -> AsyncRegionStore"):
        AsyncDemandExchange("us", None)  # type: ignore[arg-type]
    for region in regions.values():
        with region.local() as client:
            assert client.dbsize() == 0
    await async_limiter.store.aclose()
    for store in astores.values():
        await store.client.aclose()
