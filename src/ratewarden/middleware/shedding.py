"""Load shedding from the middleware: under load, the lowest traffic classes are refused first.

::

    app.add_middleware(SheddingMiddleware,
                       shedder=AsyncFleetShedder(AsyncLimiter(store), "api", capacity=200),
                       classify=class_from_header("x-priority"), paths=["/v1/**"])
    app.wsgi_app = WSGISheddingMiddleware(app.wsgi_app,
                                          shedder=FleetShedder(Limiter(store), "api", 200))

Each selected request is given a traffic class of the shedder's ``ShedPolicy``
(``classify``; ``default`` when it names none) and asked of the shedder:

- a ``FleetShedder`` (WSGI) or ``AsyncFleetShedder`` (ASGI) takes one slot of the
  fleet-wide in-flight count, under the class's ceiling, before the app runs,
  and gives it back when the response is over (on ASGI after the last body
  message, on WSGI once the server has taken the last chunk or closed the
  response), renewing it while a
  long response streams: the concurrency middleware's holding, shared;
- a ``LoadShedder`` reads the utilization the app reports and admits or sheds
  the request; nothing is held.

A shed request gets ``status`` (503, or 429) with ``Retry-After`` and a
problem document naming its class, the utilization and the class's ceiling;
the app never runs. When the store cannot be asked (or the utilization
cannot be read), the failure mode answers: ``open`` (the default) runs the
app without a slot, ``closed`` answers 503; never a 500.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, ClassVar, Generic, TypeVar

from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder, ShedDecision
from ratewarden.checks import keywords_checked
from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Lease
from ratewarden.metrics import Metrics
from ratewarden.middleware._holding import hold_asgi, hold_wsgi
from ratewarden.middleware._outcome import Outcome, send_asgi, send_wsgi
from ratewarden.middleware._request import RequestInfo, from_asgi, from_wsgi
from ratewarden.middleware._shedding import ClassFunc, Shedding, class_from_header
from ratewarden.middleware._types import ASGIApp, Receive, Scope, Send, StartResponse, WSGIApp

__all__ = ["ClassFunc", "SheddingMiddleware", "WSGISheddingMiddleware", "class_from_header"]

#: The app a middleware wraps (ASGI or WSGI) and the fleet shedder that goes with it.
A = TypeVar("A")
F = TypeVar("F", FleetShedder, AsyncFleetShedder)


class _SheddingBase(Generic[A, F]):
    """The constructor both middlewares share: the app, the shedder, the options."""

    _fleet: ClassVar[type]
    _hint: ClassVar[str]

    @keywords_checked
    def __init__(
        self,
        app: A,
        *,
        shedder: F | LoadShedder,
        classify: ClassFunc | None = None,
        default: str | None = None,
        name: str = "shed",
        status: int = 503,
        retry_after: int = 1,
        paths: Iterable[str] | str | None = None,
        methods: Iterable[str] | str | None = None,
        clock: Clock | None = None,
        failure_mode: str = "open",
        metrics: Metrics | None = None,
    ) -> None:
        if not isinstance(shedder, LoadShedder | self._fleet):
            raise ConfigurationError(
                f"{type(self).__name__} shedder={shedder!r}: {self._hint}, or a LoadShedder"
            )
        self.app = app
        self.shedder: F | LoadShedder = shedder
        self.shedding = Shedding(
            shedder,
            classify=classify,
            default=default,
            name=name,
            status=status,
            retry_after=retry_after,
            paths=paths,
            methods=methods,
            clock=clock,
            failure_mode=failure_mode,
            metrics=metrics,
        )


class SheddingMiddleware(_SheddingBase[ASGIApp, AsyncFleetShedder]):
    """ASGI: shed the lowest traffic classes first under load.

    - ``shedder``: an ``AsyncFleetShedder`` (a slot of the fleet's in-flight count,
      held for the whole response) or a ``LoadShedder`` (the utilization the app
      reports; its callable runs on the event loop, so keep it quick).
    - ``classify``: ``(request) -> class name | None``; ``class_from_header`` reads a
      trusted header. None: every request is ``default``.
    - ``default``: the class of requests ``classify`` names none for (the policy's
      second class, ``normal`` in the default policy, when None).
    - ``status`` (503 or 429) and ``retry_after`` (whole seconds; 0 leaves the header
      out) of a shed request; ``paths`` / ``methods``: which requests are subject to
      shedding (all by default).
    - ``failure_mode``: ``"open"`` or ``"closed"``, when the store fails (or the
      utilization cannot be read); ``metrics`` counts those requests (``degraded``,
      rule ``name``), logged on ``clock`` at most once a minute per reason.
    """

    _fleet = AsyncFleetShedder
    _hint = "an AsyncFleetShedder (a FleetShedder blocks: it goes with WSGISheddingMiddleware)"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = from_asgi(scope)
        shedding = self.shedding
        if not shedding.matches(request):
            await self.app(scope, receive, send)
            return
        traffic_class = shedding.traffic_class(request)
        shedder = self.shedder
        if isinstance(shedder, LoadShedder):
            outcome = shedding.load(shedder, traffic_class)
            await self._answer(outcome, request, scope, receive, send)
            return
        found: tuple[ShedDecision, Lease] | StorageError
        try:
            found = await shedder.acquire(traffic_class)
        except StorageError as exc:
            found = exc
        held = shedding.fleet(found, shedder.limiter)
        if isinstance(held, Outcome):
            await self._answer(held, request, scope, receive, send)
        else:
            await hold_asgi(self.app, scope, receive, send, held, shedder.limiter)

    async def _answer(
        self, outcome: Outcome, request: RequestInfo, scope: Scope, receive: Receive, send: Send
    ) -> None:
        """Send a refusal here, or run the app untouched (a request let through)."""
        if outcome.blocked:
            await send_asgi(send, outcome, head=request.method == "HEAD")
        else:
            await self.app(scope, receive, send)


class WSGISheddingMiddleware(_SheddingBase[WSGIApp, FleetShedder]):
    """WSGI: shed the lowest traffic classes first under load.

    The options are ``SheddingMiddleware``'s; ``shedder`` is a ``FleetShedder``
    (its slot held until the server has sent the response) or a ``LoadShedder``.
    """

    _fleet = FleetShedder
    _hint = "a FleetShedder (an AsyncFleetShedder goes with SheddingMiddleware, on ASGI)"

    def __call__(self, environ: dict[str, Any], start_response: StartResponse) -> Iterable[bytes]:
        request = from_wsgi(environ)
        shedding = self.shedding
        if not shedding.matches(request):
            return self.app(environ, start_response)
        traffic_class = shedding.traffic_class(request)
        shedder = self.shedder
        if isinstance(shedder, LoadShedder):
            outcome = shedding.load(shedder, traffic_class)
            return self._answer(outcome, request, environ, start_response)
        found: tuple[ShedDecision, Lease] | StorageError
        try:
            found = shedder.acquire(traffic_class)
        except StorageError as exc:
            found = exc
        held = shedding.fleet(found, shedder.limiter)
        if isinstance(held, Outcome):
            return self._answer(held, request, environ, start_response)
        return hold_wsgi(self.app, environ, start_response, held, shedder.limiter)

    def _answer(
        self,
        outcome: Outcome,
        request: RequestInfo,
        environ: dict[str, Any],
        start_response: StartResponse,
    ) -> Iterable[bytes]:
        """Send a refusal here, or run the app untouched (a request let through)."""
        if outcome.blocked:
            return send_wsgi(start_response, outcome, head=request.method == "HEAD")
        return self.app(environ, start_response)
