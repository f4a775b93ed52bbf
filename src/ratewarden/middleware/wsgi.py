"""``WSGIRateLimitMiddleware``: the WSGI twin of the ASGI middleware, for Flask and Django.

::

    app.wsgi_app = WSGIRateLimitMiddleware(app.wsgi_app, limiter=Limiter(store),
                                           rules=RuleSet(rules, resolver=flask_endpoint(app)))
    application = WSGIRateLimitMiddleware(get_wsgi_application(), limiter=Limiter(store),
                                          rules=RuleSet(rules, resolver=django_endpoint))

Everything but the I/O is the shared core: the same rules, identity, headers,
shadow report and kill switch. Route metadata needs the framework's resolver
(WSGI has no standard way to find a view), passed in the ``RuleSet``. So is
the failure mode when the limiter's store fails (``_failure``): never a 500.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from ratewarden.errors import StorageError
from ratewarden.middleware._base import RateLimitBase
from ratewarden.middleware._compiled import Hitter
from ratewarden.middleware._outcome import Outcome, send_wsgi
from ratewarden.middleware._request import from_wsgi
from ratewarden.middleware._types import StartResponse, WSGIApp

__all__ = ["WSGIRateLimitMiddleware"]


class WSGIRateLimitMiddleware(RateLimitBase[WSGIApp, Hitter]):
    """Limit requests to a WSGI ``app`` by the ``rules``, deciding with ``limiter``.

    ``limiter`` is anything with ``hit(key, rates, cost, *, shadow) -> Decision``: a
    ``Limiter``, or a two-tier limiter. ``failure_mode``, ``metrics`` and ``name``
    (``failure`` and ``breaker`` deprecated): as ``RateLimitMiddleware``'s.
    """

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = from_wsgi(environ)
        rules = self.rules.applicable(request)
        if not rules:
            return self.app(environ, start_response)
        outcome: Outcome
        try:
            outcome = self.rules.decide(request, rules, self.limiter.hit, self.own_answer)
        except StorageError as exc:
            outcome = self.failed(exc, rules)
        if outcome.blocked:
            return send_wsgi(start_response, outcome, head=environ.get("REQUEST_METHOD") == "HEAD")
        if not outcome.headers:
            return self.app(environ, start_response)
        extra = list(outcome.headers)

        def start_with_headers(
            status: str, headers: list[tuple[str, str]], exc_info: Any = None
        ) -> Any:
            return start_response(status, [*headers, *extra], exc_info)

        return self.app(environ, start_with_headers)
