"""Measure a real Redis server: bytes per key (MEMORY USAGE) and server time per script call.

``ratewarden plan --measure URL`` runs this on a store the command line opens;
from code, open the store yourself::

    store = RedisStore.from_url("redis://localhost:6379/0", timeout=2.0)
    try:
        found = measure(store, "gcra", Rate.parse("100/minute"))
    finally:
        store.close()
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ratewarden import algorithms
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.rate import Rate

if TYPE_CHECKING:
    from ratewarden.storage.redis import RedisStore

__all__ = ["Measured", "measure", "state_keys"]

_SCRIPT_COMMANDS = ("cmdstat_evalsha", "cmdstat_eval", "cmdstat_evalsha_ro", "cmdstat_eval_ro")


@dataclass(frozen=True, slots=True)
class Measured:
    """What one Redis server said about one algorithm's state and script cost."""

    algorithm: str
    key_bytes: int
    usec_per_call: float | None
    calls: int
    #: The decisions on the measured key: the limit's capacity, or fewer when ``calls`` is.
    filled: int = 0
    #: ``(decisions, bytes)`` at half the fill and at the fill, when ``key_bytes`` is
    #: extrapolated from them to a full state (its size grew between them); else None.
    extrapolated_from: tuple[tuple[int, int], tuple[int, int]] | None = None


def state_keys(
    algorithm: str, prefix: str, key: str, rates: Rate | Sequence[Rate]
) -> tuple[str, ...]:
    """The Redis keys that hold ``key``'s state under ``algorithm`` and ``rates`` (one per
    rate), as a ``RedisStore`` with this ``prefix`` names them. Bad input raises
    ``ConfigurationError``, as ``hit`` would."""
    from ratewarden.storage import _plan

    return _plan.build(algorithm, prefix, key, rates, 0).keys


def measure(
    store: RedisStore,
    algorithm: str,
    limit: Rate,
    *,
    key_length: int = 32,
    calls: int = 2_000,
) -> Measured:
    """Decide ``calls`` times on keys of ``key_length`` characters in ``store``; read the cost.

    The state of one key is filled as far as the limit lets it (a full sliding
    log holds ``limit`` entries), at most ``calls`` decisions, and measured with
    ``MEMORY USAGE``, under the store's real key schema and prefix. A state
    that the calls cannot fill and that still grows (a sliding log of a limit
    above ``calls``) is measured at half the fill and at the fill, and its size
    extrapolated linearly to ``limit`` entries (``extrapolated_from`` says so):
    each decision on a sliding log costs time in proportion to its entries, so
    a real fill of a large limit would take minutes to hours. The server time per call is the change
    in ``INFO commandstats`` for the script commands (standalone and Sentinel;
    on a Cluster, memory only). Keys carry a random token (as much of one as
    their length leaves room for: keys of 1 or 2 characters are a counter
    only), are checked not to exist before the first write and are deleted
    afterwards (they have TTLs should the server go away in between). The store
    stays open: it is the caller's. Anything but a blocking ``RedisStore`` (a URL:
    open it with ``RedisStore.from_url``), and ``key_length`` or ``calls`` not an
    int in 1..1024 / 1..1,000,000, is a ``ConfigurationError`` before anything is sent; so is
    a ``limit`` that is not one ``Rate`` (text, or a layered limit's list: measure each
    layer, as each has a key of its own).
    """
    import redis

    _check_store(store)
    algorithms.get(algorithm)
    _check_limit(limit)
    _check_count("key_length", key_length, 1024)
    _check_count("calls", calls, 1_000_000)
    keys = _keys(key_length, min(calls, 100))
    names = [n for key in keys for n in state_keys(algorithm, store.prefix, key, limit)]
    where = _where(store)
    client = store.client
    try:
        if sum(int(client.exists(name)) for name in names):
            raise ConfigurationError(
                f"measure: a {key_length}-character test key already exists on {where}; "
                "use a longer --key-length"
            )
        try:
            return _run(store, algorithm, limit, keys, calls)
        finally:
            for name in names:
                client.delete(name)
    # A Cluster client made by from_url connects here, at its first command, and says so
    # with a RedisClusterException (not a RedisError) when no node answers.
    except (redis.RedisError, redis.exceptions.RedisClusterException) as exc:
        raise StorageUnavailableError(f"measure on {where}: {exc}") from exc


def _check_store(store: object) -> None:
    """Refuse anything but a blocking ``RedisStore``, naming it by type only (a URL given
    here may hold a password)."""
    from ratewarden.storage.redis import RedisStore

    if isinstance(store, RedisStore):
        return
    name = type(store).__name__
    given = f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"
    if isinstance(store, str):
        cure = (
            "open it with RedisStore.from_url(url, timeout=2.0), pass the store, and close it "
            "afterwards"
        )
    else:
        cure = "MEMORY USAGE and INFO commandstats are read from a blocking RedisStore's server"
    raise ConfigurationError(f"measure needs a RedisStore, not {given}: {cure}")


def _check_limit(limit: object) -> None:
    """One ``Rate``: a list (a layered limit) has a state per layer, filled at different
    speeds, which one figure cannot describe; the rate itself is checked by ``state_keys``."""
    if isinstance(limit, Rate):
        return
    if isinstance(limit, str):
        raise ConfigurationError(
            f"measure: limit {limit!r} is not a Rate; use Rate.parse({limit!r})"
        )
    if isinstance(limit, list | tuple):
        raise ConfigurationError(
            f"measure takes one Rate, not {len(limit)} (a layered limit keeps a state per "
            "layer: measure each layer's Rate on its own)"
        )
    raise ConfigurationError(f"measure: limit {limit!r} must be a Rate (Rate.parse('100/minute'))")


def _check_count(what: str, value: object, most: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= most:
        raise ConfigurationError(f"measure: {what} {value!r} must be an int from 1 to {most:,}")


def _where(store: RedisStore) -> str:
    """The server as the store names it in its errors (host and port, never a password)."""
    return store._router.where


def _keys(key_length: int, count: int) -> list[str]:
    """``count`` distinct-as-possible keys of ``key_length`` characters with a random token."""
    token = uuid.uuid4().hex
    made = [(f"{i:x}-" + token).ljust(key_length, "_")[:key_length] for i in range(count)]
    return list(dict.fromkeys(made))


def _script_usec(stats: dict[str, dict[str, float]]) -> tuple[float, int]:
    usec = calls = 0.0
    for name in _SCRIPT_COMMANDS:
        usec += stats.get(name, {}).get("usec", 0)
        calls += stats.get(name, {}).get("calls", 0)
    return usec, int(calls)


def _run(store: RedisStore, algorithm: str, limit: Rate, keys: list[str], calls: int) -> Measured:
    import redis

    client = store.client
    standalone = not isinstance(client, redis.RedisCluster)
    before = _script_usec(client.info("commandstats")) if standalone else (0.0, 0)
    fill, others = keys[0], keys[1:] or keys
    state = state_keys(algorithm, store.prefix, fill, limit)

    def size() -> int:
        return sum(int(client.memory_usage(name, samples=0) or 0) for name in state)

    filling = min(limit.capacity, calls)
    half = filling // 2
    for _ in range(half):
        store.hit(algorithm, fill, limit)
    at_half = size()
    for _ in range(filling - half):
        store.hit(algorithm, fill, limit)
    for i in range(calls - filling):
        store.hit(algorithm, others[i % len(others)], limit)
    after = _script_usec(client.info("commandstats")) if standalone else (0.0, 0)
    key_bytes = at_fill = size()
    points = None
    if limit.capacity > filling and half and at_fill > at_half:
        per_entry = (at_fill - at_half) / (filling - half)
        key_bytes = round(at_fill + per_entry * (limit.capacity - filling))
        points = ((half, at_half), (filling, at_fill))
    counted = after[1] - before[1]
    usec = (after[0] - before[0]) / counted if counted > 0 else None
    return Measured(algorithm, key_bytes, usec, calls, filling, points)
