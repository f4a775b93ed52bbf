"""What the ASGI and WSGI rate limit middlewares share, everything but the I/O."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Generic, TypeVar

from ratewarden.deprecation import UNSET
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import CircuitBreaker
from ratewarden.metrics import Metrics
from ratewarden.middleware._compiled import Compiled
from ratewarden.middleware._core import RuleSet
from ratewarden.middleware._failure import FailureAnswer, adopt_breaker, chosen_failure_mode
from ratewarden.middleware._outcome import Outcome

__all__ = ["RateLimitBase"]

#: The app a middleware wraps: an ASGI or a WSGI callable.
A = TypeVar("A")
#: The limiter it decides with: a ``Hitter`` (WSGI) or an ``AsyncHitter`` (ASGI).
H = TypeVar("H")


class RateLimitBase(Generic[A, H]):
    """The constructor of both middlewares: the checked settings, the failure mode and the
    answer to a store failure.

    ``failure_answer`` is the middleware's (its ``failure_mode``, report and HTTP
    answers); ``own_answer`` is that same answer when the limiter takes the
    failure mode with each hit (a ratewarden limiter without one of its own),
    else None.
    """

    def __init__(
        self,
        app: A,
        *,
        limiter: H,
        rules: RuleSet,
        failure_mode: str = "open",
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "middleware",
        failure: str = UNSET,
    ) -> None:
        failure_mode = chosen_failure_mode(type(self).__name__, failure_mode, failure)
        if not isinstance(rules, RuleSet):
            raise ConfigurationError(f"rules {rules!r} must be a RuleSet")
        if not callable(getattr(limiter, "hit", None)):
            raise ConfigurationError(f"limiter {limiter!r} has no hit(key, rates, cost) method")
        self.failure_answer = FailureAnswer(failure_mode, metrics, name, rules.clock)
        adopt_breaker(limiter, breaker, type(self).__name__)
        self.app = app
        self.limiter = limiter
        self.rules = rules
        self.own_answer = self.failure_answer.for_limiter(limiter)
        self._prepare()

    def _prepare(self) -> None:
        """What a middleware derives from its settings once, at the end of ``__init__``."""

    def failed(self, error: Exception, rules: Sequence[Compiled] = ()) -> Outcome:
        """A ``StorageError`` the limiter raised (a limiter that takes no failure mode): the
        failure mode's answer; ``rules`` applied (a shadow-only request is let through)."""
        enforcing = self.rules.enforces(rules) if rules else True
        return self.failure_answer.caught(error, self.limiter, enforcing)
