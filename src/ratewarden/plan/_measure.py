"""Measure a real Redis server: bytes per key (MEMORY USAGE) and server time per script call."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.rate import Rate
from ratewarden.storage._keys import DEFAULT_PREFIX

if TYPE_CHECKING:
    from ratewarden.storage.redis import RedisStore

__all__ = ["Measured", "measure"]


@dataclass(frozen=True, slots=True)
class Measured:
    """What one Redis server said about one algorithm's state and script cost."""

    algorithm: str
    key_bytes: int
    usec_per_call: float | None
    calls: int


def _script_usec(stats: dict[str, dict[str, float]]) -> tuple[float, int]:
    usec = calls = 0.0
    for name in ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro"):
        usec += stats.get(name, {}).get("usec", 0)
        calls += stats.get(name, {}).get("calls", 0)
    return usec, int(calls)


def _keys(key_length: int, count: int) -> list[str]:
    """``count`` distinct-as-possible keys of ``key_length`` characters with a random token."""
    token = uuid.uuid4().hex
    made = [(f"{i:x}-" + token).ljust(key_length, "_")[:key_length] for i in range(count)]
    return list(dict.fromkeys(made))


def measure(
    url: str,
    algorithm: str,
    limit: Rate,
    key_length: int = 32,
    calls: int = 2_000,
    prefix: str = DEFAULT_PREFIX,
) -> Measured:
    """Decide ``calls`` times on keys of ``key_length`` characters at ``url``; read the cost.

    The state of one key is filled as far as the limit lets it (a full sliding
    log holds ``limit`` entries) and measured with ``MEMORY USAGE``, under the
    store's real key schema and ``prefix``. The server time per call is the
    change in ``INFO commandstats`` for the script commands (standalone and
    Sentinel; on a Cluster, memory only). Keys carry a random token, are
    checked not to exist before the first write and are deleted afterwards
    (they have TTLs should the server go away in between).
    """
    # Imported here: `ratewarden plan` without --measure (and every other command) must work
    # without the redis extra installed.
    try:
        import redis
    except ImportError as exc:
        raise ConfigurationError(
            "measure needs redis-py, which is not installed: pip install 'ratewarden[redis]'"
        ) from exc

    from ratewarden.storage import _plan
    from ratewarden.storage._redis_url import redact
    from ratewarden.storage.redis import RedisStore

    algorithms.get(algorithm)
    if not 1 <= key_length <= 1024 or not 1 <= calls <= 1_000_000:
        raise ConfigurationError(
            f"measure: key_length {key_length!r} must be 1..1024 and calls {calls!r} 1..1,000,000"
        )
    # A measurement is not a hot path: a slow answer is still an answer.
    store = RedisStore.from_url(url, prefix=prefix, timeout=2.0)
    keys = _keys(key_length, min(calls, 100))
    names = [n for key in keys for n in _plan.build(algorithm, prefix, key, limit, 0).keys]
    try:
        if sum(int(store.client.exists(name)) for name in names):
            raise ConfigurationError(
                f"measure: a {key_length}-character test key already exists on {redact(url)}; "
                "use a longer --key-length"
            )
        try:
            return _run(store, algorithm, limit, keys, calls)
        finally:
            for name in names:
                store.client.delete(name)
    except redis.RedisError as exc:
        raise StorageUnavailableError(f"measure on {redact(url)}: {exc}") from exc
    finally:
        store.close()


def _run(store: RedisStore, algorithm: str, limit: Rate, keys: list[str], calls: int) -> Measured:
    import redis

    from ratewarden.storage import _plan

    client = store.client
    standalone = not isinstance(client, redis.RedisCluster)
    before = _script_usec(client.info("commandstats")) if standalone else (0.0, 0)
    fill, others = keys[0], keys[1:] or keys
    filling = min(limit.capacity, calls)
    for _ in range(filling):
        store.hit(algorithm, fill, limit)
    for i in range(calls - filling):
        store.hit(algorithm, others[i % len(others)], limit)
    after = _script_usec(client.info("commandstats")) if standalone else (0.0, 0)
    state = _plan.build(algorithm, store.prefix, fill, limit, 0).keys
    size = sum(int(client.memory_usage(name, samples=0) or 0) for name in state)
    counted = after[1] - before[1]
    usec = (after[0] - before[0]) / counted if counted > 0 else None
    return Measured(algorithm, size, usec, calls)
