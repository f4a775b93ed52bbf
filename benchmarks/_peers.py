"""The peers, each called the way its documentation shows, with its closest algorithm to GCRA.

- limits: ``SlidingWindowCounterRateLimiter`` (two counters per key, a weighted
  sliding window: the closest to GCRA's smooth admission with O(1) state) and
  ``FixedWindowRateLimiter`` (its cheapest strategy, so "fastest peer" is not
  understated). ``MemoryStorage`` / ``RedisStorage``. The moving window is left
  out: it stores one entry per admitted request, which this workload (nothing
  is ever denied) would grow without bound.
- throttled-py: ``Throttled(using="gcra")`` with its ``MemoryStore`` (sized for
  the 10,000 keys; its default holds 1,024) / ``RedisStore``; non-blocking.
- pyrate-limiter: ``Limiter`` over a ``StateBucket`` with its ``GCRA``
  algorithm, one bucket per key routed by a ``BucketFactory`` (the library's
  pattern for many keys); ``InMemoryStateStore`` / ``RedisStateStore``;
  ``try_acquire(key, blocking=False)``. No leak thread: ``StateBucket.leak``
  is a no-op.

On memcached only ``limits`` has a backend: ``MemcachedStorage`` (what
``storage_from_string("memcached://HOST:PORT")`` builds), over pymemcache's
``PooledClient``, with the same two strategies as on Redis. Its fixed window is
``incr`` (one round trip; ``incr``, ``add`` and a ``set`` of the window's
expiry on a window's first hit); its sliding window counter is a ``get_many``
of the two windows' counters, then an ``incr`` of the current one (and a
``decr`` when a racing hit got there first): two round trips. Its moving
window raises ``NotImplementedError`` on memcached. Its asyncio memcached
storage (``async+memcached://``, over memcachio) is left out, as its asyncio
Redis storage is: the suite's async rows are ratewarden's. throttled-py 3.5
(``throttled.store``: ``MemoryStore`` and ``RedisStore``) and pyrate-limiter 4.6
(buckets and state stores in memory, across processes, in SQLite, Redis and
PostgreSQL) have no memcached backend, so they have no memcached rows.

Each adapter returns True when the library allowed the request.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from benchmarks._case import (
    LIMIT,
    PERIOD_S,
    TIMEOUT_S,
    Case,
    Env,
    NotAvailableError,
    Subject,
    need_memcached,
    need_redis,
)

__all__ = ["cases"]

#: Keys the in-memory stores must hold without evicting.
_MAX_KEYS = 20_000


def _import(name: str) -> Any:
    try:
        return __import__(name, fromlist=["_"])
    except ImportError as exc:
        raise NotAvailableError(f"{name} is not installed (pip install -e '.[bench]')") from exc


# limits -------------------------------------------------------------------------------


def _limits(strategy: str, backend: str, env: Env) -> Subject:
    limits = _import("limits")
    item = limits.RateLimitItemPerSecond(LIMIT, PERIOD_S)
    if backend == "memory":
        storage = limits.storage.MemoryStorage()
    elif backend == "memcached":
        url = need_memcached(env)
        _import("pymemcache")
        # The keywords go to pymemcache's PooledClient (no timeout unless given one).
        storage = limits.storage.MemcachedStorage(url, timeout=TIMEOUT_S, connect_timeout=TIMEOUT_S)
    else:
        storage = limits.storage.RedisStorage(need_redis(env), socket_timeout=TIMEOUT_S)
    limiter = limits.strategies.STRATEGIES[strategy](storage)
    close = getattr(storage.storage, "close", None) if backend != "memory" else None
    return Subject(partial(limiter.hit, item), close or (lambda: None))


# throttled-py -------------------------------------------------------------------------


def _throttled(backend: str, env: Env) -> Subject:
    throttled = _import("throttled")
    quota = throttled.per_duration(_period(), LIMIT)
    if backend == "memory":
        store = throttled.MemoryStore(options={"MAX_SIZE": _MAX_KEYS})
    else:
        store = throttled.RedisStore(server=need_redis(env), options={"SOCKET_TIMEOUT": TIMEOUT_S})
    limiter = throttled.Throttled(using="gcra", quota=quota, store=store, timeout=-1)
    limit = limiter.limit

    def decide(key: str) -> bool:
        return not limit(key).limited

    return Subject(decide, lambda: None)


def _period() -> Any:
    from datetime import timedelta

    return timedelta(seconds=PERIOD_S)


# pyrate-limiter -----------------------------------------------------------------------


def _pyrate(backend: str, env: Env) -> Subject:
    pyrate = _import("pyrate_limiter")
    rates = [pyrate.Rate(LIMIT, PERIOD_S * 1000)]
    algorithm = pyrate.GCRA()
    if backend == "memory":
        client = None
        clock = pyrate.MonotonicClock()

        def store_for(key: str) -> Any:
            return pyrate.InMemoryStateStore()
    else:
        import redis

        client = redis.Redis.from_url(need_redis(env), socket_timeout=TIMEOUT_S)
        # Shared state needs a wall clock (the store's own default).
        clock = pyrate.WallClock()

        def store_for(key: str) -> Any:
            return pyrate.RedisStateStore(client, key=f"pyrate:{key}")

    class PerKey(pyrate.BucketFactory):  # type: ignore[misc, name-defined]
        """One GCRA StateBucket per key, made on first use."""

        def __init__(self) -> None:
            self.buckets: dict[str, Any] = {}
            self.clock = clock

        def wrap_item(self, name: str, weight: int = 1) -> Any:
            return pyrate.RateItem(name, self.clock.now(), weight=weight)

        def get(self, item: Any) -> Any:
            bucket = self.buckets.get(item.name)
            if bucket is None:
                bucket = self.buckets[item.name] = pyrate.StateBucket(
                    rates, algorithm=algorithm, store=store_for(item.name), clock=self.clock
                )
            return bucket

    limiter = pyrate.Limiter(PerKey())

    def close() -> None:
        if client is not None:
            client.close()

    return Subject(partial(limiter.try_acquire, blocking=False), close)


def cases() -> list[Case]:
    rows = []
    for backend in ("memory", "redis"):
        rows += [
            Case(
                "limits",
                "sliding-window-counter",
                backend,
                "peer",
                setup=partial(_limits, "sliding-window-counter", backend),
            ),
            Case(
                "limits",
                "fixed-window",
                backend,
                "peer",
                setup=partial(_limits, "fixed-window", backend),
            ),
            Case("throttled-py", "gcra", backend, "peer", setup=partial(_throttled, backend)),
            Case(
                "pyrate-limiter",
                "gcra StateBucket",
                backend,
                "peer",
                setup=partial(_pyrate, backend),
            ),
        ]
    rows += [
        Case("limits", strategy, "memcached", "peer", setup=partial(_limits, strategy, "memcached"))
        for strategy in ("sliding-window-counter", "fixed-window")
    ]
    return rows
