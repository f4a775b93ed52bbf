"""AsyncRedisStore: the same decisions as RedisStore, with many in flight on one connection."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Callable

import pytest
import redis.asyncio as aredis

from ratewarden import AsyncLimiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.storage._plan import build
from ratewarden.storage.redis import DEFAULT_TIMEOUT, AsyncRedisStore
from ratewarden.testing import ManualClock
from tests._servers import HOST, STORE_TIMEOUT, RedisServer
from tests.storage.conftest import AsyncClient

pytestmark = pytest.mark.redis

WORKED = Rate.parse("100/minute", burst=20)


async def flush_scripts(client: AsyncClient) -> None:
    if isinstance(client, aredis.RedisCluster):
        for node in client.get_primaries():
            await client.execute_command("SCRIPT", "FLUSH", target_nodes=node)
    else:
        await client.script_flush()


async def test_worked_gcra_example_with_an_injected_clock(async_client: AsyncClient) -> None:
    """100/minute burst 20: 20 pass, the 21st waits exactly 0.6 s, then one more passes."""
    clock = ManualClock()
    store = AsyncRedisStore(async_client, clock=clock, timeout=STORE_TIMEOUT)
    limiter = AsyncLimiter(store)
    decisions = [await limiter.hit("user:1", WORKED) for _ in range(21)]
    assert [d.allowed for d in decisions] == [True] * 20 + [False]
    assert decisions[20].retry_after == 0.6
    clock.advance(0.6)
    assert (await limiter.hit("user:1", WORKED)).allowed
    assert not (await limiter.hit("user:1", WORKED)).allowed
    await store.aclose()


async def test_worked_example_on_redis_time(async_client: AsyncClient) -> None:
    """On Redis TIME, 20 concurrent hits pass and the 21st is denied."""
    store = AsyncRedisStore(async_client, timeout=STORE_TIMEOUT)
    first = await asyncio.gather(*(store.hit("gcra", "user:1", WORKED) for _ in range(20)))
    assert all(d.allowed for d in first)
    assert not (await store.hit("gcra", "user:1", WORKED)).allowed
    await store.aclose()


async def test_a_denying_layer_consumes_nothing_from_the_others(async_client: AsyncClient) -> None:
    """All or nothing across layers, as for the blocking store."""
    clock = ManualClock()
    store = AsyncRedisStore(async_client, clock=clock, timeout=STORE_TIMEOUT)
    per_second, per_minute = Rate.parse("2/second"), Rate.parse("5/minute")
    layers = [per_second, per_minute]
    assert [(await store.hit("gcra", "k", layers)).allowed for _ in range(3)] == [
        True,
        True,
        False,
    ]
    assert (await store.hit("gcra", "k", per_minute, 0)).remaining == 3
    await store.aclose()


async def test_sixty_four_concurrent_hits_on_a_limit_of_ten_admit_exactly_ten(
    async_client: AsyncClient,
) -> None:
    """64 hits in flight at once on one key with limit 10: exactly 10 allowed."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    rate = Rate.parse("10/minute")
    decisions = await asyncio.gather(*(store.hit("gcra", "hot", rate) for _ in range(64)))
    assert sum(d.allowed for d in decisions) == 10
    assert sorted(d.remaining for d in decisions if d.allowed) == list(range(10))
    await store.aclose()


async def test_concurrent_hits_on_many_keys_each_get_their_own_answer(
    async_client: AsyncClient,
) -> None:
    """Pipelined replies go back to the right callers: each key sees its own countdown."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    rate = Rate.parse("100/minute")
    keys = [f"user:{i}" for i in range(40)]
    decisions = await asyncio.gather(
        *(store.hit("gcra", key, rate, cost=i % 5 + 1) for i, key in enumerate(keys))
    )
    assert [d.remaining for d in decisions] == [100 - (i % 5 + 1) for i in range(40)]
    await store.aclose()


async def test_a_flushed_script_cache_is_reloaded_for_every_waiter(
    async_client: AsyncClient,
) -> None:
    """After SCRIPT FLUSH, a burst of concurrent hits all get NOSCRIPT, reload and decide."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    assert (await store.hit("gcra", "k", WORKED)).remaining == 19
    await flush_scripts(async_client)
    decisions = await asyncio.gather(*(store.hit("gcra", "k", WORKED) for _ in range(8)))
    assert sorted(d.remaining for d in decisions) == list(range(11, 19))
    await store.aclose()


async def test_reset_and_ping(async_client: AsyncClient) -> None:
    """reset empties the key's state; ping is True against a live server."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    await store.hit("gcra", "k", WORKED, cost=20)
    assert not (await store.hit("gcra", "k", WORKED)).allowed
    await store.reset("gcra", "k", WORKED)
    assert (await store.hit("gcra", "k", WORKED)).remaining == 19
    assert await store.ping() is True
    await store.aclose()


async def test_generic_script_entry_point(async_client: AsyncClient) -> None:
    """The async store runs a script call (``_script_call``) and returns its raw reply,
    reloading the script if needed."""
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    plan = build("gcra", "rw", "k", WORKED, 1)
    args = ["1700000000000000", 1, *plan.params[0]]
    await flush_scripts(async_client)
    reply = await store._run(store._script_call("gcra", plan.keys, args, list))
    assert (reply[1], reply[3]) == (1, 19)
    await store.aclose()


async def test_a_burst_of_noscript_replies_sends_the_script_source_once(
    make_redis: Callable[..., RedisServer],
) -> None:
    """200 hits in flight on an empty script cache: one EVAL loads the script, the rest EVALSHA.

    Each EVAL carries the whole source (about 7 KB); one per waiter made a cold burst
    of 4,000 send 28 MB, enough to keep Redis silent past the 20 ms timeout.
    """
    server = make_redis()
    client = aredis.Redis(host=HOST, port=server.port)
    store = AsyncRedisStore(client, clock=ManualClock(), timeout=STORE_TIMEOUT)
    decisions = await asyncio.gather(*(store.hit("gcra", f"k{i}", WORKED) for i in range(200)))
    assert all(d.remaining == 19 for d in decisions)
    stats = await client.info("commandstats")
    assert stats["cmdstat_eval"]["calls"] == 1
    # 200 NOSCRIPT replies, then 199 EVALSHAs that find the script loaded.
    assert stats["cmdstat_evalsha"]["calls"] == 399
    await store.aclose()
    await client.aclose()


async def test_4000_concurrent_hits_within_the_default_timeout_are_all_answered(
    redis_server: RedisServer,
) -> None:
    """4,000 hits started at once on one loop, 20 ms default timeout: every one decides, exactly.

    Packing 4,000 requests keeps the loop busy longer than the timeout while the
    first replies already wait in the socket; that backlog is this process's own,
    not an outage. The first burst also connects and loads the script (NOSCRIPT for
    every waiter); the second runs on the warm connection. 40 keys of 100 hits on a
    limit of 50 each: exactly 50 allowed per key, so no reply went to the wrong caller.
    """
    client = aredis.Redis(host=HOST, port=redis_server.port)
    await client.script_flush()
    store = AsyncRedisStore(client, clock=ManualClock(), prefix="burst")
    assert store.timeout == DEFAULT_TIMEOUT == 0.02
    rate = Rate.parse("50/minute")
    for burst in ("cold", "warm"):
        keys = [f"{burst}:{i % 40}" for i in range(4000)]
        results = await asyncio.gather(
            *(store.hit("gcra", key, rate) for key in keys), return_exceptions=True
        )
        failed = [r for r in results if isinstance(r, BaseException)]
        assert failed == [], f"{burst}: {len(failed)} of 4000 failed, first: {failed[:1]}"
        allowed = Counter(key for key, d in zip(keys, results, strict=True) if d.allowed)  # type: ignore[union-attr]
        assert allowed == dict.fromkeys(set(keys), 50)
    await store.aclose()
    await client.aclose()


def test_one_store_serves_successive_event_loops(redis_server: RedisServer) -> None:
    """A store made outside any loop works under asyncio.run twice (each loop gets its own link)."""
    store = AsyncRedisStore(aredis.Redis(host=HOST, port=redis_server.port), clock=ManualClock())

    async def remaining() -> int:
        return (await store.hit("gcra", "loops", WORKED)).remaining

    first, second = asyncio.run(remaining()), asyncio.run(remaining())
    assert second == first - 1


def test_the_store_wants_an_asyncio_client() -> None:
    """A blocking client is a ConfigurationError pointing at RedisStore."""
    import redis

    with pytest.raises(ConfigurationError, match="RedisStore"):
        AsyncRedisStore(redis.Redis())  # type: ignore[arg-type]
