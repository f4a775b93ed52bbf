"""HomeRegion under partitions: a gateway cut off from a tenant's home region.

One store decides a tenant, so a partition between a gateway and the tenant's home is a
store outage for that gateway, for that tenant only: the home region and every gateway
that still reaches it keep deciding exactly on the home's Redis, and the cut-off gateway's
own limiter answers by its failure mode (``closed``, ``open`` or ``local``, or raises with
none). Its other tenants, homed elsewhere, are not touched.

Each cut here is one gateway's own link to a home Redis (a ``FaultProxy`` of its own), so
the other gateways still reach the home. ``RESET`` refuses every connection at once;
``BLACKHOLE`` accepts and never answers, so a call waits for the store's timeout.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
import redis
import redis.asyncio as aredis
from redis.asyncio.retry import Retry as AsyncRetry
from redis.backoff import NoBackoff
from redis.retry import Retry

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import AsyncLimiter, CircuitBreaker, Limiter
from ratewarden.rate import Rate
from ratewarden.regions import AsyncHomeRegion, HomeRegion
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from tests._servers import HOST
from tests.faults._proxy import Fault, FaultProxy
from tests.regions.conftest import REGIONS, Region

HOMES = {"acme": "eu", "globex": "ap"}
LIMIT = Rate.parse("10/minute")
#: The store's timeout on a link to another region (above the link's round trip on loopback).
TIMEOUT = 0.25


def _tenant(key: str) -> str:
    return key.split("/", 1)[0]


@pytest.fixture
def own_links(regions: dict[str, Region]) -> Iterator[dict[str, FaultProxy]]:
    """The us gateway's own links to every other region's Redis (the others' stay up)."""
    links = {}
    for name in REGIONS:
        server = regions[name].server
        if name != "us" and server is not None:
            links[name] = FaultProxy(server.port)
    try:
        yield links
    finally:
        for link in links.values():
            link.close()


def _client(port: int) -> redis.Redis:
    """A client that tries a failed call once (the store's failure path decides after it)."""
    return redis.Redis(
        host=HOST,
        port=port,
        socket_timeout=TIMEOUT,
        socket_connect_timeout=TIMEOUT,
        retry=Retry(NoBackoff(), 0),
    )


def _us_gateway(
    regions: dict[str, Region],
    links: dict[str, FaultProxy],
    failure_mode: str | None,
) -> HomeRegion:
    """The us gateway: its own Redis direct, the others through its own links, every
    limiter with ``failure_mode``."""
    limiters = {}
    for name, region in regions.items():
        client = region.local() if name == "us" else _client(links[name].port)
        limiters[name] = Limiter(RedisStore(client, timeout=TIMEOUT), failure_mode=failure_mode)
    return HomeRegion(limiters, HOMES, "us", tenant_of=_tenant)


def _home_gateway(regions: dict[str, Region], home: str) -> HomeRegion:
    """A gateway inside ``home``: its own Redis direct, the others through their links."""
    limiters = {
        name: Limiter(RedisStore(r.local() if name == home else r.remote(), timeout=1.0))
        for name, r in regions.items()
    }
    return HomeRegion(limiters, HOMES, "us", tenant_of=_tenant)


def _count(regions: dict[str, Region], name: str) -> int:
    """How many keys the region's Redis holds (each tenant key is one state key)."""
    return int(regions[name].local().dbsize())


def test_with_no_failure_mode_a_cut_off_check_raises_and_changes_nothing(
    regions: dict[str, Region], own_links: dict[str, FaultProxy]
) -> None:
    """No failure mode: the us gateway's check of an eu tenant raises StorageError, no
    state is written anywhere, and a us tenant's check still goes through."""
    gateway = _us_gateway(regions, own_links, None)
    assert gateway.hit("acme/api", LIMIT).allowed  # the link works first
    own_links["eu"].set_fault(Fault.RESET)
    with pytest.raises(StorageError):
        gateway.hit("acme/api", LIMIT)
    assert _count(regions, "eu") == 1 and _count(regions, "us") == 0
    assert gateway.hit("initech/api", LIMIT).allowed  # homed in us: untouched by the cut
    assert gateway.hit("globex/api", LIMIT).allowed  # homed in ap: its link is up
    assert _count(regions, "us") == 1 and _count(regions, "ap") == 1


@pytest.mark.parametrize(("mode", "allowed"), [("closed", False), ("open", True)])
def test_closed_and_open_answer_a_cut_off_tenant_and_are_marked_degraded(
    regions: dict[str, Region], own_links: dict[str, FaultProxy], mode: str, allowed: bool
) -> None:
    """``closed`` denies and ``open`` admits the cut-off tenant's checks, each decision
    marked ``degraded`` with the mode; the home's count is not touched by them."""
    gateway = _us_gateway(regions, own_links, mode)
    own_links["eu"].set_fault(Fault.RESET)
    decisions = [gateway.hit("acme/api", LIMIT) for _ in range(3)]
    assert [d.allowed for d in decisions] == [allowed] * 3
    assert {d.degraded for d in decisions} == {mode}
    assert _count(regions, "eu") == 0
    healthy = gateway.hit("globex/api", LIMIT)
    assert healthy.allowed and not healthy.degraded


def test_local_admits_at_most_the_limit_on_top_of_the_home_and_heals(
    regions: dict[str, Region], own_links: dict[str, FaultProxy]
) -> None:
    """``local``: while cut off, the us gateway decides acme on its own bucket (the key's
    rates), so acme's fleet admits at most the home's exact 10 plus us's 10, the
    documented N x the rate for the N deciders. The home's gateway counts only its own
    on eu's Redis. Once the link is back, us's checks go home again and are denied,
    since the home's count is full.
    """
    us = _us_gateway(regions, own_links, "local")
    eu = _home_gateway(regions, "eu")
    own_links["eu"].set_fault(Fault.RESET)
    cut = [us.hit("acme/api", LIMIT) for _ in range(15)]
    home = [eu.hit("acme/api", LIMIT) for _ in range(15)]
    assert sum(d.allowed for d in cut) == LIMIT.limit
    assert {d.degraded for d in cut} == {"local"}
    assert sum(d.allowed for d in home) == LIMIT.limit
    assert not any(d.degraded for d in home)
    assert sum(d.allowed for d in cut + home) <= 2 * LIMIT.limit

    own_links["eu"].set_fault(Fault.NONE)
    healed = us.hit("acme/api", LIMIT)
    assert not healed.allowed and not healed.degraded  # the home's count decides again


def test_a_silent_home_costs_one_timeout_then_the_breaker_answers(
    regions: dict[str, Region], own_links: dict[str, FaultProxy]
) -> None:
    """A link that takes bytes and never answers (``BLACKHOLE``): the first check waits for
    the store's timeout, not forever; with a breaker that opens on one failure, the next
    checks of that home are answered at once (``breaker_open``) without waiting again.
    The breaker is per home store, so the other homes are still decided by their Redis.
    """
    breakers = {}
    limiters = {}
    for name, region in regions.items():
        client = region.local() if name == "us" else _client(own_links[name].port)
        breakers[name] = CircuitBreaker(failures=1, cooldown=60.0, name=name)
        store = RedisStore(client, timeout=TIMEOUT)
        limiters[name] = Limiter(store, failure_mode="closed", breaker=breakers[name])
    gateway = HomeRegion(limiters, HOMES, "us", tenant_of=_tenant)
    assert gateway.hit("acme/api", LIMIT).allowed  # connected while the link was up
    own_links["eu"].set_fault(Fault.BLACKHOLE)

    started = time.monotonic()
    first = gateway.hit("acme/api", LIMIT)
    waited = time.monotonic() - started
    assert not first.allowed and first.degraded == "closed"
    assert TIMEOUT * 0.8 <= waited < TIMEOUT + 5.0  # bounded by the timeout, with slack
    assert breakers["eu"].state == "open"

    reasons: list[str] = []
    later = [
        gateway.hit("acme/api", LIMIT, on_failure=lambda e: reasons.append(type(e).__name__))
        for _ in range(5)
    ]
    assert not any(d.allowed for d in later)
    assert reasons == ["CircuitOpenError"] * 5  # the breaker answered: no call reached the link
    assert breakers["ap"].state == "closed"
    assert gateway.hit("globex/api", LIMIT).allowed


async def test_async_twin_answers_a_cut_off_tenant_by_its_failure_mode(
    regions: dict[str, Region], own_links: dict[str, FaultProxy]
) -> None:
    """AsyncHomeRegion: the same cut, ``local`` on the us gateway's limiters: at most the
    limit locally, marked ``local``; a tenant homed in ap still goes to ap's Redis."""
    clients = {}
    for name, region in regions.items():
        if name == "us":
            clients[name] = region.alocal()
        else:
            clients[name] = aredis.Redis(
                host=HOST,
                port=own_links[name].port,
                socket_timeout=TIMEOUT,
                socket_connect_timeout=TIMEOUT,
                retry=AsyncRetry(NoBackoff(), 0),
            )
    limiters = {
        name: AsyncLimiter(AsyncRedisStore(client, timeout=TIMEOUT), failure_mode="local")
        for name, client in clients.items()
    }
    gateway = AsyncHomeRegion(limiters, HOMES, "us", tenant_of=_tenant)
    own_links["eu"].set_fault(Fault.RESET)
    try:
        cut = [await gateway.hit("acme/api", LIMIT) for _ in range(12)]
        healthy = await gateway.hit("globex/api", LIMIT)
    finally:
        for client in clients.values():
            await client.aclose()
    assert sum(d.allowed for d in cut) == LIMIT.limit
    assert {d.degraded for d in cut} == {"local"}
    assert healthy.allowed and not healthy.degraded
    assert _count(regions, "eu") == 0 and _count(regions, "ap") == 1


def test_peek_reset_and_shadow_go_to_the_home_region(regions: dict[str, Region]) -> None:
    """``peek`` reads the home's count, ``reset`` clears it there, ``shadow`` reaches the
    home's limiter (a denial reported as shadowed), all from a gateway in another region."""
    gateway = _home_gateway(regions, "us")
    for _ in range(LIMIT.limit):
        assert gateway.hit("acme/api", LIMIT).allowed
    assert gateway.peek("acme/api", LIMIT).remaining == 0
    shadowed = gateway.hit("acme/api", LIMIT, shadow=True)
    assert shadowed.allowed and shadowed.shadowed
    gateway.reset("acme/api", LIMIT)
    assert _count(regions, "eu") == 0
    assert gateway.peek("acme/api", LIMIT).remaining == LIMIT.limit


def test_a_limiter_of_the_wrong_kind_is_refused(regions: dict[str, Region]) -> None:
    """A store, or an AsyncLimiter given to HomeRegion (and a Limiter to the async twin),
    is refused when the pinning is built, naming the region, not at the first check."""
    store = RedisStore(regions["us"].local())
    with pytest.raises(ConfigurationError, match=r"limiters\['us'\].*takes a Limiter"):
        HomeRegion({"us": store}, {}, "us")  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match=r"limiters\['eu'\]"):
        HomeRegion({"us": Limiter(store), "eu": AsyncLimiter()}, {}, "us")  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="takes an AsyncLimiter"):
        AsyncHomeRegion({"us": Limiter(store)}, {}, "us")  # type: ignore[dict-item]
