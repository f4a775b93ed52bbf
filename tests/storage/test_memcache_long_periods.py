"""MemcacheStore keeps a state whose span reaches past memcached's last TTL (a Unix time of
2**31 - 1, 19 January 2038) as long as the other stores do: memcached takes a later TTL as already
past, so such an item gets no TTL rather than one that drops it at once, or in 2038."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import AsyncMemcacheStore, Limiter, MemoryStore, Rate
from ratewarden.algorithms import ALGORITHMS
from ratewarden.storage._keys import escape
from ratewarden.storage._memcache_items import (
    INJECTED_TTL_FLOOR_S,
    injected_ttl_word,
    item_of,
    ttl_word,
)
from ratewarden.storage.memcache import MemcacheStore
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer

MONTH_S = 30 * 24 * 3600
LAST_UNIX_S = 2**31 - 1
YEAR_US = 365 * 86_400 * 1_000_000
BUCKETS = ("gcra", "leaky_bucket", "token_bucket")
SHORT, TWELVE_YEARS = Rate.parse("3/second"), Rate.parse("1/12y")


def at(unix_s: float) -> Callable[[], float]:
    return lambda: unix_s


def test_ttl_word_is_seconds_up_to_30_days_then_a_unix_time() -> None:
    """Up to 30 days (memcached's own line) the TTL is whole seconds, rounded up, and one more;
    one microsecond past it, a Unix time that far ahead."""
    now = at(1_800_000_000.75)
    assert ttl_word(1, unix_now=now) == 2
    assert ttl_word((MONTH_S - 1) * 1_000_000, unix_now=now) == MONTH_S
    assert ttl_word((MONTH_S - 1) * 1_000_000 + 1, unix_now=now) == 1_800_000_000 + MONTH_S + 1
    assert injected_ttl_word(1) == INJECTED_TTL_FLOOR_S


def test_ttl_word_past_memcached_last_unix_time_is_no_ttl() -> None:
    """A Unix time up to 2**31 - 1 is sent as it is; one second later (which memcached reads as
    already past) the item gets no TTL (0); after 2038 every TTL past 30 days is none, and a
    shorter one is still whole seconds."""
    now = 1_800_000_000
    us = (LAST_UNIX_S - now - 1) * 1_000_000  # a second over: exactly the last Unix time
    assert ttl_word(us, unix_now=at(now)) == LAST_UNIX_S
    assert ttl_word(us + 1, unix_now=at(now)) == 0
    assert ttl_word(us, unix_now=at(now + 1)) == 0
    after = at(LAST_UNIX_S + 100)
    assert ttl_word(MONTH_S * 1_000_000, unix_now=after) == 0
    assert ttl_word(1_000_000, unix_now=after) == 2
    assert ttl_word(1, INJECTED_TTL_FLOOR_S, unix_now=after) == INJECTED_TTL_FLOOR_S


@pytest.mark.parametrize("years", [1, 11, 12, 20, 100])
def test_ttl_word_on_the_system_clock_is_never_one_memcached_drops_early(years: int) -> None:
    """Today, on the system clock: a TTL memcached takes (at most 2**31 - 1), and either none or
    one that outlives the span asked for."""
    word = ttl_word(years * YEAR_US)
    assert 0 <= word <= LAST_UNIX_S
    assert word == 0 or word >= time.time() + years * YEAR_US / 1_000_000


def item_ttl(server: MemcachedServer, key: str) -> bytes:
    """What memcached says is left of the key's item's TTL (``t-1``: none)."""
    name = item_of([f"rw:{{{escape(key)}}}:x"]).wire
    return server.command(b"mg " + name + b" t\r\n")


def test_a_1_per_12_years_limit_denies_its_second_hit(memcached: MemcachedServer) -> None:
    """On the system clock, as the memory store: 1/12y admits one hit and denies the next, and
    its item is kept with no TTL; a 1/day item's TTL is still a day and a second."""
    store = MemcacheStore(memcached.url)
    limiter = Limiter(store)
    assert [limiter.hit("k", TWELVE_YEARS).allowed for _ in range(2)] == [True, False]
    assert item_ttl(memcached, "k") == b"HD t-1\r\n"
    assert limiter.hit("day", Rate.parse("1/day")).allowed
    assert item_ttl(memcached, "day") in (b"HD t86400\r\n", b"HD t86401\r\n")
    store.close()


def test_a_layered_limit_with_a_12_year_layer_admits_one_hit(memcached: MemcachedServer) -> None:
    """[3/second, 1/12y] admits 1 of 4 hits made at once, as on the memory store (the item held
    every layer, so all four were admitted when it was dropped)."""
    store = MemcacheStore(memcached.url)
    limiter = Limiter(store)
    layered = [SHORT, TWELVE_YEARS]
    assert [limiter.hit("k", layered).allowed for _ in range(4)] == [True, False, False, False]
    store.close()


def test_an_item_gets_a_ttl_again_once_its_long_state_is_gone(memcached: MemcachedServer) -> None:
    """An item kept with no TTL for its 12-year layer is given a TTL again by the write that
    drops that layer: only its 3/second state is left, for two seconds at most."""
    store = MemcacheStore(memcached.url)
    assert store.hit("gcra", "k", [SHORT, TWELVE_YEARS]).allowed
    assert item_ttl(memcached, "k") == b"HD t-1\r\n"
    store.reset("gcra", "k", [TWELVE_YEARS])
    assert item_ttl(memcached, "k") in (b"HD t1\r\n", b"HD t2\r\n")
    store.close()


async def test_the_asyncio_store_denies_a_second_hit_at_1_per_12_years(
    memcached: MemcachedServer,
) -> None:
    """AsyncMemcacheStore, on the system clock: the second and third hits at 1/12y are denied."""
    store = AsyncMemcacheStore(memcached.url)
    found = [(await store.hit("gcra", "k", TWELVE_YEARS)).allowed for _ in range(3)]
    assert found == [True, False, False]
    await store.aclose()


def long_scenario(store: Any, clock: ManualClock, algorithm: str) -> list[Any]:
    """Hits whose state must live past 2038 beside short ones on the same keys, with the clock
    moved by hand: what each call returns."""
    found: list[Any] = []
    for rate in (TWELVE_YEARS, Rate.parse("1/100y")):
        found += [store.hit(algorithm, f"long:{rate}", rate) for _ in range(2)]
    found += [store.hit(algorithm, "layered", [SHORT, TWELVE_YEARS]) for _ in range(4)]
    # a long rate's hit on a key must not wipe the short rate's usage kept in the same item
    found += [store.hit(algorithm, "beside", SHORT) for _ in range(3)]
    found.append(store.hit(algorithm, "beside", Rate.parse("1/20y")))
    found.append(store.hit(algorithm, "beside", SHORT))
    clock.advance(2)
    found += [store.hit(algorithm, "layered", [SHORT, TWELVE_YEARS]) for _ in range(2)]
    if algorithm in BUCKETS:  # a burst of 5,000 at 1/day refills over 5,000 days
        burst = Rate.parse("1/day", burst=5000)
        found += [store.hit(algorithm, "burst", burst, cost) for cost in (5000, 1)]
    return found


@pytest.mark.parametrize("algorithm", sorted(ALGORITHMS))
def test_states_past_2038_decide_as_on_the_memory_store(
    memcached: MemcachedServer, algorithm: str
) -> None:
    """Every algorithm, on an injected clock: 1/12y and 1/100y limits, a layered limit with a
    12-year layer, a 20-year hit on a key beside its 3/second usage, a 1/day burst of 5,000:
    the same Decisions, field for field, as the memory store's."""
    mem_clock, mc_clock = ManualClock(), ManualClock()
    expected = long_scenario(MemoryStore(clock=mem_clock), mem_clock, algorithm)
    store = MemcacheStore(memcached.url, clock=mc_clock)
    assert long_scenario(store, mc_clock, algorithm) == expected
    store.close()
    assert sum(d.allowed for d in expected[:4]) == 2  # each long limit admitted one
