"""ratewarden's cases, and the plain redis-py loops it is measured against.

- ``Limiter(MemoryStore(), algorithm=...)`` for every rate algorithm that
  ratewarden ships out of gcra / token_bucket / sliding_window;
- ``Limiter(RedisStore.from_url(url, timeout=1))`` for the same, on Redis;
- ``AsyncLimiter(AsyncRedisStore.from_url(url, timeout=1))`` (GCRA) with
  ``IN_FLIGHT`` decisions in flight;
- the ceilings: a plain redis-py loop calling one ``register_script`` object
  per decision (the way the peers call Redis) with ratewarden's own GCRA Lua
  source and ARGV from ``ratewarden.storage._plan.argv(plan, None)``; sync,
  and asyncio with ``IN_FLIGHT`` in flight;
- ``Limiter(MemcacheStore(url, timeout=1))`` for the same algorithms and
  ``fixed_window`` (what ``limits`` runs on memcached), and
  ``AsyncLimiter(AsyncMemcacheStore(url, timeout=1))`` (GCRA) with ``IN_FLIGHT``
  in flight. Each decision is a compare-and-set write of the key's one item; the
  store remembers the item's last value and CAS number, so while this process is
  its only writer a decision is one round trip.

The Redis and memcache stores are imported when a case is set up, so the memory
cases run (and the rows say "not available") while one of them does not exist
or does not import.
"""

from __future__ import annotations

import importlib
from functools import partial
from typing import Any

from benchmarks._case import (
    LIMIT,
    PERIOD_S,
    TIMEOUT_S,
    AsyncSubject,
    Case,
    Env,
    NotAvailableError,
    Subject,
    need_memcached,
    need_redis,
)

__all__ = ["IN_FLIGHT", "cases"]

#: Decisions in flight for the async cases.
IN_FLIGHT = 64

#: The ceilings' key prefix: their state never mixes with ratewarden's own rows.
_CEILING_PREFIX = "ceiling"

#: The algorithms to measure, in this order, when ratewarden has them.
_ALGORITHMS = ("gcra", "token_bucket", "sliding_window")

#: On memcached also the fixed window, the algorithm ``limits`` runs there with ``incr``.
_MEMCACHED_ALGORITHMS = (*_ALGORITHMS, "fixed_window")


def _rate() -> Any:
    from ratewarden import Rate

    return Rate(LIMIT, PERIOD_S)


def _redis_module() -> Any:
    try:
        return importlib.import_module("ratewarden.storage.redis")
    except Exception as exc:
        raise NotAvailableError(f"ratewarden.storage.redis: {type(exc).__name__}: {exc}") from exc


def _memcache_module() -> Any:
    try:
        return importlib.import_module("ratewarden.storage.memcache")
    except Exception as exc:
        raise NotAvailableError(
            f"ratewarden.storage.memcache: {type(exc).__name__}: {exc}"
        ) from exc


def _lua_source(algorithm: str) -> str:
    from ratewarden.storage import _scripts

    try:
        return _scripts.script(algorithm).source
    except FileNotFoundError as exc:
        raise NotAvailableError(f"no Lua script for {algorithm}") from exc


def _memory(algorithm: str, env: Env) -> Subject:
    from ratewarden import Limiter, MemoryStore

    limiter = Limiter(MemoryStore(), algorithm=algorithm)
    return Subject(partial(limiter.hit, rates=_rate()), limiter.store.close)


def _redis(algorithm: str, env: Env) -> Subject:
    from ratewarden import Limiter

    url = need_redis(env)
    _lua_source(algorithm)
    store = _redis_module().RedisStore.from_url(url, timeout=TIMEOUT_S)
    limiter = Limiter(store, algorithm=algorithm)
    return Subject(partial(limiter.hit, rates=_rate()), store.close)


async def _redis_async(algorithm: str, env: Env) -> AsyncSubject:
    from ratewarden import AsyncLimiter

    url = need_redis(env)
    _lua_source(algorithm)
    store = _redis_module().AsyncRedisStore.from_url(url, timeout=TIMEOUT_S)
    limiter = AsyncLimiter(store, algorithm=algorithm)
    return AsyncSubject(partial(limiter.hit, rates=_rate()), store.aclose)


def _memcached(algorithm: str, env: Env) -> Subject:
    from ratewarden import Limiter

    url = need_memcached(env)
    store = _memcache_module().MemcacheStore(url, timeout=TIMEOUT_S)
    limiter = Limiter(store, algorithm=algorithm)
    return Subject(partial(limiter.hit, rates=_rate()), store.close)


async def _memcached_async(algorithm: str, env: Env) -> AsyncSubject:
    from ratewarden import AsyncLimiter

    url = need_memcached(env)
    store = _memcache_module().AsyncMemcacheStore(url, timeout=TIMEOUT_S)
    limiter = AsyncLimiter(store, algorithm=algorithm)
    return AsyncSubject(partial(limiter.hit, rates=_rate()), store.aclose)


def _script_calls(algorithm: str) -> Any:
    """key -> (KEYS, ARGV) for one decision, built once per key outside the timed call."""
    from ratewarden.storage import _plan

    rate = _rate()
    calls: dict[str, tuple[list[str], list[int | str]]] = {}

    def call_for(key: str) -> tuple[list[str], list[int | str]]:
        found = calls.get(key)
        if found is None:
            plan = _plan.build(algorithm, _CEILING_PREFIX, key, rate, 1)
            found = calls[key] = (list(plan.keys), _plan.argv(plan, None))
        return found

    return call_for


def _ceiling(env: Env) -> Subject:
    import redis

    client = redis.Redis.from_url(need_redis(env), socket_timeout=TIMEOUT_S)
    script = client.register_script(_lua_source("gcra"))
    call_for = _script_calls("gcra")

    def decide(key: str) -> object:
        keys, args = call_for(key)
        return script(keys=keys, args=args)[1]

    return Subject(decide, client.close)


async def _ceiling_async(env: Env) -> AsyncSubject:
    import redis.asyncio

    client = redis.asyncio.Redis.from_url(
        need_redis(env), socket_timeout=TIMEOUT_S, max_connections=IN_FLIGHT
    )
    script = client.register_script(_lua_source("gcra"))
    call_for = _script_calls("gcra")

    async def decide(key: str) -> object:
        keys, args = call_for(key)
        return (await script(keys=keys, args=args))[1]

    return AsyncSubject(decide, client.aclose)


def _available_algorithms(names: tuple[str, ...] = _ALGORITHMS) -> list[str]:
    from ratewarden.algorithms import ALGORITHMS

    return [name for name in names if name in ALGORITHMS]


def cases() -> list[Case]:
    memory = [
        Case("ratewarden", name, "memory", "subject", setup=partial(_memory, name))
        for name in _available_algorithms()
    ]
    redis_sync = [
        Case("ratewarden", name, "redis", "subject", setup=partial(_redis, name))
        for name in _available_algorithms()
    ]
    memcached = [
        Case("ratewarden", name, "memcached", "subject", setup=partial(_memcached, name))
        for name in _available_algorithms(_MEMCACHED_ALGORITHMS)
    ]
    return [
        *memory,
        *redis_sync,
        Case("redis-py script loop", "gcra.lua", "redis", "ceiling", setup=_ceiling),
        Case(
            "ratewarden",
            "gcra",
            "redis-async",
            "subject",
            setup_async=partial(_redis_async, "gcra"),
            in_flight=IN_FLIGHT,
        ),
        Case(
            "redis-py asyncio script loop",
            "gcra.lua",
            "redis-async",
            "ceiling",
            setup_async=_ceiling_async,
            in_flight=IN_FLIGHT,
        ),
        *memcached,
        Case(
            "ratewarden",
            "gcra",
            "memcached-async",
            "subject",
            setup_async=partial(_memcached_async, "gcra"),
            in_flight=IN_FLIGHT,
        ),
    ]
