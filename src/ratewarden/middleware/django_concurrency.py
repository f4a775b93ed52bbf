"""``DjangoConcurrencyMiddleware``: concurrency slots inside Django's own middleware stack.

The WSGI concurrency middleware wraps Django's whole WSGI handler, so it cannot
see ``request.user``; this one is listed in ``MIDDLEWARE`` (after
``AuthenticationMiddleware`` to count a signed-in user's requests in flight)
and configured by a setting of its own, under Django's WSGI and ASGI handlers
alike::

    MIDDLEWARE = [
        ...,
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "ratewarden.middleware.django_concurrency.DjangoConcurrencyMiddleware",
    ]
    RATEWARDEN_CONCURRENCY = {
        "limiter": "myproject.limits.limiter",  # an object, or its dotted path
        "limit": 4,
        "key": "myproject.limits.per_user",
        "paths": ["/export/**"],
    }

The keys of ``RATEWARDEN_CONCURRENCY`` are the concurrency middlewares' keywords
(``limiter``, ``limit``, ``name``, ``key``, ``ttl``, ``status``, ``retry_after``,
``paths``, ``methods``, ``fallback``, ``clock``, ``failure_mode``, ``metrics``);
``limiter``, ``key``, ``clock`` and ``metrics`` may be dotted paths. Whose slot,
how many, the refusal and the failure mode are the same ``SlotPolicy``'s as the
ASGI and WSGI middlewares'; ``key`` gets the request as the rate limit
middleware's rules do (``by_user(django_user)`` counts the signed-in user).

The limiter must fit the mode Django runs the middleware in (refused by name
when it does not): a ``Limiter`` in sync mode, an ``AsyncLimiter`` in async mode
(awaited on the event loop, the user found with ``await request.auser()`` first,
as ``DjangoRateLimitMiddleware`` finds it). The slot is held while the view runs;
a streaming response keeps it until its last chunk has been taken (renewed as it
streams, once per third of the TTL) or Django closes it; any other response gives
it back as soon as the view has returned it.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Lease
from ratewarden.middleware._django_common import (
    DjangoRequest,
    GetResponse,
    find_user,
    read_setting,
    request_info,
    respond,
    wrong_mode,
)
from ratewarden.middleware._holding import ahold_django, hold_django
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware.concurrency import POLICY_KEYS, SlotPolicy

__all__ = ["SETTING", "DjangoConcurrencyMiddleware"]

#: The Django setting the middleware reads.
SETTING = "RATEWARDEN_CONCURRENCY"
_KEYS = ("limiter", *(key for key in POLICY_KEYS if key != "failure"))  # not the deprecated one


def _options() -> dict[str, Any]:
    return read_setting(
        SETTING,
        "DjangoConcurrencyMiddleware",
        _KEYS,
        imported=("limiter", "key", "clock", "metrics"),
        required=("limiter", "limit"),
    )


def _check_mode(limiter: object, async_mode: bool) -> None:
    """Refuse a limiter without slots, or one that does not fit the mode Django runs the
    middleware in."""
    given = f"{SETTING}['limiter'] is {limiter!r}"
    acquire = getattr(limiter, "acquire_slot", None)
    if not callable(acquire):
        raise ConfigurationError(
            f"{given}, which has no acquire_slot: a Limiter (sync mode) or an AsyncLimiter "
            "(async mode)"
        )
    awaited = iscoroutinefunction(acquire)
    if async_mode and not awaited:
        raise wrong_mode(
            f"{given}, whose acquire_slot blocks",
            "DjangoConcurrencyMiddleware",
            async_mode,
            "use an AsyncLimiter (over an AsyncStore such as AsyncRedisStore), which it awaits "
            "on the event loop",
        )
    if not async_mode and awaited:
        raise wrong_mode(
            f"{given}, whose acquire_slot is awaited",
            "DjangoConcurrencyMiddleware",
            async_mode,
            "use a Limiter (over a Store such as RedisStore), or serve under ASGI with only "
            "async-capable middleware after it",
        )


class DjangoConcurrencyMiddleware:
    """Hold one of ``limit`` slots per identity while a request's view runs and its response
    streams, by ``settings.RATEWARDEN_CONCURRENCY``.

    The options are ``SlotPolicy``'s; the limiter blocks in sync mode and is awaited in
    async mode (see the module).
    """

    sync_capable = True
    async_capable = True

    def __init__(self, get_response: GetResponse) -> None:
        # Django hands an awaitable get_response when it runs this middleware in async mode.
        self.async_mode = iscoroutinefunction(get_response)
        self.get_response = get_response
        options = _options()
        self.limiter: Any = options.pop("limiter")
        _check_mode(self.limiter, self.async_mode)
        try:
            self.policy = SlotPolicy(**options)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{SETTING}: {exc}") from None
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.async_mode:
            return self._acall(request)
        info = request_info(request, DjangoRequest(request))
        policy = self.policy
        if not policy.matches(info):
            return self.get_response(request)
        found: Lease | StorageError
        try:
            found = self.limiter.acquire_slot(policy.slot_key(info), policy.limit, ttl=policy.ttl)
        except StorageError as exc:
            found = exc
        held = policy.admit(found, self.limiter)
        if isinstance(held, Outcome):
            if held.blocked:
                return respond(held, head=info.method == "HEAD")
            return self.get_response(request)
        return hold_django(self.get_response, request, held, self.limiter)

    async def _acall(self, request: Any) -> Any:
        """Async mode: the user found with ``auser``, then the slot awaited on the event loop."""
        raw = DjangoRequest(request)
        info = request_info(request, raw)
        policy = self.policy
        if not policy.matches(info):
            return await self.get_response(request)
        await find_user(request, raw)
        found: Lease | StorageError
        try:
            key = policy.slot_key(info)
            found = await self.limiter.acquire_slot(key, policy.limit, ttl=policy.ttl)
        except StorageError as exc:
            found = exc
        held = policy.admit(found, self.limiter)
        if isinstance(held, Outcome):
            if held.blocked:
                return respond(held, head=info.method == "HEAD")
            return await self.get_response(request)
        return await ahold_django(self.get_response, request, held, self.limiter)
