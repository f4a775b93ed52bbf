"""RetryBudget: one allowance of retries shared by every transport given it.

A token bucket of retries. Every request a transport sends (its first attempt)
deposits ``ratio`` of a token; time adds ``min_per_second`` tokens a second, the
floor for a client that sends little; the balance never passes ``burst``. A retry
needs a whole token and takes it. So over any stretch of ``T`` seconds in which
the transports sharing the budget send ``n`` requests, at most

    burst + ratio * n + min_per_second * T

retries are granted: what the stretch began with (at most ``burst``) plus what it
put in. The balance is kept in whole units of 10**-12 tokens and time in whole
microseconds, so the bound holds exactly rather than up to rounding: a deposit or
refill that is not a whole unit is rounded down.
"""

from __future__ import annotations

import logging
import threading
from fractions import Fraction

from ratewarden.checks import is_number, keywords_checked
from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError
from ratewarden.metrics import LogRateLimiter

__all__ = ["RetryBudget"]

log = logging.getLogger("ratewarden.client")

#: Units of balance in one token (one retry).
_UNIT = 10**12
_US = 1_000_000


def _units(name: str, value: object, *, low: float, high: float | None = None) -> int:
    """``value`` tokens in whole units (rounded down), after checking it is a number in range."""
    if not is_number(value, low) or (high is not None and value > high):
        span = f"from {low:g} to {high:g}" if high is not None else f"{low:g} or more"
        raise ConfigurationError(f"RetryBudget.{name}={value!r}: must be a finite number {span}")
    return int(Fraction(value) * _UNIT)  # exact: a float's Fraction is its true value


class RetryBudget:
    """Retries for a whole client, as a share of its requests plus a small floor. Thread-safe.

    - ``ratio``: tokens each request deposits (0 to 1; default 0.1, one retry per ten
      requests).
    - ``min_per_second``: tokens added per second of ``clock`` time (default 1), so that a
      client sending little can still retry.
    - ``burst``: the most tokens kept, and the balance it starts with (at least 1;
      default 10).
    - ``clock``: where time comes from (``ratewarden.clock.Clock``; a ``ManualClock`` in
      tests).

    Give the same budget to every transport or adapter whose retries it should bound. A
    retry refused by it is not sent: the request ends with its last answer. Refusals are
    counted (``refused``) and logged on ``ratewarden.client`` at WARNING, one line a minute.
    Nothing in it blocks or awaits, so asyncio transports share it with threads.
    """

    __slots__ = (
        "_balance",
        "_cap",
        "_clock",
        "_deposit",
        "_last_us",
        "_lock",
        "_logs",
        "_refill_per_us",
        "_refused",
        "_requests",
        "_retries",
        "burst",
        "min_per_second",
        "ratio",
    )

    @keywords_checked
    def __init__(
        self,
        ratio: float = 0.1,
        min_per_second: float = 1.0,
        burst: float = 10.0,
        *,
        clock: Clock | None = None,
    ) -> None:
        self._deposit = _units("ratio", ratio, low=0.0, high=1.0)
        self._refill_per_us = _units("min_per_second", min_per_second, low=0.0) // _US
        self._cap = _units("burst", burst, low=1.0)
        self.ratio = float(ratio)
        self.min_per_second = float(min_per_second)
        self.burst = float(burst)
        if clock is not None and not isinstance(clock, Clock):
            raise ConfigurationError(f"RetryBudget.clock={clock!r}: pass a ratewarden.clock.Clock")
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._lock = threading.Lock()
        self._logs = LogRateLimiter(60.0, clock=self._clock, max_keys=1)
        self._balance = self._cap
        self._last_us = self._clock.now_us()
        self._requests = self._retries = self._refused = 0

    def _refill(self) -> None:
        # Under the lock. A clock that stepped back credits nothing, and counts on from there.
        now_us = self._clock.now_us()
        elapsed = now_us - self._last_us
        if elapsed > 0:
            self._balance = min(self._cap, self._balance + elapsed * self._refill_per_us)
        self._last_us = now_us

    def deposit(self) -> None:
        """A request went out (its first attempt): credit ``ratio`` of a token."""
        with self._lock:
            self._refill()
            self._requests += 1
            self._balance = min(self._cap, self._balance + self._deposit)

    def withdraw(self) -> bool:
        """May one retry go? True takes a token; False (empty) counts and logs the refusal."""
        with self._lock:
            self._refill()
            if self._balance >= _UNIT:
                self._balance -= _UNIT
                self._retries += 1
                return True
            self._refused += 1
            refused, requests, retries = self._refused, self._requests, self._retries
        self._logs.log(
            log,
            logging.WARNING,
            "empty",
            "retry budget empty: a retry was not sent and its request ended with its last "
            "answer (%d refused, %d retries granted to %d requests so far; %r)",
            refused,
            retries,
            requests,
            self,
        )
        return False

    @property
    def balance(self) -> float:
        """Retries that could go now (tokens, a fraction included)."""
        with self._lock:
            self._refill()
            return self._balance / _UNIT

    @property
    def requests(self) -> int:
        """Requests that deposited (first attempts sent)."""
        return self._requests

    @property
    def retries(self) -> int:
        """Retries granted."""
        return self._retries

    @property
    def refused(self) -> int:
        """Retries refused because the budget was empty."""
        return self._refused

    def __repr__(self) -> str:
        return (
            f"RetryBudget(ratio={self.ratio:g}, min_per_second={self.min_per_second:g}, "
            f"burst={self.burst:g})"
        )
