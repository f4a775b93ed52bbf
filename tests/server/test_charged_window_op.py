"""The charged_window op: its Lua script on a real redis-server and its pure twin agree.

``storage/lua/charged_window.lua`` and ``ratewarden.algorithms.charged_window.run`` take the
same ARGV and reply the same numbers; the memory store runs the twin. The same calls at
the same injected instants give the same replies on both, every rate counting every call.
"""

from __future__ import annotations

import random

import pytest
import redis

from ratewarden.algorithms import charged_window
from ratewarden.rate import Rate
from ratewarden.server.charged_window import NAME, charged_window_op, decision
from ratewarden.storage.memcache import MemcacheStore
from ratewarden.storage.memory import MemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock
from tests._memcached import MemcachedServer
from tests._servers import STORE_TIMEOUT
from tests.server.conftest import ALIGNED

MINUTE = Rate(3, 60)
HOUR = Rate(5, 3600)


@pytest.mark.redis
def test_the_script_and_its_twin_reply_alike(
    redis_client: redis.Redis, memcached: MemcachedServer
) -> None:
    """400 calls of costs 0-4 on two keys, one or two rates, at instants moving by up to
    40 s: the Redis script, the memory store's twin and memcached's (the twin on an item)
    reply the same numbers."""
    clock = ManualClock(ALIGNED)
    stores = (
        MemoryStore(clock=clock),
        RedisStore(redis_client, clock=clock, timeout=STORE_TIMEOUT),
        MemcacheStore(memcached.url, clock=clock, timeout=STORE_TIMEOUT),
    )
    draw = random.Random(7)
    for _ in range(400):
        clock.advance(draw.choice((0, 0, 1, 7, 40)))
        rates = draw.choice(((MINUTE,), (MINUTE, HOUR)))
        op = charged_window_op("rw", draw.choice(("k1", "k{2}")), rates, draw.randrange(5))
        memory, *stored = (list(store.apply(op)) for store in stores)
        assert stored == [memory, memory], op
    stores[2].close()


def test_a_call_past_the_limit_is_counted_and_keeps_the_window_over() -> None:
    """3 a minute: 2, then 2 more (over: counted, 4 of 3), then a check is over with the
    window's end as its retry time; a cost above the limit is never admitted."""
    store = MemoryStore(clock=ManualClock(ALIGNED + 15))

    def ask(cost: int) -> tuple[bool, int, float]:
        reply = store.apply(charged_window_op("rw", "k", (MINUTE,), cost))
        found = decision((MINUTE,), cost, reply)
        return found.allowed, found.remaining, found.retry_after

    assert ask(2) == (True, 1, 0.0)
    assert ask(2) == (False, 0, 45.0)
    assert ask(0) == (False, 0, 45.0)
    assert ask(4)[2] == float("inf")


def test_the_twin_writes_each_rate_until_its_window_ends() -> None:
    """The writes: every rate's (window, count) with the cost added, expiring at its
    window's end; a check (cost 0) writes nothing."""
    now = int(ALIGNED * 1_000_000) + 10_000_000
    op = charged_window_op("rw", "k", (MINUTE, HOUR), 2)
    assert op.script == NAME
    assert op.keys == ("rw:{k}:charged_window:60000000", "rw:{k}:charged_window:3600000000")
    _, writes = charged_window.run(op.args, [None, None], now)
    assert writes == [
        (0, (now // 60_000_000, 2), now + 50_000_000),
        (1, (now // 3_600_000_000, 2), now + 3_590_000_000),
    ]
    assert charged_window.run(charged_window_op("rw", "k", (MINUTE,), 0).args, [None], now)[1] == []
