"""The rate limit middlewares' failure policy: what a request gets when the limiter's store fails.

A ``StorageError`` from the limiter (``StorageUnavailableError``: the store is
down, slower than its timeout, refusing) never becomes a 500:

- ``failure="open"`` (the default, as in Envoy's rate limit filter and in
  ``ratewarden serve``): the request goes to the app unchecked, with no
  RateLimit headers, since nothing was counted and no quota is known;
- ``failure="closed"``: the middleware answers 503 Service Unavailable with
  ``Retry-After`` and a problem document, and no RateLimit headers. Not 429:
  the client is over no limit; the server cannot check one right now.

Either way ``metrics.degraded(rule=name, mode=..., reason=...)`` counts the
request (``reason`` is the exception's class name, or ``breaker_open``), and a
warning goes to the ``ratewarden.middleware`` logger at most once a minute per
reason, saying how many similar lines it held back. The words are the two-tier
limiter's (``ratewarden.tiers``), whose ``local`` mode needs a limiter of its
own: pass an ``AsyncTwoTier`` / ``TwoTier`` with ``failure="local"`` as the
middleware's limiter for that. Its ``CircuitBreaker`` can also stand in front of
a plain limiter here (``breaker=``): while it is open, requests take the policy
without a store call.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from typing import Any

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError, StorageError, StorageUnavailableError
from ratewarden.metrics import NO_METRICS, LogRateLimiter, Metrics
from ratewarden.middleware._core import AsyncHitter, Hitter, Outcome
from ratewarden.rate import Rate
from ratewarden.tiers import CircuitBreaker

__all__ = [
    "FAILURE_MODES",
    "AsyncBreakerLimiter",
    "BreakerLimiter",
    "FailurePolicy",
    "Unavailable",
]

log = logging.getLogger("ratewarden.middleware")

#: What the middleware does when the limiter's store fails: let the request through, or refuse it.
FAILURE_MODES = ("open", "closed")
#: Seconds between two warnings for the same reason (the lines in between are counted).
LOG_INTERVAL = 60.0
#: ``Retry-After`` of a refusal when no breaker says when the store will be tried again.
DEFAULT_RETRY_AFTER = 1


class Unavailable(Outcome):
    """The ``closed`` policy's refusal: answered 503, not 429 (see the module docstring)."""

    __slots__ = ()


class BreakerOpenError(StorageUnavailableError):
    """The circuit breaker is open: the store was not asked."""


class FailurePolicy:
    """The checked settings, the counting and the logging; the middlewares do the I/O."""

    __slots__ = ("_log", "breaker", "metrics", "mode", "name")

    def __init__(
        self,
        failure: object,
        breaker: object,
        metrics: object,
        name: object,
        clock: Clock,
    ) -> None:
        if failure == "local":
            raise ConfigurationError(
                "the middleware's failure policy is 'open' or 'closed'; for 'local' pass a "
                "TwoTier / AsyncTwoTier with failure='local' as the limiter (it decides in "
                "this process, and the middleware never sees the store fail)"
            )
        if failure not in FAILURE_MODES:
            raise ConfigurationError(
                f"middleware failure {failure!r} must be one of {', '.join(FAILURE_MODES)}"
            )
        if breaker is not None and not isinstance(breaker, CircuitBreaker):
            raise ConfigurationError(f"middleware breaker {breaker!r} must be a CircuitBreaker")
        if metrics is not None and not isinstance(metrics, Metrics):
            raise ConfigurationError(f"middleware metrics {metrics!r} must be a Metrics")
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"middleware name {name!r} must be a non-empty string")
        self.mode = str(failure)
        self.breaker: CircuitBreaker | None = breaker
        self.metrics: Metrics = metrics if metrics is not None else NO_METRICS
        self.name = name
        self._log = LogRateLimiter(LOG_INTERVAL, clock=clock)

    def guard_async(self, limiter: AsyncHitter) -> AsyncHitter:
        """``limiter`` behind the breaker, if there is one."""
        if self.breaker is None:
            return limiter
        return AsyncBreakerLimiter(limiter, self.breaker)

    def guard(self, limiter: Hitter) -> Hitter:
        """``limiter`` behind the breaker, if there is one."""
        if self.breaker is None:
            return limiter
        return BreakerLimiter(limiter, self.breaker)

    def answer(self, exc: StorageError, enforcing: bool = True) -> Outcome:
        """Count and log a request the policy answers, and what it gets.

        ``enforcing`` is False when only shadow rules applied: those never block,
        so even the ``closed`` policy lets the request through.
        """
        reason = "breaker_open" if isinstance(exc, BreakerOpenError) else type(exc).__name__
        self.metrics.degraded(rule=self.name, mode=self.mode, reason=reason)
        self._log.log(
            log,
            logging.WARNING,
            reason,
            "ratewarden middleware %r: the limiter's store failed (%s: %s); failure policy %r "
            "answers",
            self.name,
            reason,
            exc,
            self.mode,
        )
        if self.mode == "open" or not enforcing:
            return Outcome(False)
        retry = self.retry_after()
        body = json.dumps(
            {
                "type": "about:blank",
                "title": "Service Unavailable",
                "status": 503,
                "detail": f"The rate limiter cannot check requests now; retry in {retry} s.",
                "retry_after": retry,
            },
            separators=(",", ":"),
        ).encode()
        headers = (
            ("Retry-After", str(retry)),
            ("Cache-Control", "no-store"),
            ("Content-Type", "application/problem+json"),
            ("Content-Length", str(len(body))),
        )
        return Unavailable(True, headers, body)

    def retry_after(self) -> int:
        """Whole seconds until the store is tried again: the breaker's next probe, else 1."""
        breaker = self.breaker
        if breaker is None:
            return DEFAULT_RETRY_AFTER
        return max(1, math.ceil(breaker.retry_in() or breaker.cooldown))


class _Breaking:
    """What both breaker wrappers share: the gate and its bookkeeping."""

    __slots__ = ("_breaker", "_limiter")

    def __init__(self, limiter: Any, breaker: CircuitBreaker) -> None:
        self._limiter = limiter
        self._breaker = breaker

    def _enter(self) -> None:
        if not self._breaker.allow():
            raise BreakerOpenError(
                f"circuit breaker {self._breaker.name!r} is open; "
                f"the store is tried again in {self._breaker.retry_in():g} s"
            )

    def _call(self, call: Callable[..., Decision], *args: Any, **kwargs: Any) -> Decision:
        self._enter()
        breaker = self._breaker
        try:
            decision = call(*args, **kwargs)
        except StorageError:
            breaker.failure()
            raise
        except BaseException:
            breaker.abandon()
            raise
        breaker.success()
        return decision


class BreakerLimiter(_Breaking):
    """A synchronous limiter behind a circuit breaker (``Hitter``)."""

    __slots__ = ()

    def hit(
        self, key: str, rates: Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        """The limiter's ``hit``, or ``BreakerOpenError`` while the breaker is open."""
        return self._call(self._limiter.hit, key, rates, cost, shadow=shadow)


class AsyncBreakerLimiter(_Breaking):
    """An asyncio limiter behind a circuit breaker (``AsyncHitter``, with ``hit_now`` if it has)."""

    __slots__ = ("hit_now",)

    def __init__(self, limiter: Any, breaker: CircuitBreaker) -> None:
        super().__init__(limiter, breaker)
        now = getattr(limiter, "hit_now", None)
        self.hit_now: Callable[..., Decision] | None = (
            None if now is None else lambda *a, **k: self._call(now, *a, **k)
        )

    async def hit(
        self, key: str, rates: Sequence[Rate], cost: int = 1, *, shadow: bool = False
    ) -> Decision:
        """The limiter's ``hit``, or ``BreakerOpenError`` while the breaker is open."""
        self._enter()
        breaker = self._breaker
        try:
            decision: Decision = await self._limiter.hit(key, rates, cost, shadow=shadow)
        except StorageError:
            breaker.failure()
            raise
        except BaseException:
            breaker.abandon()
            raise
        breaker.success()
        return decision
