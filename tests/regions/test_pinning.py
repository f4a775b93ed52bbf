"""HomeRegion: a tenant's checks go to its home region's Redis, wherever they are made.

Remote checks cross a 20 ms (each way) proxy, so they pay that round trip:
measured and printed, and asserted as a floor (a check made locally could not
take that long, so the floor shows the check really went home).
"""

from __future__ import annotations

import statistics
import time

import pytest
import redis.asyncio

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import AsyncLimiter, Limiter
from ratewarden.rate import Rate
from ratewarden.regions import AsyncHomeRegion, HomeRegion
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import HOST, STORE_TIMEOUT
from tests.regions.conftest import Region, set_latency

HOMES = {"acme": "eu", "globex": "ap"}
LIMIT = Rate.parse("10/minute")


def _gateway(regions: dict[str, Region], here: str) -> HomeRegion:
    """The HomeRegion of a gateway in region ``here``: local Redis direct, others via links."""
    limiters = {
        name: Limiter(RedisStore(r.local() if name == here else r.remote(), timeout=1.0))
        for name, r in regions.items()
    }
    return HomeRegion(limiters, HOMES, "us", tenant_of=lambda key: key.split("/", 1)[0])


def test_checks_from_every_region_share_the_home_count_exactly(
    regions: dict[str, Region],
) -> None:
    """acme (home eu) checked from us, eu and ap gateways: exactly 10 admitted in all,
    and the state lives only in eu's Redis.
    """
    set_latency(regions, 0.002)
    gateways = [_gateway(regions, here) for here in ("us", "eu", "ap")]
    admitted = sum(g.hit("acme/api", LIMIT).allowed for _ in range(6) for g in gateways)
    assert admitted == LIMIT.limit
    assert regions["eu"].local().dbsize() == 1
    assert regions["us"].local().dbsize() == regions["ap"].local().dbsize() == 0


def test_unknown_tenants_go_to_the_default_region(regions: dict[str, Region]) -> None:
    """A tenant with no home is decided by the default region's store."""
    gateway = _gateway(regions, "ap")
    assert gateway.home_of("initech/x") == "us"
    assert gateway.hit("initech/x", LIMIT).allowed
    assert regions["us"].local().dbsize() == 1


def test_remote_checks_pay_the_cross_region_round_trip(regions: dict[str, Region]) -> None:
    """From a us gateway, globex (home ap) waits 2 x 20 ms or more; a us tenant does not."""
    set_latency(regions, 0.020)
    gateway = _gateway(regions, "us")
    remote, local = [], []
    for _ in range(8):
        started = time.perf_counter()
        gateway.hit("globex/api", LIMIT)
        remote.append(time.perf_counter() - started)
        started = time.perf_counter()
        gateway.hit("initech/api", LIMIT)
        local.append(time.perf_counter() - started)
    remote_ms = statistics.median(remote[1:]) * 1000  # the first includes the connect
    local_ms = statistics.median(local[1:]) * 1000
    print(f"\n[regions] pinning: remote check median {remote_ms:.1f} ms, local {local_ms:.2f} ms")
    assert remote_ms >= 40.0
    assert local_ms < remote_ms


def test_homes_outside_the_regions_are_refused(regions: dict[str, Region]) -> None:
    """A home or default naming no configured region raises ConfigurationError."""
    limiters = {"us": Limiter(RedisStore(regions["us"].local(), timeout=STORE_TIMEOUT))}
    with pytest.raises(ConfigurationError, match="acme"):
        HomeRegion(limiters, {"acme": "eu"}, "us")
    with pytest.raises(ConfigurationError, match="default"):
        HomeRegion(limiters, {}, "mars")
    with pytest.raises(ConfigurationError):
        HomeRegion({}, {}, "us")


async def test_async_twin_pins_the_same_way(regions: dict[str, Region]) -> None:
    """AsyncHomeRegion sends acme's checks to eu's Redis and admits exactly the limit."""
    clients = {
        name: redis.asyncio.Redis(host=HOST, port=(r.server.port if name == "us" else r.link.port))
        for name, r in regions.items()
    }
    limiters = {n: AsyncLimiter(AsyncRedisStore(c, timeout=1.0)) for n, c in clients.items()}
    gateway = AsyncHomeRegion(limiters, HOMES, "us", tenant_of=lambda k: k.split("/", 1)[0])
    try:
        admitted = [(await gateway.hit("acme/api", LIMIT)).allowed for _ in range(12)]
    finally:
        for client in clients.values():
            await client.aclose()
    assert sum(admitted) == LIMIT.limit
    assert regions["eu"].local().dbsize() == 1
