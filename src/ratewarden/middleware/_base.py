"""What the rate limit middlewares (ASGI, WSGI, Django) share, everything but the I/O."""

from __future__ import annotations

from collections.abc import Sequence
from inspect import iscoroutinefunction
from typing import Any, ClassVar, Generic, TypeVar

from ratewarden.checks import keywords_checked
from ratewarden.deprecation import UNSET
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import CircuitBreaker
from ratewarden.metrics import Metrics
from ratewarden.middleware._compiled import Compiled, drive_async
from ratewarden.middleware._core import RuleSet
from ratewarden.middleware._failure import (
    OPEN,
    FailureAnswer,
    adopt_breaker,
    chosen_failure_mode,
)
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware._request import RequestInfo

__all__ = ["RateLimitBase", "limiter_problem"]

#: The app a middleware wraps: an ASGI or a WSGI callable.
A = TypeVar("A")
#: The limiter it decides with: a ``Hitter`` (WSGI) or an ``AsyncHitter`` (ASGI); either for
#: the Django middleware, by its mode.
H = TypeVar("H")


def _kind(awaited: bool) -> str:
    if awaited:
        return "an AsyncLimiter or AsyncTwoTier (over an AsyncStore such as AsyncRedisStore)"
    return "a Limiter or TwoTier (over a Store such as RedisStore)"


def limiter_problem(limiter: object, awaited: bool, *, kind: bool = True) -> str | None:
    """What makes ``limiter`` no limiter for a middleware that awaits its hit (``awaited``)
    or calls it, said after its name and ending with what to give; None when it will do.

    Refused: a class (``Limiter`` for ``Limiter(store)``), one of ratewarden's stores (its
    ``hit`` takes an algorithm first), no ``hit``, and with ``kind`` a hit of the other kind:
    a coroutine function for a middleware that calls it, or one of ratewarden's blocking
    limiters for one that awaits it (a plain ``hit`` of the caller's may hand back
    awaitables, as a wrapper does, and is taken)."""
    use = f"give {_kind(awaited)}"
    if isinstance(limiter, type):
        example = "AsyncLimiter(AsyncRedisStore.from_url(url))" if awaited else "Limiter(store)"
        return f"is the class {limiter.__name__}, not a limiter: {use}, an instance: {example}"
    name = type(limiter).__name__
    if type(limiter).__module__.startswith("ratewarden.storage"):
        return f"is {'an' if name[:1] in 'AEIOU' else 'a'} {name}, a store, not a limiter: {use}"
    hit = getattr(limiter, "hit", None)
    if not callable(hit):
        return f"has no hit(key, rates, cost) method: {use}"
    if not kind or iscoroutinefunction(hit) == awaited:
        return None
    if not awaited:
        return f"has a hit that is awaited, and this middleware calls it: {use}"
    if (getattr(hit, "__module__", None) or "").startswith("ratewarden."):
        return f"has a hit that blocks, and this middleware awaits it: {use}"
    return None


class RateLimitBase(Generic[A, H]):
    """The constructor of the middlewares: the checked settings, the failure mode and the
    answer to a store failure; the decision over an awaited limiter.

    ``failure_answer`` is the middleware's (its ``failure_mode``, report and HTTP
    answers); ``own_answer`` is that same answer when the limiter takes the
    failure mode with each hit (a ratewarden limiter without one of its own),
    else None.
    """

    #: An awaited limiter's ``hit_now`` (an ``AsyncLimiter`` whose store decides in this
    #: process), set by a middleware that awaits its limiter: ``decide_awaited`` calls it
    #: without an await. None: each hit is awaited.
    _now: Any = None

    #: Whether ``__init__`` refuses a limiter whose hit is of the other kind (blocking or
    #: awaited). The Django middleware refuses it itself, in the words of its mode.
    _checks_kind: ClassVar[bool] = True

    @keywords_checked
    def __init__(
        self,
        app: A,
        *,
        limiter: H,
        rules: RuleSet | None = None,
        failure_mode: str = OPEN,
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "middleware",
        failure: str = UNSET,
    ) -> None:
        failure_mode = chosen_failure_mode(
            type(self).__name__,
            failure_mode,
            failure,
            stacklevel=5,  # past the keyword check
        )
        if rules is None:
            raise ConfigurationError(
                f"{type(self).__name__} needs rules=: the rules it applies, e.g. "
                "rules=RuleSet([Rule('per-ip', '100/minute')])"
            )
        if not isinstance(rules, RuleSet):
            raise ConfigurationError(f"rules {rules!r} must be a RuleSet")
        problem = limiter_problem(limiter, self._awaits_limiter(), kind=self._checks_kind)
        if problem is not None:
            # Not a string's text: a Redis URL given by mistake may hold a password.
            shown = "a str" if isinstance(limiter, str) else repr(limiter)
            raise ConfigurationError(f"{type(self).__name__} limiter={shown} {problem}")
        self.failure_answer = FailureAnswer(failure_mode, metrics, name, rules.clock)
        adopt_breaker(limiter, breaker, type(self).__name__)
        self.app = app
        self.limiter = limiter
        self.rules = rules
        self.own_answer = self.failure_answer.for_limiter(limiter)
        self._prepare()

    def _awaits_limiter(self) -> bool:
        """Whether the limiter's hit is awaited: it is by a middleware that is itself awaited
        (an ASGI middleware's ``async def __call__``)."""
        return iscoroutinefunction(type(self).__call__)

    def _prepare(self) -> None:
        """What a middleware derives from its settings once, at the end of ``__init__``."""

    async def decide_awaited(self, request: RequestInfo, rules: Sequence[Compiled]) -> Outcome:
        """``rules`` decided over an awaited limiter (``AsyncLimiter``, ``AsyncTwoTier``), on
        the event loop: at once through ``_now`` when the limiter decides in this process,
        else each hit awaited; a ``StorageError`` gets the failure mode's answer. The ASGI
        middleware's general path, and the Django middleware's in async mode."""
        own, now = self.own_answer, self._now
        try:
            if now is not None:
                return self.rules.decide(request, rules, now, own)
            limiter: Any = self.limiter
            return await drive_async(self.rules.run(request, rules, own), limiter, own)
        except StorageError as exc:
            return self.failed(exc, rules)

    def failed(self, error: Exception, rules: Sequence[Compiled] = ()) -> Outcome:
        """A ``StorageError`` the limiter raised (a limiter that takes no failure mode): the
        failure mode's answer; ``rules`` applied (a shadow-only request is let through)."""
        enforcing = self.rules.enforces(rules) if rules else True
        return self.failure_answer.caught(error, self.limiter, enforcing)
