"""The middlewares' failure mode: what a request gets when the limiter's store fails.

The failure mode is the limiter's (``ratewarden.limiter``): the rate limit
middleware hands its own to a limiter that has none with every hit
(``hit(..., failure_mode=..., on_failure=report)``), and the limiter answers a
failed or refused store call with a Decision marked ``degraded``, through its
circuit breaker, counted and logged by the ``FailureReport`` it is given. This
module maps such a decision to HTTP (``FailureAnswer``). A ``StorageError`` raised to a middleware
(a concurrency slot or a token budget, which the core answers by raising, or a
limiter object of your own) is reported the same way and gets the same answer.
Either way, never a 500:

- ``failure_mode="open"`` (the default, as in Envoy's rate limit filter and in
  ``ratewarden serve``): the request goes to the app unchecked, with no
  RateLimit headers, since nothing was counted and no quota is known;
- ``failure_mode="closed"``: 503 Service Unavailable with ``Retry-After`` (the
  breaker's next probe, rounded up, else 1 s) and a problem document, and no
  RateLimit headers. Not 429: the client is over no limit; the server cannot
  check one right now.

``metrics.degraded(rule=name, failure_mode=..., reason=...)`` counts each such
request (``reason``: the exception's class name, or ``breaker_open``) and a
warning goes to the ``ratewarden.middleware`` logger at most once a minute per
reason. A limiter with a failure mode of its own (``TwoTier``: ``open`` by
default, or ``local``) keeps it: its degraded decisions go through with their
headers.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

from ratewarden import deprecation
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.deprecation import renamed
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import (
    FAILURE_MODES,
    CircuitBreaker,
    DecisionCore,
    FailureReport,
    check_metrics,
)
from ratewarden.middleware._outcome import PASS, Outcome, refusal

__all__ = [
    "MIDDLEWARE_FAILURE_MODES",
    "OPEN",
    "FailureAnswer",
    "adopt_breaker",
    "chosen_failure_mode",
]

#: What a middleware does when the limiter's store fails: let the request through, or refuse it.
#: Not ``local``: deciding in this process takes a limiter of its own (a ``TwoTier``).
MIDDLEWARE_FAILURE_MODES = tuple(mode for mode in FAILURE_MODES if mode != "local")
#: ``Retry-After`` of a refusal when no breaker says when the store will be tried again.
DEFAULT_RETRY_AFTER = 1


#: The default of a middleware's ``failure_mode``: ``open`` when it was not given, told apart
#: from ``failure_mode="open"`` given beside the deprecated ``failure=`` (both: refused).
OPEN: Any = deprecation.OPEN


def chosen_failure_mode(who: str, failure_mode: str, failure: str, *, stacklevel: int = 4) -> str:
    """A middleware's ``failure_mode``, or the value of ``failure``, its deprecated name (one
    release), given instead: the DeprecationWarning names ``who`` and the line that made it
    (``stacklevel`` 4 from ``renamed``: the caller's caller; 5 past a keyword check too).
    Both given is refused, whatever ``failure_mode`` says; left out (``OPEN``), it is open."""
    found = renamed(
        who, "failure", "failure_mode", failure, failure_mode, OPEN, stacklevel=stacklevel
    )
    return "open" if found is OPEN else found


class FailureAnswer:
    """A middleware's checked failure mode: its report (count and log) and its HTTP answers."""

    __slots__ = ("failure_mode", "report")

    def __init__(self, failure_mode: object, metrics: object, name: object, clock: Clock) -> None:
        if failure_mode == "local":
            raise ConfigurationError(
                "the middleware's failure_mode is 'open' or 'closed'; for 'local' pass a "
                "TwoTier / AsyncTwoTier with failure_mode='local' as the limiter (it decides "
                "in this process, and answers for its store itself)"
            )
        if failure_mode not in MIDDLEWARE_FAILURE_MODES:
            raise ConfigurationError(
                f"middleware failure_mode {failure_mode!r} must be one of "
                f"{', '.join(MIDDLEWARE_FAILURE_MODES)}"
            )
        metrics = check_metrics("middleware", metrics, ("degraded",))
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"middleware name {name!r} must be a non-empty string")
        self.failure_mode = str(failure_mode)
        self.report = FailureReport(
            self.failure_mode,
            name=name,
            clock=clock,
            metrics=metrics,
            logger="ratewarden.middleware",
        )

    @property
    def name(self) -> str:
        """The metric's rule label and the log line's name."""
        return self.report.name

    def for_limiter(self, limiter: object) -> FailureAnswer | None:
        """This answer when ``limiter`` takes its failure mode per hit (a ratewarden limiter
        without one of its own), else None: the limiter answers its failures itself."""
        return self if getattr(limiter, "failure_mode", "") is None else None

    def answer(self, decision: Decision, enforcing: bool = True) -> Outcome:
        """What a request whose hit this failure mode answered (``decision.degraded``) gets.

        ``enforcing`` is False when only shadow rules applied: those never block,
        so even ``closed`` lets the request through.
        """
        if self.failure_mode == "open" or not enforcing:
            return PASS
        return self._refusal(decision.retry_after)

    def caught(self, error: Exception, limiter: object = None, enforcing: bool = True) -> Outcome:
        """Report a ``StorageError`` raised to the middleware, and answer it by the failure
        mode; a ``limiter`` with a breaker says when the store is tried again."""
        self.report(error)
        if self.failure_mode == "open" or not enforcing:
            return PASS
        breaker = getattr(limiter, "breaker", None)
        wait = 0.0
        if isinstance(breaker, CircuitBreaker):
            wait = breaker.retry_in() or breaker.cooldown
        return self._refusal(wait)

    @staticmethod
    def _refusal(wait: float) -> Outcome:
        retry = max(DEFAULT_RETRY_AFTER, math.ceil(wait)) if math.isfinite(wait) else 1
        detail = f"The rate limiter cannot check requests now; retry in {retry} s."
        return refusal(503, detail, retry_after=retry, extra={"retry_after": retry})


def adopt_breaker(limiter: object, breaker: object, who: str) -> None:
    """The deprecated ``breaker=`` of a middleware: it becomes the limiter's own breaker.

    The breaker guards the store, and the limiter is what calls the store, so it
    belongs there (``AsyncLimiter(store, breaker=...)``); a middleware given one
    puts it on a limiter that has none, with a DeprecationWarning.
    """
    if breaker is None:
        return
    if not isinstance(breaker, CircuitBreaker):
        raise ConfigurationError(f"middleware breaker {breaker!r} must be a CircuitBreaker")
    warnings.warn(
        f"{who}(breaker=...) is deprecated: give the limiter its breaker, "
        "e.g. AsyncLimiter(store, breaker=CircuitBreaker(...))",
        DeprecationWarning,
        # the middleware's caller: adopt_breaker <- the shared __init__ <- its keyword check <- it
        stacklevel=4,
    )
    if not isinstance(limiter, DecisionCore):
        raise ConfigurationError(
            f"{who}(breaker=...) puts the breaker on a ratewarden limiter; {limiter!r} is not "
            "one: guard its store yourself"
        )
    if limiter.breaker is None:
        limiter.breaker = breaker
        limiter.plain = False  # every hit now goes through the breaker
    elif limiter.breaker is not breaker:
        raise ConfigurationError(
            f"{who}(breaker=...): the limiter has a breaker of its own ({limiter.breaker!r}); "
            "pass none to the middleware"
        )
