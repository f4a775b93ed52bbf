"""Where Idempotency-Key records live: in this process or in Redis.

A record is a lock while its request runs (``begin`` takes it with the caller's
token, for ``lock_ttl`` seconds) and the stored response once it is done
(``complete`` swaps the lock for the response, for ``ttl`` seconds, only if the
caller still holds it). ``release`` drops a lock without storing anything, so a
retry runs again. Used by ``ratewarden.middleware.idempotency``.
"""

from __future__ import annotations

import base64
import json
import math
import threading
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError

__all__ = [
    "DEFAULT_PREFIX",
    "AsyncIdempotencyStore",
    "AsyncMemoryIdempotencyStore",
    "AsyncRedisIdempotencyStore",
    "Claim",
    "IdempotencyStore",
    "MemoryIdempotencyStore",
    "RedisIdempotencyStore",
    "StoredResponse",
]

DEFAULT_PREFIX = "ratewarden:idem:"
# What a record costs besides its response (key, token, fingerprint, objects).
_RECORD_OVERHEAD = 256


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """A complete response, as stored for replay. Header names are lower-case bytes."""

    status: int
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes

    def encode(self) -> bytes:
        """ASCII JSON (headers as latin-1 text, the body in base64), for Redis."""
        doc = {
            "s": self.status,
            "h": [[n.decode("latin-1"), v.decode("latin-1")] for n, v in self.headers],
            "b": base64.b64encode(self.body).decode(),
        }
        return json.dumps(doc, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> StoredResponse:
        """The inverse of ``encode``."""
        doc = json.loads(data)
        headers = tuple((n.encode("latin-1"), v.encode("latin-1")) for n, v in doc["h"])
        return cls(int(doc["s"]), headers, base64.b64decode(doc["b"]))


@dataclass(frozen=True, slots=True)
class Claim:
    """What ``begin`` found under a key: ``acquired`` (the caller runs the request and
    holds the lock), ``in_flight`` (another request holds it) or ``done`` (with its response).
    ``fingerprint`` is the stored request's (empty when acquired)."""

    state: Literal["acquired", "in_flight", "done"]
    fingerprint: str = ""
    response: StoredResponse | None = None


class IdempotencyStore(Protocol):
    """Where keys live, for the WSGI middleware. Durations in seconds."""

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """Take the lock for ``key`` if nothing is stored, else say what is there."""
        ...

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """Replace the lock held by ``token`` with ``response``; False if it was lost."""
        ...

    def release(self, key: str, token: str) -> None:
        """Drop the lock held by ``token`` (nothing stored: a retry runs again)."""
        ...


class AsyncIdempotencyStore(Protocol):
    """The asyncio twin of ``IdempotencyStore``, for the ASGI middleware."""

    async def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """Take the lock for ``key`` if nothing is stored, else say what is there."""
        ...

    async def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """Replace the lock held by ``token`` with ``response``; False if it was lost."""
        ...

    async def release(self, key: str, token: str) -> None:
        """Drop the lock held by ``token``."""
        ...


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
    """Records under a lock, expired lazily, evicted oldest first past the bounds."""

    def __init__(self, clock: Clock | None, max_entries: int, max_bytes: int) -> None:
        for name, value in (("max_entries", max_entries), ("max_bytes", max_bytes)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ConfigurationError(f"memory idempotency store {name}={value!r}: must be >= 1")
        self._clock = clock or SystemClock()
        self._max_entries, self._max_bytes = max_entries, max_bytes
        self._records: OrderedDict[str, _Record] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        with self._lock:
            now = self._clock.now_us()
            record = self._live(key, now)
            if record is None:
                self._put(key, _Record(now + _us(lock_ttl), token, fingerprint, None))
                return Claim("acquired")
            if record.response is None:
                return Claim("in_flight", record.fingerprint)
            return Claim("done", record.fingerprint, record.response)

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        with self._lock:
            now = self._clock.now_us()
            record = self._live(key, now)
            if record is None or record.response is not None or record.token != token:
                return False
            self._put(key, _Record(now + _us(ttl), "", record.fingerprint, response))
            return key in self._records  # a response larger than max_bytes is not kept

    def release(self, key: str, token: str) -> None:
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


class MemoryIdempotencyStore:
    """Keys in this process only (one worker, or tests). Bounded by entries and bytes:
    past either bound the oldest records go first, which forgets their keys early."""

    def __init__(
        self, *, clock: Clock | None = None, max_entries: int = 10_000, max_bytes: int = 64 << 20
    ) -> None:
        self._records = _MemoryRecords(clock, max_entries, max_bytes)

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``."""
        return self._records.begin(key, fingerprint, token, lock_ttl)

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``."""
        return self._records.complete(key, token, response, ttl)

    def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``."""
        self._records.release(key, token)

    def __len__(self) -> int:
        return len(self._records)


class AsyncMemoryIdempotencyStore:
    """The asyncio shell of ``MemoryIdempotencyStore`` (no I/O: it never waits)."""

    def __init__(
        self, *, clock: Clock | None = None, max_entries: int = 10_000, max_bytes: int = 64 << 20
    ) -> None:
        self._records = _MemoryRecords(clock, max_entries, max_bytes)

    async def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``."""
        return self._records.begin(key, fingerprint, token, lock_ttl)

    async def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``."""
        return self._records.complete(key, token, response, ttl)

    async def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``."""
        self._records.release(key, token)

    def __len__(self) -> int:
        return len(self._records)


def _us(seconds: float) -> int:
    return max(math.ceil(seconds * 1_000_000), 1)


# ---------------------------------------------------------------- redis

# Records: "I <token> <fingerprint>" while in flight, "D <fingerprint> <response>" when done.
# KEYS[1] the record; ARGV[1] "I <token> " (the lock's prefix); ARGV[2] the encoded
# response; ARGV[3] its TTL in ms. Reply: 1 if the lock was ours and is now the record.
_COMPLETE = """
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  local fingerprint = string.sub(v, #ARGV[1] + 1)
  redis.call('SET', KEYS[1], 'D ' .. fingerprint .. ' ' .. ARGV[2], 'PX', ARGV[3])
  return 1
end
return 0
"""
# KEYS[1] the record; ARGV[1] the lock's prefix. Deletes it only if it is still ours.
_RELEASE = """
local v = redis.call('GET', KEYS[1])
if v and string.sub(v, 1, #ARGV[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
"""


def _lock_value(token: str, fingerprint: str) -> bytes:
    return f"I {token} {fingerprint}".encode()


def _lock_prefix(token: str) -> bytes:
    return f"I {token} ".encode()


def _claim_of(key: str, value: bytes | str) -> Claim:
    data = value.encode() if isinstance(value, str) else value
    state, _, rest = data.partition(b" ")
    try:
        if state == b"I":
            return Claim("in_flight", rest.split(b" ", 1)[1].decode())
        if state == b"D":
            fingerprint, _, payload = rest.partition(b" ")
            return Claim("done", fingerprint.decode(), StoredResponse.decode(payload))
    except (ValueError, KeyError, IndexError, TypeError):
        pass
    raise StorageError(f"idempotency record {key!r} is not ratewarden's; check the store prefix")


def _redis_errors() -> tuple[type[BaseException], ...]:
    from redis import exceptions as rx

    return (rx.RedisError, OSError)


def _storage_error(exc: BaseException) -> StorageError:
    from redis import exceptions as rx

    if isinstance(exc, rx.ConnectionError | rx.TimeoutError | OSError):
        return StorageUnavailableError(f"Redis idempotency store unavailable: {exc!r}")
    return StorageError(f"Redis idempotency store rejected a command: {exc!r}")


class _RedisShape:
    """Key naming and arguments shared by the sync and async Redis stores."""

    def __init__(self, client: Any, prefix: str) -> None:
        if not isinstance(prefix, str) or not prefix:
            raise ConfigurationError(f"idempotency store prefix={prefix!r}: a non-empty string")
        self.prefix = prefix
        self.errors = _redis_errors()
        self.complete_script = client.register_script(_COMPLETE)
        self.release_script = client.register_script(_RELEASE)


class RedisIdempotencyStore:
    """Keys in Redis (standalone, Sentinel or Cluster client from redis-py); needs Redis >= 7.0
    for ``SET NX PX GET``. Errors become ``StorageUnavailableError`` / ``StorageError``."""

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._client = client
        self._shape = _RedisShape(client, prefix)

    def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``: one ``SET NX PX GET``."""
        name = self._shape.prefix + key
        try:
            old = self._client.set(
                name, _lock_value(token, fingerprint), nx=True, px=_ms(lock_ttl), get=True
            )
        except self._shape.errors as exc:
            raise _storage_error(exc) from exc
        return Claim("acquired") if old is None else _claim_of(name, old)

    def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``: one compare-and-set script."""
        args = [_lock_prefix(token), response.encode(), _ms(ttl)]
        try:
            return bool(self._shape.complete_script([self._shape.prefix + key], args))
        except self._shape.errors as exc:
            raise _storage_error(exc) from exc

    def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``: a compare-and-delete script."""
        try:
            self._shape.release_script([self._shape.prefix + key], [_lock_prefix(token)])
        except self._shape.errors as exc:
            raise _storage_error(exc) from exc


class AsyncRedisIdempotencyStore:
    """The asyncio twin of ``RedisIdempotencyStore`` over a ``redis.asyncio`` client."""

    def __init__(self, client: Any, *, prefix: str = DEFAULT_PREFIX) -> None:
        self._client = client
        self._shape = _RedisShape(client, prefix)

    async def begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        """See ``IdempotencyStore.begin``: one ``SET NX PX GET``."""
        name = self._shape.prefix + key
        try:
            old = await self._client.set(
                name, _lock_value(token, fingerprint), nx=True, px=_ms(lock_ttl), get=True
            )
        except self._shape.errors as exc:
            raise _storage_error(exc) from exc
        return Claim("acquired") if old is None else _claim_of(name, old)

    async def complete(self, key: str, token: str, response: StoredResponse, ttl: float) -> bool:
        """See ``IdempotencyStore.complete``: one compare-and-set script."""
        args = [_lock_prefix(token), response.encode(), _ms(ttl)]
        try:
            return bool(await self._shape.complete_script([self._shape.prefix + key], args))
        except self._shape.errors as exc:
            raise _storage_error(exc) from exc

    async def release(self, key: str, token: str) -> None:
        """See ``IdempotencyStore.release``: a compare-and-delete script."""
        try:
            await self._shape.release_script([self._shape.prefix + key], [_lock_prefix(token)])
        except self._shape.errors as exc:
            raise _storage_error(exc) from exc


def _ms(seconds: float) -> int:
    return max(math.ceil(seconds * 1000), 1)
