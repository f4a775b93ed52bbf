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

import hashlib
import inspect
import math
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ratewarden.checks import keywords_checked
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.idempotency import Claim, StoredResponse
from ratewarden.storage._idempotency_memory import MemoryRecords

__all__ = [
    "DEFAULT_PREFIX",
    "AsyncMemoryIdempotencyStore",
    "AsyncRedisIdempotencyStore",
    "MemoryIdempotencyStore",
    "RedisIdempotencyStore",
]

DEFAULT_PREFIX = "ratewarden:idem:"


# ---------------------------------------------------------------- memory


class MemoryIdempotencyStore(MemoryRecords):
    """Keys in this process only (one worker, or tests). Bounded by entries and bytes:
    past either bound the oldest stored responses go first, which forgets their keys
    early. Locks of requests in flight are never dropped: with no room left for one,
    ``begin`` raises ``StorageError`` (the middleware's 503)."""

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``."""
        return self._begin(key, fingerprint, token, lock_ttl)

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``."""
        return self._complete(key, token, response, ttl)

    def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``."""
        self._release(key, token)


class AsyncMemoryIdempotencyStore(MemoryRecords):
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

    # redis-py 8's repr of a server error drops its text ("server:ResponseError"): say both.
    said = f"{type(exc).__name__}: {exc}"
    if isinstance(exc, rx.ConnectionError | rx.TimeoutError | OSError):
        return StorageUnavailableError(f"Redis idempotency store unavailable: {said}")
    return StorageError(f"Redis idempotency store rejected a command: {said}")


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
        # By its SHA1, and on NOSCRIPT with its source, to the key's own server: redis-py's
        # Script loads a missing script with SCRIPT LOAD, which a Cluster client sends to every
        # primary, so one primary down failed complete() on the healthy ones.
        self._complete_sha = hashlib.sha1(_COMPLETE.encode()).hexdigest()
        self._no_script: type[BaseException] = rx.NoScriptError

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
            try:
                done = self._client.evalsha(self._complete_sha, len(keys), *keys, *args)
            except self._no_script:  # nothing ran: sent again with its source, to its server
                done = self._client.eval(_COMPLETE, len(keys), *keys, *args)
            return bool(done)

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
            try:
                done = await self._client.evalsha(self._complete_sha, len(keys), *keys, *args)
            except self._no_script:  # see RedisIdempotencyStore.complete
                done = await self._client.eval(_COMPLETE, len(keys), *keys, *args)
            return bool(done)

    async def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``: a compare-and-delete script."""
        keys, args = self._release_args(key, token)
        with self._mapped_errors():
            await self._client.eval(_RELEASE, len(keys), *keys, *args)


def _ms(seconds: float) -> int:
    return max(math.ceil(seconds * 1000), 1)
