"""What a benchmark case is, and the workload every case shares.

A case is one library, one algorithm, one backend. Its ``setup`` builds a
``Subject``: a ``decide(key)`` that makes one rate limiting decision and returns
something truthy when the request is allowed, and a ``close``. The suite runs
every case against the same key sets (1 key, 10,000 keys round-robin).

The workload: one rate of ``LIMIT`` per ``PERIOD_S`` seconds, high enough that
no decision is denied during a run, so every library takes its write path on
every call (the "denied" column checks that).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

__all__ = [
    "LIMIT",
    "PERIOD_S",
    "TIMEOUT_S",
    "AsyncSubject",
    "Case",
    "Env",
    "NotAvailableError",
    "Subject",
    "need_memcached",
    "need_redis",
]

LIMIT = 1_000_000_000
PERIOD_S = 3_600

#: Socket timeout for every Redis and memcached client, generous so a GC pause is not an error.
TIMEOUT_S = 1.0


class NotAvailableError(Exception):
    """Raised by a setup when its library or backend is missing; the row says why."""


@dataclass(frozen=True, slots=True)
class Env:
    """Where the backends are: a URL is None when that server was not started.

    ``memcached_url`` is ``memcached://HOST:PORT``, a form both ratewarden's memcache
    store and ``limits`` accept.
    """

    redis_url: str | None
    memcached_url: str | None = None


@dataclass(frozen=True, slots=True)
class Subject:
    decide: Callable[[str], object]
    close: Callable[[], None]


@dataclass(frozen=True, slots=True)
class AsyncSubject:
    decide: Callable[[str], Awaitable[object]]
    close: Callable[[], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class Case:
    """One row of the table (per key set).

    ``backend`` is ``memory``, ``redis``, ``redis-async``, ``memcached`` or
    ``memcached-async``; ``role`` is ``subject`` (ratewarden), ``peer`` or
    ``ceiling`` (the plain redis-py reference loops). A sync case has ``setup``;
    an async case has ``setup_async`` and runs with ``in_flight`` decisions
    outstanding.
    """

    library: str
    algorithm: str
    backend: str
    role: str
    setup: Callable[[Env], Subject] | None = None
    setup_async: Callable[[Env], Awaitable[AsyncSubject]] | None = None
    in_flight: int = 1

    @property
    def is_async(self) -> bool:
        return self.setup_async is not None

    @property
    def label(self) -> str:
        return f"{self.library} [{self.algorithm}]"


def need_redis(env: Env) -> str:
    if env.redis_url is None:
        raise NotAvailableError("no Redis (run scripts/bench)")
    return env.redis_url


def need_memcached(env: Env) -> str:
    if env.memcached_url is None:
        raise NotAvailableError("no memcached (run scripts/bench)")
    return env.memcached_url
