"""``WSGIRateLimitMiddleware``: the WSGI twin of the ASGI middleware, for Flask and Django.

::

    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=Limiter(store),
                                           rules=RuleSet(rules, resolver=flask_endpoint(app)))
    application = WSGIRateLimitMiddleware(get_wsgi_application(), limiter=Limiter(store),
                                          rules=RuleSet(rules, resolver=django_endpoint))

Everything but the I/O is the shared core: the same rules, identity, headers,
shadow report and kill switch. Route metadata needs the framework's resolver
(WSGI has no standard way to find a view), passed in the ``RuleSet``. So is
the failure policy when the limiter's store fails (``_failure``): never a 500.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.metrics import Metrics
from ratewarden.middleware._core import Hitter, Outcome, RuleSet
from ratewarden.middleware._failure import FailurePolicy, Unavailable
from ratewarden.middleware._request import from_wsgi
from ratewarden.tiers import CircuitBreaker

__all__ = ["WSGIRateLimitMiddleware"]

StartResponse = Callable[..., Any]
WSGIApp = Callable[[dict[str, Any], StartResponse], Iterable[bytes]]


class WSGIRateLimitMiddleware:
    """Limit requests to a WSGI ``app`` by the ``rules``, deciding with ``limiter``.

    ``limiter`` is anything with ``hit(key, rates, cost, *, shadow) -> Decision``: a
    ``Limiter``, or a two-tier limiter. ``failure``, ``breaker``, ``metrics`` and
    ``name``: the failure policy, as ``RateLimitMiddleware``'s.
    """

    def __init__(
        self,
        app: WSGIApp,
        *,
        limiter: Hitter,
        rules: RuleSet,
        failure: str = "open",
        breaker: CircuitBreaker | None = None,
        metrics: Metrics | None = None,
        name: str = "middleware",
    ) -> None:
        if not isinstance(rules, RuleSet):
            raise ConfigurationError(f"rules {rules!r} must be a RuleSet")
        if not callable(getattr(limiter, "hit", None)):
            raise ConfigurationError(f"limiter {limiter!r} has no hit(key, rates, cost) method")
        self.app = app
        self.limiter = limiter
        self.rules = rules
        self.failure_policy = FailurePolicy(failure, breaker, metrics, name, rules.clock)
        # What decides: the limiter, behind the breaker when there is one.
        self._limiter = self.failure_policy.guard(limiter)

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = from_wsgi(environ)
        rules = self.rules.applicable(request)
        if not rules:
            return self.app(environ, start_response)
        outcome: Outcome
        try:
            outcome = self.rules.decide(request, rules, self._limiter.hit)
        except StorageError as exc:
            outcome = self.failure_policy.answer(exc, self.rules.enforces(rules))
        if outcome.blocked:
            status = (
                "503 Service Unavailable"
                if isinstance(outcome, Unavailable)
                else "429 Too Many Requests"
            )
            start_response(status, list(outcome.headers))
            # A HEAD gets the headers (Content-Length included) and no body.
            return [b""] if environ.get("REQUEST_METHOD") == "HEAD" else [outcome.body]
        if not outcome.headers:
            return self.app(environ, start_response)
        extra = list(outcome.headers)

        def start_with_headers(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            return start_response(status, [*headers, *extra], exc_info)

        return self.app(environ, start_with_headers)
