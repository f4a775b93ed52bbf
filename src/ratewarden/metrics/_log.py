"""``LogRateLimiter``: at most one log line per key per interval, counting the rest."""

from __future__ import annotations

import logging
import threading
from collections import OrderedDict
from collections.abc import Mapping

from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock, SystemClock

__all__ = ["LogRateLimiter"]


class LogRateLimiter:
    """At most one log line per key per ``interval`` seconds, counting the rest.

    ``allow(key)`` says whether a line for ``key`` may be written now;
    ``suppressed(key)`` is how many were held back since the last one written.
    ``log`` does both and appends the count to the line. At most ``max_keys``
    keys are remembered (least recently allowed forgotten first). Thread-safe.

    >>> from ratewarden.testing import ManualClock
    >>> limiter = LogRateLimiter(interval=60, clock=ManualClock(0))
    >>> limiter.allow("redis down"), limiter.allow("redis down"), limiter.suppressed("redis down")
    (True, False, 1)
    """

    __slots__ = ("_clock", "_entries", "_lock", "interval", "max_keys")

    @keywords_checked
    def __init__(
        self, interval: float = 60.0, *, clock: Clock | None = None, max_keys: int = 1024
    ) -> None:
        if not interval > 0:
            raise ValueError(f"interval must be a positive number of seconds, got {interval!r}")
        if max_keys < 1:
            raise ValueError(f"max_keys must be at least 1, got {max_keys!r}")
        self.interval = float(interval)
        self.max_keys = max_keys
        self._clock: Clock = clock if clock is not None else SystemClock()
        # key -> [time of the last allowed line, lines suppressed since]
        self._entries: OrderedDict[str, list[float]] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, key: str) -> bool:
        """True if a line for ``key`` may be written now (and start a new interval)."""
        return self._take(key) >= 0

    def _take(self, key: str) -> int:
        # -1 when suppressed; otherwise the count held back before this line.
        now = self._clock.now()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and now - entry[0] < self.interval:
                entry[1] += 1
                return -1
            held_back = 0 if entry is None else int(entry[1])
            self._entries[key] = [now, 0]
            self._entries.move_to_end(key)
            while len(self._entries) > self.max_keys:
                self._entries.popitem(last=False)
            return held_back

    def suppressed(self, key: str) -> int:
        """Lines for ``key`` held back since the last one allowed."""
        with self._lock:
            entry = self._entries.get(key)
            return 0 if entry is None else int(entry[1])

    def log(
        self,
        logger: logging.Logger,
        level: int,
        key: str,
        msg: str,
        *args: object,
        extra: Mapping[str, object] | None = None,
    ) -> bool:
        """Write ``msg % args`` to ``logger`` if ``key`` is allowed; return whether it was.

        The line says how many similar lines were suppressed before it. ``extra``: the
        record's fields, as ``Logger.log`` takes them (``{"event": ...}`` for serve's lines).
        """
        held_back = self._take(key)
        if held_back < 0:
            return False
        if held_back:
            lines = "line" if held_back == 1 else "lines"
            logger.log(
                level, msg + f" (%d similar {lines} suppressed)", *args, held_back, extra=extra
            )
        else:
            logger.log(level, msg, *args, extra=extra)
        return True

    def __repr__(self) -> str:
        return f"LogRateLimiter(interval={self.interval!r}, max_keys={self.max_keys!r})"
