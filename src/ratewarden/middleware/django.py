"""``DjangoRateLimitMiddleware``: the rate limit middleware inside Django's own middleware stack.

The WSGI middleware wraps the whole Django application, so it runs before any
of Django's middleware: it cannot see ``request.user``. This one is a Django
middleware, listed in ``MIDDLEWARE`` after ``AuthenticationMiddleware``, so a
rule can count the signed-in user (``by_user(django_user)``)::

    MIDDLEWARE = [
        ...,
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "ratewarden.middleware.django.DjangoRateLimitMiddleware",
    ]
    RATEWARDEN_MIDDLEWARE = {
        "limiter": "myproject.limits.limiter",  # an object, or its dotted path
        "rules": "myproject.limits.rules",
        "failure_mode": "open",
    }

The keys of ``RATEWARDEN_MIDDLEWARE`` are the WSGI middleware's keywords
(``limiter``, ``rules``, ``failure_mode``, ``metrics``, ``name``); a value
may be the object or its dotted path. Routes are found with ``django_endpoint``
unless the rule set has a resolver. The decision is the same sans-I/O core as
the WSGI and ASGI middlewares'.

It runs in either of Django's middleware modes, and the limiter must fit the one
Django picks (refused by name when it does not, never run in the wrong one):

- sync mode (Django's WSGI handler, or a synchronous-only middleware listed after
  this one): a blocking limiter (``Limiter``, ``TwoTier``), as the WSGI middleware's;
- async mode (Django's ASGI handler, with only async-capable middleware after this
  one): an awaited limiter (``AsyncLimiter``, ``AsyncTwoTier``), decided on the event
  loop as the ASGI middleware decides (``RateLimitBase.decide_awaited``), not in a
  thread. Django's ``AuthenticationMiddleware`` makes ``request.user`` a lazy object
  whose first use queries the database, which Django refuses on the event loop; so
  when a rule applies and the request has ``auser`` (that middleware sets it), the
  user is found with ``await request.auser()`` first, and ``django_user`` reads it.
  ``auser`` keeps it on the request: the view's own ``await request.auser()`` asks
  nothing again.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.middleware._base import RateLimitBase, limiter_problem
from ratewarden.middleware._django_common import (
    DjangoRequest,
    GetResponse,
    add_headers,
    find_user,
    read_setting,
    request_info,
    respond,
    wrong_mode,
)
from ratewarden.middleware._failure import MIDDLEWARE_FAILURE_MODES
from ratewarden.middleware._key_checks import not_a_key
from ratewarden.middleware._request import RequestInfo
from ratewarden.middleware._routes import django_endpoint

__all__ = ["SETTING", "DjangoRateLimitMiddleware", "DjangoRequest", "django_user"]

#: The Django setting the middleware reads.
SETTING = "RATEWARDEN_MIDDLEWARE"
_KEYS = ("limiter", "rules", "failure_mode", "metrics", "name")


log = logging.getLogger("ratewarden.middleware")

# Set once the missing request.user has been logged: once per process.
_no_user_told = threading.Event()


def _no_user() -> None:
    """A request reached ``django_user`` with no ``user`` at all: the middleware is listed
    before ``AuthenticationMiddleware``, so every user counts as anonymous (by address, with
    ``first_of(..., by_client_ip())``), silently. Said once."""
    if _no_user_told.is_set():
        return
    _no_user_told.set()
    log.warning(
        "django_user: the request has no 'user' (Django's AuthenticationMiddleware has not "
        "run), so every request counts as anonymous: list "
        "'ratewarden.middleware.django.DjangoRateLimitMiddleware' after "
        "'django.contrib.auth.middleware.AuthenticationMiddleware' in MIDDLEWARE "
        "(logged once)"
    )


def django_user(request: RequestInfo) -> object | None:
    """The signed-in Django user's primary key, for ``by_user(django_user)``; None for an
    anonymous user, or outside the Django middleware (the rule's ``fallback`` then).

    In async mode the user ``await request.auser()`` found; without ``auser`` (no
    ``AuthenticationMiddleware``), ``request.user`` as it is. A request with no ``user`` at
    all (the middleware listed before ``AuthenticationMiddleware``) is anonymous, and a
    warning says so once per process.
    """
    raw = request.raw
    if not isinstance(raw, DjangoRequest):
        return None
    user = raw.user
    if user is None:
        if not hasattr(raw.request, "user"):
            _no_user()
            return None
        user = raw.request.user
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    found: object | None = getattr(user, "pk", None)
    return found


not_a_key(
    django_user,
    "it returns the user's primary key (an int), not an identity: wrap it, "
    "key=by_user(django_user) (identities 'user:<pk>')",
)


def _options() -> dict[str, Any]:
    options = read_setting(
        SETTING,
        "DjangoRateLimitMiddleware",
        _KEYS,
        imported=("limiter", "rules", "metrics"),
        required=("limiter", "rules"),
    )
    rules = options["rules"]
    if isinstance(rules, list | tuple):
        raise ConfigurationError(
            f"{SETTING}: rules {rules!r} must be a RuleSet (which holds the kill switch and the "
            "shadow report): wrap the list, RuleSet([Rule(...), ...])"
        )
    mode = options.get("failure_mode", "open")
    if mode not in MIDDLEWARE_FAILURE_MODES and mode != "local":  # 'local': its own refusal
        raise ConfigurationError(
            f"{SETTING}['failure_mode'] is {mode!r}: one of "
            f"{', '.join(map(repr, MIDDLEWARE_FAILURE_MODES))}"
        )
    return options


def _check_mode(limiter: object, async_mode: bool) -> None:
    """Refuse a limiter that does not fit the mode Django runs the middleware in."""
    awaited = iscoroutinefunction(getattr(limiter, "hit", None))
    if async_mode and not awaited:
        raise wrong_mode(
            f"{SETTING}['limiter'] is {limiter!r}, whose hit blocks",
            "DjangoRateLimitMiddleware",
            async_mode,
            "use an AsyncLimiter or AsyncTwoTier (over an AsyncStore such as AsyncRedisStore), "
            "which it awaits on the event loop",
        )
    if not async_mode and awaited:
        raise wrong_mode(
            f"{SETTING}['limiter'] is {limiter!r}, whose hit is awaited",
            "DjangoRateLimitMiddleware",
            async_mode,
            "use a Limiter or TwoTier (over a Store such as RedisStore), or serve under ASGI "
            "with only async-capable middleware after it",
        )


class DjangoRateLimitMiddleware(RateLimitBase[GetResponse, Any]):
    """Limit requests to Django's views by the rules of ``settings.RATEWARDEN_MIDDLEWARE``.

    ``failure_mode``, ``metrics`` and ``name``: as ``WSGIRateLimitMiddleware``'s. The
    limiter blocks in sync mode and is awaited in async mode (see the module).
    """

    sync_capable = True
    async_capable = True
    _checks_kind = False  # by _check_mode, after the rest of the setting

    def _awaits_limiter(self) -> bool:
        return self.async_mode

    def __init__(self, get_response: GetResponse) -> None:
        # Django hands an awaitable get_response when it runs this middleware in async mode.
        self.async_mode = iscoroutinefunction(get_response)
        options = _options()  # its refusals name the setting
        problem = limiter_problem(options["limiter"], self.async_mode, kind=False)
        if problem is not None:
            raise ConfigurationError(
                f"{SETTING}['limiter'] is {options['limiter']!r}, which {problem}"
            )
        try:
            super().__init__(get_response, **options)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{SETTING}: {exc}") from None
        _check_mode(self.limiter, self.async_mode)
        if self.async_mode:
            self._now = getattr(self.limiter, "hit_now", None)
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.async_mode:
            return self._acall(request)
        info = request_info(request, DjangoRequest(request))
        rules = self.rules.applicable(info, django_endpoint)
        if not rules:
            return self.app(request)
        try:
            outcome = self.rules.decide(info, rules, self.limiter.hit, self.own_answer)
        except StorageError as exc:
            outcome = self.failed(exc, rules)
        if outcome.blocked:
            return respond(outcome, head=info.method == "HEAD")
        return add_headers(self.app(request), outcome.headers)

    async def _acall(self, request: Any) -> Any:
        """Async mode: the user found with ``auser`` when a rule applies, then the decision
        awaited on the event loop, as the ASGI middleware's."""
        raw = DjangoRequest(request)
        info = request_info(request, raw)
        rules = self.rules.applicable(info, django_endpoint)
        if not rules:
            return await self.app(request)
        await find_user(request, raw)
        outcome = await self.decide_awaited(info, rules)
        if outcome.blocked:
            return respond(outcome, head=info.method == "HEAD")
        return add_headers(await self.app(request), outcome.headers)
