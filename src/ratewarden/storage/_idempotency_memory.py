"""The memory idempotency stores' records: bounded, expired lazily, and evicted oldest
first, stored responses only (the stores themselves are in ``storage.idempotency``)."""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from dataclasses import dataclass

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock, SystemClock, check_clock
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.idempotency import Claim, StoredResponse

__all__ = ["MemoryRecords"]

# What a record costs besides its response (key, token, fingerprint, objects).
_RECORD_OVERHEAD = 256


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


class MemoryRecords:
    """Records under a lock, expired lazily, evicted oldest first past the bounds.

    Only stored responses are evicted: a lock guards a request still running, and
    dropping it would let a duplicate run. A record that cannot fit without dropping a
    lock is refused (``StorageError``) and changes nothing. Everything the memory store
    and its asyncio twin do; they differ only in whether ``begin``, ``complete`` and
    ``release`` are awaited.
    """

    @keywords_checked
    def __init__(
        self, *, clock: Clock | None = None, max_entries: int = 10_000, max_bytes: int = 64 << 20
    ) -> None:
        owner = type(self).__name__
        for name, value, low in (
            ("max_entries", max_entries, 1),
            ("max_bytes", max_bytes, _RECORD_OVERHEAD),
        ):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                why = "" if low == 1 else f" (a record costs {low} bytes besides its response)"
                raise ConfigurationError(f"{owner} {name}={value!r}: must be >= {low}{why}")
        self._clock = check_clock(owner, clock) or SystemClock()
        self._max_entries, self._max_bytes = max_entries, max_bytes
        self._locks: dict[str, _Record] = {}  # requests in flight: never evicted
        self._done: OrderedDict[str, _Record] = OrderedDict()  # responses, oldest first
        self._bytes = 0
        self._lock = threading.Lock()

    @property
    def max_bytes(self) -> int:
        """The bound on the bytes of all records (responses, headers and 256 per record)."""
        return self._max_bytes

    def _begin(self, key: str, fingerprint: str, token: str, lock_ttl: float) -> Claim:
        with self._lock:
            now = self._clock.now_us()
            record = self._live(key, now)
            if record is None:
                self._put(key, _Record(now + _us(lock_ttl), token, fingerprint, None), now)
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
            try:
                self._put(key, _Record(now + _us(ttl), "", record.fingerprint, response), now)
            except StorageError:
                self._drop(key)  # not kept: the key is free, so a retry runs again
                raise
            return True

    def _release(self, key: str, token: str) -> None:
        with self._lock:
            record = self._live(key, self._clock.now_us())
            if record is not None and record.response is None and record.token == token:
                self._drop(key)

    def __len__(self) -> int:
        return len(self._locks) + len(self._done)

    def _live(self, key: str, now: int) -> _Record | None:
        record = self._locks.get(key) or self._done.get(key)
        if record is not None and record.expires_us <= now:
            self._drop(key)
            return None
        return record

    def _put(self, key: str, record: _Record, now: int) -> None:
        """Put ``record`` under ``key`` (in place of a lock there), evicting the oldest
        responses to make room; ``StorageError``, and nothing changed, if the locks of the
        requests in flight leave no room for it."""
        if not self._fits(key, record):
            self._drop_expired_locks(now)
            if not self._fits(key, record):
                raise self._full(record)
        if key in self._locks or key in self._done:
            self._drop(key)
        (self._locks if record.response is None else self._done)[key] = record
        self._bytes += record.size
        while len(self) > self._max_entries or self._bytes > self._max_bytes:
            self._drop(next(iter(self._done)))  # never the new record: _fits saw to that

    def _fits(self, key: str, record: _Record) -> bool:
        """Would ``record``, under ``key``, fit once every other response is evicted? The
        locks stay, each costing the flat overhead alone."""
        locks = len(self._locks) - (key in self._locks) + (record.response is None)
        stored = 0 if record.response is None else 1
        entries, size = locks + stored, locks * _RECORD_OVERHEAD + stored * record.size
        return entries <= self._max_entries and size <= self._max_bytes

    def _drop_expired_locks(self, now: int) -> None:
        for key in [k for k, r in self._locks.items() if r.expires_us <= now]:
            self._drop(key)

    def _full(self, record: _Record) -> StorageError:
        owner, locks = type(self).__name__, len(self._locks)
        bounds = f"max_entries={self._max_entries}, max_bytes={self._max_bytes}"
        if record.response is None:
            return StorageError(
                f"{owner} is full of requests in flight: {locks} locks ({locks * _RECORD_OVERHEAD}"
                f" bytes) leave no room for another under {bounds}; raise the bounds"
            )
        return StorageError(
            f"{owner}: a response record of {record.size} bytes does not fit {bounds} beside "
            f"{locks - 1} other requests in flight; not stored, and the key is free again "
            "(a retry runs again): raise max_bytes, or lower the middleware's max_response_bytes"
        )

    def _drop(self, key: str) -> None:
        record = self._locks.pop(key, None) or self._done.pop(key)
        self._bytes -= record.size


def _us(seconds: float) -> int:
    return max(math.ceil(seconds * 1_000_000), 1)
