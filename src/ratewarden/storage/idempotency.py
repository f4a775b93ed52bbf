"""Where Idempotency-Key records live: in this process or in Redis.

The stores that ``ratewarden.middleware.idempotency`` takes. What a record is,
and the protocols these classes satisfy, are in ``ratewarden.idempotency``::

    from ratewarden.storage.idempotency import AsyncRedisIdempotencyStore, MemoryIdempotencyStore

Each sync store and its asyncio twin share one base holding everything but the
I/O call; the memory twins never wait, so only their ``async`` faces differ.
redis-py is imported when a Redis store is made, so the memory stores work
without the ``[redis]`` extra.
"""

from __future__ import annotations

import inspect
import math
import threading
from collections import OrderedDict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.idempotency import Claim, StoredResponse

__all__ = [
    "DEFAULT_PREFIX",
    "AsyncMemoryIdempotencyStore",
    "AsyncRedisIdempotencyStore",
    "MemoryIdempotencyStore",
    "RedisIdempotencyStore",
]

DEFAULT_PREFIX = "ratewarden:idem:"
# What a record costs besides its response (key, token, fingerprint, objects).
_RECORD_OVERHEAD = 256


# ---------------------------------------------------------------- memory


@dataclass(frozen=True, slots=True)
class _Record:
    expires_us: int
    token: str  # the lock holder's; empty once done
    fingerprint: str
    response: StoredResponse | None

    @property
    def size(self) -> int:
        """Bytes charged against the store's bound: the response plus a flat overhead."""
        if self.response is None:
            return _RECORD_OVERHEAD
        headers = sum(len(n) + len(v) for n, v in self.response.headers)
        return _RECORD_OVERHEAD + headers + len(self.response.body)


class _MemoryRecords:
    """Records under a lock, expired lazily, evicted oldest first past the bounds.

    Everything the memory store and its asyncio twin do; they differ only in
    whether ``begin``, ``complete`` and ``release`` are awaited.
    """

    @keywords_checked
    def __init__(
        self, *, clock: Clock | None = None, max_entries: int = 10_000, max_bytes: int = 64 << 20
    ) -> None:
        for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"memory idempotency store {name}={value!r}: must be >= 1")
        self._clock = clock or SystemClock()
        self._max_entries, self._max_bytes = max_entries, max_bytes
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def _begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        with self._lock:
            now = self._clock.now_us()
            record = self._live(key, now)
            if record is None:
                self._put(key, _Record(now + _us(lock_ttl), token, fingerprint, None))
                return Claim("acquired")
            if record.response is None:
                if record.token == token:  # this request's own lock: a begin sent again
                    return Claim("acquired")
                return Claim("in_flight", record.fingerprint)
            return Claim("done", record.fingerprint, record.response)

    def _complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        with self._lock:
            now = self._clock.now_us()
            record = self._live(key, now)
            if record is not None and record.response == response:  # a complete sent again
                return True
            if record is None or record.response is not None or record.token != token:
                return False
            self._put(key, _Record(now + _us(ttl), "", record.fingerprint, response))
            return key in self._records  # a response larger than max_bytes is not kept

    def _release(self, key: str, token: str) -> None:
        with self._lock:
            record = self._live(key, self._clock.now_us())
            if record is not None and record.response is None and record.token == token:
                self._drop(key)

    def __len__(self) -> int:
        return len(self._records)

    def _live(self, key: str, now: int) -> _Record | None:
        record = self._records.get(key)
        if record is not None and record.expires_us <= now:
            self._drop(key)
            return None
        return record

    def _put(self, key: str, record: _Record) -> None:
        if key in self._records:
            self._drop(key)
        self._records[key] = record
        self._bytes += record.size
        while len(self._records) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._records)))

    def _drop(self, key: str) -> None:
        self._bytes -= self._records.pop(key).size


class MemoryIdempotencyStore(_MemoryRecords):
    """Keys in this process only (one worker, or tests). Bounded by entries and bytes:
    past either bound the oldest records go first, which forgets their keys early."""

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``."""
        return self._begin(key, fingerprint, token, lock_ttl)

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``."""
        return self._complete(key, token, response, ttl)

    def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``."""
        self._release(key, token)


class AsyncMemoryIdempotencyStore(_MemoryRecords):
    """The asyncio face of ``MemoryIdempotencyStore`` (no I/O: it never waits)."""

    async def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``."""
        return self._begin(key, fingerprint, token, lock_ttl)

    async def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``."""
        return self._complete(key, token, response, ttl)

    async def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``."""
        self._release(key, token)


def _us(seconds: float) -> int:
    return max(math.ceil(seconds * 1_000_000), 1)


# ---------------------------------------------------------------- redis

# Records: "I <token> <fingerprint>" while in flight, "D <fingerprint> <response>" when done.
# KEYS[1] the record; ARGV[1] "I <token> " (the lock's prefix); ARGV[2] the encoded
# response; ARGV[3] its TTL in ms. Reply: 1 if the lock was ours and is now the record, or
# if the record already holds this response: the client sent the script again after a
# timeout, and the first copy had stored it.
_COMPLETE = """
local v = redis.call('GET', KEYS[1])
if not v then
  return 0
end
if string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  local fingerprint = string.sub(v, #ARGV[1] + 1)
  redis.call('SET', KEYS[1], 'D ' .. fingerprint .. ' ' .. ARGV[2], 'PX', ARGV[3])
  return 1
end
local stored = ' ' .. ARGV[2]
if string.sub(v, 1, 2) == 'D ' and #v > #stored and string.sub(v, -#stored) == stored then
  return 1
end
return 0
"""
# KEYS[1] the record; ARGV[1] the lock's prefix. Deletes it only if it is still ours. Sent
# whole (EVAL): a release that waited in a paused server (the give-back after a failed begin)
# must run when it resumes, where an EVALSHA could meet an empty script cache and fail unseen.
_RELEASE = """
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _lock_prefix(token: str) -> bytes:
    return f"I {token} ".encode()


def _claim_of(key: str, value: bytes | str, token: str) -> Claim:
    """What a record found under ``key`` means to the request holding ``token``: a lock of
    its own token is its own (its ``SET`` sent again: redis-py re-sends a command that timed
    out, and the first copy, held up in a paused server, took the lock)."""
    data = value.encode() if isinstance(value, str) else value
    state, _, rest = data.partition(b" ")
    try:
        if state == b"I":
            holder, fingerprint = rest.split(b" ", 1)
            if holder.decode() == token:
                return Claim("acquired")
            return Claim("in_flight", fingerprint.decode())
        if state == b"D":
            fingerprint, _, payload = rest.partition(b" ")
            return Claim("done", fingerprint.decode(), StoredResponse.decode(payload))
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    raise StorageError(f"idempotency record {key!r} is not ratewarden's; check the store prefix")


def _storage_error(exc: BaseException) -> StorageError:
    from redis import exceptions as rx

    if isinstance(exc, rx.ConnectionError | rx.TimeoutError | OSError):
        return StorageUnavailableError(f"Redis idempotency store unavailable: {exc!r}")
    return StorageError(f"Redis idempotency store rejected a command: {exc!r}")


def _check_client(who: str, client: object, want_async: bool) -> None:
    """``client`` is a redis-py client of the kind the store awaits (or calls): a blocking
    one would answer the asyncio store's await with a reply (after doing the command), an
    asyncio one the blocking store's call with a coroutine never run."""
    execute = getattr(client, "execute_command", None)
    if not callable(execute):
        raise ConfigurationError(
            f"{who} client={client!r}: a redis-py client (redis.Redis, redis.asyncio.Redis, "
            "a Sentinel's master_for or a RedisCluster)"
        )
    if inspect.iscoroutinefunction(execute) == want_async:
        return
    if want_async:
        raise ConfigurationError(
            f"{who} client={client!r}: a redis.asyncio client (redis.asyncio.Redis or "
            "RedisCluster); this one blocks: it goes with RedisIdempotencyStore, on WSGI"
        )
    raise ConfigurationError(
        f"{who} client={client!r}: a blocking redis client (redis.Redis or RedisCluster); "
        "this one is asyncio's: it goes with AsyncRedisIdempotencyStore, on ASGI"
    )


class _RedisRecords:
    """Everything the Redis store and its asyncio twin do but the I/O call: key names,
    the lock's value, the scripts' arguments, and reading a reply into a ``Claim``."""

    _ASYNC: bool

    @keywords_checked
    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"idempotency store prefix={prefix!r}: a non-empty string")
        _check_client(type(self).__name__, client, self._ASYNC)
        from redis import exceptions as rx

        self._client = client
        self._prefix = prefix
        self._errors: tuple[type[BaseException], ...] = (rx.RedisError, OSError)
        self._complete_script = client.register_script(_COMPLETE)

    def _set_args(
        self, key: str, fingerprint: str, token: str, lock_ttl: float
    ) -> tuple[str, bytes, dict[str, Any]]:
        """``SET name value NX PX lock_ttl GET``: takes the lock, or reads what is there."""
        value = f"I {token} {fingerprint}".encode()
        return self._prefix + key, value, {"nx": True, "px": _ms(lock_ttl), "get": True}

    @staticmethod
    def _claim(name: str, old: bytes | str | None, token: str) -> Claim:
        return Claim("acquired") if old is None else _claim_of(name, old, token)

    def _complete_args(
        self, key: str, token: str, response: StoredResponse, ttl: float
    ) -> tuple[list[str], list[bytes | int]]:
        return [self._prefix + key], [_lock_prefix(token), response.encode(), _ms(ttl)]

    def _release_args(self, key: str, token: str) -> tuple[list[str], list[bytes]]:
        return [self._prefix + key], [_lock_prefix(token)]

    @contextmanager
    def _mapped_errors(self) -> Iterator[None]:
        """redis-py's errors (and socket errors) as ``StorageUnavailableError`` / ``StorageError``;
        a plain context manager, so it wraps an ``await`` as well as a call."""
        try:
            yield
        except self._errors as exc:
            raise _storage_error(exc) from exc


class RedisIdempotencyStore(_RedisRecords):
    """Keys in Redis (standalone, Sentinel or Cluster client from redis-py); needs Redis >= 7.0
    for ``SET NX PX GET``. Errors become ``StorageUnavailableError`` / ``StorageError``."""

    _ASYNC = False

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``: one ``SET NX PX GET``."""
        name, value, options = self._set_args(key, fingerprint, token, lock_ttl)
        with self._mapped_errors():
            old = self._client.set(name, value, **options)
        return self._claim(name, old, token)

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``: one compare-and-set script."""
        keys, args = self._complete_args(key, token, response, ttl)
        with self._mapped_errors():
            return bool(self._complete_script(keys, args))

    def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``: a compare-and-delete script."""
        keys, args = self._release_args(key, token)
        with self._mapped_errors():
            self._client.eval(_RELEASE, len(keys), *keys, *args)


class AsyncRedisIdempotencyStore(_RedisRecords):
    """The asyncio twin of ``RedisIdempotencyStore`` over a ``redis.asyncio`` client."""

    _ASYNC = True

    async def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``: one ``SET NX PX GET``."""
        name, value, options = self._set_args(key, fingerprint, token, lock_ttl)
        with self._mapped_errors():
            old = await self._client.set(name, value, **options)
        return self._claim(name, old, token)

    async def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``: one compare-and-set script."""
        keys, args = self._complete_args(key, token, response, ttl)
        with self._mapped_errors():
            return bool(await self._complete_script(keys, args))

    async def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``: a compare-and-delete script."""
        keys, args = self._release_args(key, token)
        with self._mapped_errors():
            await self._client.eval(_RELEASE, len(keys), *keys, *args)


def _ms(seconds: float) -> int:
    return max(math.ceil(seconds * 1000), 1)
