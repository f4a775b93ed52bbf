"""The middlewares' failure policy: what a request gets when the limiter's store fails.

The policy is the limiter's (``ratewarden.limiter``): the rate limit middleware
hands it to a limiter that has none of its own with every hit
(``hit(..., failure=mode, on_failure=report)``), and the limiter answers a
failed or refused store call with a Decision marked ``degraded``, through its
circuit breaker, counted and logged by the ``FailureReport`` it is given. This
module maps such a decision to HTTP. A ``StorageError`` raised to a middleware
(a concurrency slot or a token budget, which the core answers by raising, or a
limiter object of your own) is reported the same way and gets the same answer.
Either way, never a 500:

- ``failure="open"`` (the default, as in Envoy's rate limit filter and in
  ``ratewarden serve``): the request goes to the app unchecked, with no
  RateLimit headers, since nothing was counted and no quota is known;
- ``failure="closed"``: 503 Service Unavailable with ``Retry-After`` (the
  breaker's next probe, rounded up, else 1 s) and a problem document, and no
  RateLimit headers. Not 429: the client is over no limit; the server cannot
  check one right now.

``metrics.degraded(rule=name, mode=..., reason=...)`` counts each such request
(``reason``: the exception's class name, or ``breaker_open``) and a warning
goes to the ``ratewarden.middleware`` logger at most once a minute per reason.
A limiter with a policy of its own (``TwoTier``: ``open`` by default, or
``local``) keeps it: its degraded decisions go through with their headers.
"""

from __future__ import annotations

import math
import warnings

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import CircuitBreaker, DecisionCore, FailureReport
from ratewarden.metrics import Metrics
from ratewarden.middleware._outcome import PASS, Outcome, refusal

__all__ = ["FAILURE_MODES", "FailurePolicy", "adopt_breaker"]

#: What a middleware does when the limiter's store fails: let the request through, or refuse it.
FAILURE_MODES = ("open", "closed")
#: ``Retry-After`` of a refusal when no breaker says when the store will be tried again.
DEFAULT_RETRY_AFTER = 1


class FailurePolicy:
    """A middleware's checked policy: its report (count and log) and its HTTP answers."""

    __slots__ = ("mode", "report")

    def __init__(self, failure: object, metrics: object, name: object, clock: Clock) -> None:
        if failure == "local":
            raise ConfigurationError(
                "the middleware's failure policy is 'open' or 'closed'; for 'local' pass a "
                "TwoTier / AsyncTwoTier with failure='local' as the limiter (it decides in "
                "this process, and answers for its store itself)"
            )
        if failure not in FAILURE_MODES:
            raise ConfigurationError(
                f"middleware failure {failure!r} must be one of {', '.join(FAILURE_MODES)}"
            )
        if metrics is not None and not isinstance(metrics, Metrics):
            raise ConfigurationError(f"middleware metrics {metrics!r} must be a Metrics")
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"middleware name {name!r} must be a non-empty string")
        self.mode = str(failure)
        self.report = FailureReport(
            self.mode, name=name, clock=clock, metrics=metrics, logger="ratewarden.middleware"
        )

    @property
    def name(self) -> str:
        """The metric's rule label and the log line's name."""
        return self.report.name

    def for_limiter(self, limiter: object) -> FailurePolicy | None:
        """This policy when ``limiter`` takes it per hit (a ratewarden limiter without a
        policy of its own), else None: the limiter answers its failures itself."""
        return self if getattr(limiter, "failure", "") is None else None

    def answer(self, decision: Decision, enforcing: bool = True) -> Outcome:
        """What a request whose hit this policy answered (``decision.degraded``) gets.

        ``enforcing`` is False when only shadow rules applied: those never block,
        so even the ``closed`` policy lets the request through.
        """
        if self.mode == "open" or not enforcing:
            return PASS
        return self._refusal(decision.retry_after)

    def caught(self, error: Exception, limiter: object = None, enforcing: bool = True) -> Outcome:
        """Report a ``StorageError`` raised to the middleware, and answer it by the policy;
        a ``limiter`` with a breaker says when the store is tried again."""
        self.report(error)
        if self.mode == "open" or not enforcing:
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
        stacklevel=3,  # the middleware's caller (adopt_breaker <- the shared __init__ <- it)
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
