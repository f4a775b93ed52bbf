"""The asyncio twins of a reconciled budget refuse what the blocking ones refuse, with the
same ConfigurationError (the class name aside) and nothing sent to Redis; each twin takes its
own stores only; AsyncRegionStore from a URL, and at its error boundary."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import redis.asyncio as aredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.regions import AsyncReconciledBudget, ReconciledBudget
from ratewarden.storage.regions import AsyncRegionStore, RegionStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, free_port
from tests.regions._twins import aanswer, answer
from tests.regions.conftest import Region

RATES = {
    "us": Rate.parse("5/s", burst=2),
    "eu": Rate.parse("3/s", burst=1),
    "ap": Rate.parse("2/s", burst=1),
}
GLOBALS = (Rate.parse("40/minute"), Rate.parse("12/s"))
NO_RETRY = Retry(NoBackoff(), 0)  # a refused connection fails at once


def _bad_budgets(
    local: Any, peers: dict[str, Any]
) -> Iterator[tuple[tuple[Any, ...], dict[str, Any]]]:
    """Constructor arguments each twin must refuse, each with its reason."""
    options: dict[str, Any] = {"sync_interval": 1.0, "replication_lag": 0.0}
    yield ("us", local, peers, {"us": RATES["us"]}), options
    yield ("us", local, peers, RATES), {**options, "sync_interval": 0}
    yield ("us", local, peers, RATES), {**options, "replication_lag": -1}
    yield ("us", local, peers, RATES), {**options, "weights": {"us": 1}}
    yield ("us", local, peers, RATES), {**options, "weights": {"us": 1, "eu": 0.0, "ap": -1}}
    yield ("us", local, peers, RATES), {**options, "max_keys": 0}
    yield ("us", local, {**peers, "us": local}, RATES), options
    yield ("u:s", local, peers, RATES), options


def _construct(cls: type, args: tuple[Any, ...], options: dict[str, Any]) -> tuple[str, Any]:
    return answer(lambda: cls(*args, **options))


async def test_bad_configuration_and_input_are_refused_alike_and_change_nothing(
    regions: dict[str, Region],
) -> None:
    """Each bad constructor argument, and each bad hit, raises the same ConfigurationError
    from both twins (the class name aside), and nothing reaches Redis."""
    local = RegionStore(regions["us"].local())
    peers = {"eu": RegionStore(regions["eu"].remote()), "ap": RegionStore(regions["ap"].remote())}
    alocal = AsyncRegionStore(regions["us"].alocal())
    apeers = {
        "eu": AsyncRegionStore(regions["eu"].aremote()),
        "ap": AsyncRegionStore(regions["ap"].aremote()),
    }
    refused = 0
    for (args, options), (aargs, aoptions) in zip(
        _bad_budgets(local, peers), _bad_budgets(alocal, apeers), strict=True
    ):
        blocking = _construct(ReconciledBudget, args, options)
        awaited = _construct(AsyncReconciledBudget, aargs, aoptions)
        assert blocking[0] == "ConfigurationError", (args, options, blocking)
        assert blocking == awaited
        refused += 1
    budget = ReconciledBudget("us", local, peers, RATES, sync_interval=1, replication_lag=0)
    abudget = AsyncReconciledBudget("us", alocal, apeers, RATES, sync_interval=1, replication_lag=0)
    for key, rates, cost in (
        ("k", [GLOBALS[0], GLOBALS[0]], 1),
        ("k", [GLOBALS[0], "10/s"], 1),
        ("k", [GLOBALS[0], Rate(10**13, 60)], 1),
        ("k", [], 1),
        ("k", Rate(10**13, 60), 1),
        ("k", Rate(10, 0.0005), 1),
        ("k", GLOBALS[0], -1),
        ("k", GLOBALS[0], 1.5),
        ("", GLOBALS[0], 1),
    ):
        blocking = answer(lambda: budget.hit(key, rates, cost))  # noqa: B023
        awaited = await aanswer(lambda: abudget.hit(key, rates, cost))  # noqa: B023
        assert blocking[0] == "ConfigurationError", (key, rates, cost, blocking)
        assert blocking == awaited
        refused += 1
    for region in regions.values():
        with region.local() as client:
            assert client.dbsize() == 0
    assert refused == 17
    for store in (alocal, *apeers.values()):
        await store.client.aclose()


async def test_each_twin_takes_its_own_stores_only(regions: dict[str, Region]) -> None:
    """Blocking stores for the asyncio twin, asyncio stores for the blocking one, redis clients
    (the blocking twin's deprecated form) or store options for the asyncio twin: refused with a
    ConfigurationError naming what to pass."""
    local = RegionStore(regions["us"].local())
    peers = {"eu": RegionStore(regions["eu"].remote()), "ap": RegionStore(regions["ap"].remote())}
    alocal = AsyncRegionStore(regions["us"].alocal())
    apeers = {
        "eu": AsyncRegionStore(regions["eu"].aremote()),
        "ap": AsyncRegionStore(regions["ap"].aremote()),
    }
    options: dict[str, Any] = {"sync_interval": 1.0, "replication_lag": 0.0}
    with pytest.raises(ConfigurationError, match="is a RegionStore; it must be an AsyncRegion"):
        AsyncReconciledBudget("us", local, apeers, RATES, **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="'eu' is a RegionStore; it must be an Async"):
        AsyncReconciledBudget("us", alocal, {**apeers, "eu": peers["eu"]}, RATES, **options)  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="is an AsyncRegionStore; it must be a Region"):
        ReconciledBudget("us", alocal, peers, RATES, **options)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="is a Redis; it must be an AsyncRegionStore"):
        AsyncReconciledBudget("us", regions["us"].alocal(), apeers, RATES, **options)  # type: ignore[arg-type]
    unknown = r"^AsyncReconciledBudget: unknown keyword 'clock'"
    with pytest.raises(ConfigurationError, match=unknown):
        AsyncReconciledBudget("us", alocal, apeers, RATES, clock=ManualClock(), **options)  # type: ignore[call-arg]
    with pytest.raises(ConfigurationError, match=r"AsyncRegionStore needs a redis\.asyncio\.Redis"):
        AsyncRegionStore(regions["us"].local())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"RegionStore needs a redis\.Redis client"):
        RegionStore(regions["us"].alocal())  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="a Redis Cluster has only database 0"):
        AsyncRegionStore.from_url("redis+cluster://127.0.0.1:7000/1")
    for store in (alocal, *apeers.values()):
        await store.client.aclose()


async def test_an_async_region_store_from_a_url_talks_to_that_server(
    regions: dict[str, Region],
) -> None:
    """AsyncRegionStore.from_url builds its own redis.asyncio client on the URL's server: what
    it publishes is there, under its prefix, and aclose closes the client it made."""
    url = f"redis://127.0.0.1:{regions['us'].server.port}/0"
    store = AsyncRegionStore.from_url(url, prefix="url", timeout=0.5)
    assert await store.ping()
    await store.publish_demand("us", 1, 9)
    assert await store.demand("us", 1) == 9
    with regions["us"].local() as client:
        assert client.hget("url:regions:demand:us", "1") == b"9"
    await store.aclose()


async def test_an_async_region_store_maps_every_redis_failure_at_its_boundary() -> None:
    """Nothing listening: the budget's script and each exchange call raise
    StorageUnavailableError naming the server, never a redis-py error (as RegionStore)."""
    port = free_port()
    client = aredis.Redis(
        host=HOST, port=port, socket_timeout=0.2, socket_connect_timeout=0.2, retry=NO_RETRY
    )
    store = AsyncRegionStore(client, timeout=0.2)
    member = f"{GLOBALS[0].limit}:{GLOBALS[0].period_us}:tenant-h"
    calls: dict[str, Callable[[], Awaitable[Any]]] = {
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
            await call()
            pytest.fail(f"{name} did not raise")
    assert not await store.ping()
    await store.aclose()
    await client.aclose()
