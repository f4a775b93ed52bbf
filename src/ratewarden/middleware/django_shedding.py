"""``DjangoSheddingMiddleware``: load shedding inside Django's own middleware stack.

The WSGI shedding middleware wraps Django's whole WSGI handler; this one is listed
in ``MIDDLEWARE`` and configured by a setting of its own, and runs under Django's
WSGI and ASGI handlers alike::

    MIDDLEWARE = [
        "ratewarden.middleware.django_shedding.DjangoSheddingMiddleware",
        ...,
    ]
    RATEWARDEN_SHEDDING = {
        "shedder": "myproject.load.shedder",  # an object, or its dotted path
        "classify": "myproject.load.classify",
        "paths": ["/api/**"],
    }

The keys of ``RATEWARDEN_SHEDDING`` are the shedding middlewares' keywords
(``shedder``, ``classify``, ``default``, ``name``, ``status``, ``retry_after``,
``paths``, ``methods``, ``clock``, ``failure_mode``, ``metrics``); ``shedder``,
``classify``, ``clock`` and ``metrics`` may be dotted paths. Classes, refusals,
the failure mode and the counts are the same ``Shedding`` core's as the ASGI and
WSGI middlewares'; ``classify`` gets the request as the rate limit middleware's
rules do (``request.raw.request`` is the ``HttpRequest``).

The shedder must fit the mode Django runs the middleware in (refused by name
when it does not): a ``FleetShedder`` in sync mode, an ``AsyncFleetShedder`` in
async mode (awaited on the event loop), a ``LoadShedder`` in either. A fleet
shedder's slot is held while the view runs; a streaming response keeps it until
its last chunk has been taken (renewed as it streams, once per third of the
TTL) or Django closes it; any other response gives it back as soon as the view
has returned it (its body is built: the work is done).
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder, ShedDecision
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Lease
from ratewarden.middleware._django_common import (
    DjangoRequest,
    GetResponse,
    read_setting,
    request_info,
    respond,
    wrong_mode,
)
from ratewarden.middleware._holding import ahold_django, hold_django
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware._shedding import Shedding

__all__ = ["SETTING", "DjangoSheddingMiddleware"]

#: The Django setting the middleware reads.
SETTING = "RATEWARDEN_SHEDDING"
_KEYS = (
    "shedder",
    "classify",
    "default",
    "name",
    "status",
    "retry_after",
    "paths",
    "methods",
    "clock",
    "failure_mode",
    "metrics",
)


def _options() -> dict[str, Any]:
    return read_setting(
        SETTING,
        "DjangoSheddingMiddleware",
        _KEYS,
        imported=("shedder", "classify", "clock", "metrics"),
        required=("shedder",),
    )


def _check_mode(shedder: object, async_mode: bool) -> None:
    """Refuse a shedder that does not fit the mode Django runs the middleware in."""
    given = f"{SETTING}['shedder'] is {shedder!r}"
    if isinstance(shedder, LoadShedder):
        return
    if async_mode and isinstance(shedder, FleetShedder):
        raise wrong_mode(
            f"{given}, a FleetShedder, whose acquire blocks",
            "DjangoSheddingMiddleware",
            async_mode,
            "use an AsyncFleetShedder (over an AsyncLimiter), which it awaits on the event "
            "loop, or a LoadShedder",
        )
    if not async_mode and isinstance(shedder, AsyncFleetShedder):
        raise wrong_mode(
            f"{given}, an AsyncFleetShedder, whose acquire is awaited",
            "DjangoSheddingMiddleware",
            async_mode,
            "use a FleetShedder (over a Limiter) or a LoadShedder, or serve under ASGI with "
            "only async-capable middleware after it",
        )
    if not isinstance(shedder, FleetShedder | AsyncFleetShedder):
        raise ConfigurationError(
            f"{given}: a FleetShedder (sync mode), an AsyncFleetShedder (async mode) or a "
            "LoadShedder (either)"
        )


class DjangoSheddingMiddleware:
    """Shed the lowest traffic classes first under load, by ``settings.RATEWARDEN_SHEDDING``.

    The options are ``SheddingMiddleware``'s; the shedder blocks in sync mode and is
    awaited in async mode (see the module).
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        # Django hands an awaitable get_response when it runs this middleware in async mode.
        self.async_mode = iscoroutinefunction(get_response)
        self.get_response = get_response
        options = _options()
        self.shedder: FleetShedder | AsyncFleetShedder | LoadShedder = options.pop("shedder")
        _check_mode(self.shedder, self.async_mode)
        try:
            self.shedding = Shedding(self.shedder, **options)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{SETTING}: {exc}") from None
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.async_mode:
            return self._acall(request)
        info = request_info(request, DjangoRequest(request))
        shedding = self.shedding
        if not shedding.matches(info):
            return self.get_response(request)
        traffic_class = shedding.traffic_class(info)
        shedder = self.shedder
        if isinstance(shedder, LoadShedder):
            return self._answer(shedding.load(shedder, traffic_class), info.method, request)
        assert isinstance(shedder, FleetShedder)  # _check_mode: sync mode's fleet shedder
        found: tuple[ShedDecision, Lease] | StorageError
        try:
            found = shedder.acquire(traffic_class)
        except StorageError as exc:
            found = exc
        held = shedding.fleet(found, shedder.limiter)
        if isinstance(held, Outcome):
            return self._answer(held, info.method, request)
        return hold_django(self.get_response, request, held, shedder.limiter)

    def _answer(self, outcome: Outcome, method: str, request: Any) -> Any:
        """Send a refusal here, or run the view untouched (a request let through)."""
        if outcome.blocked:
            return respond(outcome, head=method == "HEAD")
        return self.get_response(request)

    async def _acall(self, request: Any) -> Any:
        """Async mode: the fleet shedder's slot awaited on the event loop."""
        info = request_info(request, DjangoRequest(request))
        shedding = self.shedding
        if not shedding.matches(info):
            return await self.get_response(request)
        traffic_class = shedding.traffic_class(info)
        shedder = self.shedder
        if isinstance(shedder, LoadShedder):
            outcome = shedding.load(shedder, traffic_class)
        else:
            assert isinstance(shedder, AsyncFleetShedder)  # _check_mode: async mode's
            found: tuple[ShedDecision, Lease] | StorageError
            try:
                found = await shedder.acquire(traffic_class)
            except StorageError as exc:
                found = exc
            held = shedding.fleet(found, shedder.limiter)
            if not isinstance(held, Outcome):
                return await ahold_django(self.get_response, request, held, shedder.limiter)
            outcome = held
        if outcome.blocked:
            return respond(outcome, head=info.method == "HEAD")
        return await self.get_response(request)
