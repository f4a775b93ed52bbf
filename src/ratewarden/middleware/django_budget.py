"""``DjangoTokenBudgetMiddleware``: token budgets inside Django's own middleware stack.

The WSGI token budget middleware wraps Django's whole WSGI handler, so it cannot
see ``request.user``; this one is listed in ``MIDDLEWARE`` (after
``AuthenticationMiddleware`` to give each signed-in user a budget) and
configured by a setting of its own, under Django's WSGI and ASGI handlers alike::

    MIDDLEWARE = [
        ...,
        "django.contrib.auth.middleware.AuthenticationMiddleware",
        "ratewarden.middleware.django_budget.DjangoTokenBudgetMiddleware",
    ]
    RATEWARDEN_TOKEN_BUDGET = {
        "budget": "myproject.llm.budget",  # an object, or its dotted path
        "estimate": "myproject.llm.estimate",
        "read_body": True,
        "paths": ["/v1/**"],
    }

The keys of ``RATEWARDEN_TOKEN_BUDGET`` are the token budget middlewares'
keywords (``budget``, ``estimate``, ``key``, ``name``, ``actual``,
``usage_header``, ``read_body``, ``max_body``, ``paths``, ``methods``,
``fallback``, ``ietf``, ``failure_mode``, ``metrics``, ``clock``); ``budget``,
``estimate``, ``key``, ``actual``, ``metrics`` and ``clock`` may be dotted paths.
The admission, the refusal, the headers, the failure mode and the settle-once
rule are the same ``_budget`` core's as the ASGI and WSGI middlewares', run on
the budget's limiter.

The budget must fit the mode Django runs the middleware in (refused by name when
it does not): a ``TokenBudget`` in sync mode, an ``AsyncTokenBudget`` in async mode
(awaited on the event loop, the user found with ``await request.auser()`` first).
A response the view has built is settled as soon as the view returns it, with
``actual(request, headers)`` (``headers``: the response's ``(name, value)``
pairs) or else its usage header, so its budget headers tell the budget after the
settlement; a streaming response is settled from its usage header when it has
one, else once its last chunk has been taken (``actual``) or at the estimate when
Django closes it early.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from ratewarden.budgets import AsyncTokenBudget, Reservation, TokenBudget
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import Flow
from ratewarden.middleware._budget import (
    TOO_LARGE,
    Settling,
    SettlingResponse,
    TokenBudgetBase,
    settled_chunks,
)
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
from ratewarden.middleware._outcome import Outcome
from ratewarden.middleware._shielded import to_the_end

__all__ = ["SETTING", "DjangoTokenBudgetMiddleware"]

#: The Django setting the middleware reads.
SETTING = "RATEWARDEN_TOKEN_BUDGET"
_WHO = "DjangoTokenBudgetMiddleware"
_KEYS = (
    "budget",
    "estimate",
    "key",
    "name",
    "actual",
    "usage_header",
    "read_body",
    "max_body",
    "paths",
    "methods",
    "fallback",
    "ietf",
    "failure_mode",
    "metrics",
    "clock",
)


def _options() -> dict[str, Any]:
    return read_setting(
        SETTING,
        _WHO,
        _KEYS,
        imported=("budget", "estimate", "key", "actual", "metrics", "clock"),
        required=("budget", "estimate"),
    )


def _check_mode(budget: object, async_mode: bool) -> None:
    """Refuse a budget that does not fit the mode Django runs the middleware in."""
    given = f"{SETTING}['budget'] is {budget!r}"
    if async_mode and isinstance(budget, TokenBudget):
        raise wrong_mode(
            f"{given}, a TokenBudget, whose reserve blocks",
            _WHO,
            async_mode,
            "use an AsyncTokenBudget (over an AsyncStore such as AsyncRedisStore), which it "
            "awaits on the event loop",
        )
    if not async_mode and isinstance(budget, AsyncTokenBudget):
        raise wrong_mode(
            f"{given}, an AsyncTokenBudget, whose reserve is awaited",
            _WHO,
            async_mode,
            "use a TokenBudget (over a Store such as RedisStore), or serve under ASGI with "
            "only async-capable middleware after it",
        )
    if not isinstance(budget, TokenBudget | AsyncTokenBudget):
        raise ConfigurationError(
            f"{given}: a TokenBudget (sync mode) or an AsyncTokenBudget (async mode)"
        )


class DjangoTokenBudgetMiddleware(TokenBudgetBase[GetResponse, Any, str]):
    """Reserve on a token budget before the view, settle with the actual use after, by
    ``settings.RATEWARDEN_TOKEN_BUDGET``.

    The options are ``TokenBudgetMiddleware``'s; the budget blocks in sync mode and is
    awaited in async mode (see the module). ``read_body`` reads ``request.body`` (Django's
    own limits apply first; past ``max_body`` the answer is a 413, from the
    ``Content-Length`` when it says so, before anything is read); the view still reads it.
    """

    sync_capable = True
    async_capable = True
    _budget_class = (TokenBudget, AsyncTokenBudget)
    _budget_hint = "a TokenBudget (sync mode) or an AsyncTokenBudget (async mode)"

    def __init__(self, get_response: GetResponse) -> None:
        # Django hands an awaitable get_response when it runs this middleware in async mode.
        self.async_mode = iscoroutinefunction(get_response)
        options = _options()
        _check_mode(options["budget"], self.async_mode)
        try:
            super().__init__(get_response, **options)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{SETTING}: {exc}") from None
        if self.async_mode:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.async_mode:
            return self._acall(request)
        info = request_info(request, DjangoRequest(request))
        if not self.selection.matches(info):
            return self.app(request)
        head = info.method == "HEAD"
        body = self._body(request)
        if body is None:
            return respond(TOO_LARGE, head=head)
        found: Reservation | Outcome = self.budget.run(self.admit_flow(info, body))
        if isinstance(found, Outcome):
            if found.blocked:
                return respond(found, head=head)
            return self.app(request)  # open: nothing reserved, nothing to settle
        settling: Settling[str] = Settling(self, info, found)
        try:
            response = self.app(request)
        except BaseException:
            self.budget.run(settling.settle_flow(None))
            raise
        streams = _streams(response, async_mode=False)
        self.budget.run(self._answered_flow(settling, response, streams))
        if streams and not settling.settled:
            response.streaming_content = SettlingResponse(
                response.streaming_content, settling, self.budget
            )
        return response

    async def _acall(self, request: Any) -> Any:
        """Async mode: the user found with ``auser``, then the reservation and the settlement
        awaited on the event loop."""
        raw = DjangoRequest(request)
        info = request_info(request, raw)
        if not self.selection.matches(info):
            return await self.app(request)
        head = info.method == "HEAD"
        body = self._body(request)
        if body is None:
            return respond(TOO_LARGE, head=head)
        await find_user(request, raw)
        found: Reservation | Outcome = await self.budget.run(self.admit_flow(info, body))
        if isinstance(found, Outcome):
            if found.blocked:
                return respond(found, head=head)
            return await self.app(request)
        settling: Settling[str] = Settling(self, info, found)
        try:
            response = await self.app(request)
        except BaseException:
            await to_the_end(self.budget.run(settling.settle_flow(None)))
            raise
        streams = _streams(response, async_mode=True)
        # Django cancels the request's task when the client goes: not in mid-settlement.
        await to_the_end(self.budget.run(self._answered_flow(settling, response, streams)))
        if streams and not settling.settled:
            response.streaming_content = settled_chunks(
                response.streaming_content, settling, self.budget
            )
        return response

    def _body(self, request: Any) -> bytes | None:
        """The body ``estimate`` gets (``b""`` unless ``read_body``), or None past ``max_body``
        (from its Content-Length before reading it, when it gives one)."""
        if not self.read_body:
            return b""
        given = str(request.META.get("CONTENT_LENGTH") or "").strip()
        if given.isascii() and given.isdigit() and int(given) > self.max_body:
            return None
        body: bytes = request.body
        return None if len(body) > self.max_body else body

    def _answered_flow(self, settling: Settling[str], response: Any, streams: bool) -> Flow[None]:
        """The view answered: settle now (from the usage header, or a built response's
        ``actual``, else at the estimate) unless a stream will say at its end; then the
        budget headers, after the settlement when it was made."""
        used = settling.started(list(response.items()))
        if used is None and not streams:
            used = settling.actual_usage()
        if used is not None or not streams:
            yield from settling.settle_flow(used)
        add_headers(response, self.header_fields(settling.decision))


def _streams(response: Any, *, async_mode: bool) -> bool:
    """Whether ``response`` streams in the mode (Django consumes a mismatched stream whole
    before sending it, as a built response)."""
    return bool(getattr(response, "streaming", False)) and response.is_async == async_mode
