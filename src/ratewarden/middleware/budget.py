"""Token budgets from the middleware (ASGI): reserve before the app runs, settle after.

::

    budget = AsyncTokenBudget(store, {"requests": "500/minute", "tokens": "100000/minute"},
                              max_output_tokens=4096)
    app.add_middleware(TokenBudgetMiddleware, budget=budget, key=by_api_key(),
                       estimate=lambda request, body: len(body) // 4, read_body=True,
                       paths=["/v1/**"])

For each selected request the middleware reserves ``estimate(request, body)``
on the identity's budget (``AsyncTokenBudget.reserve_usage``, one store step,
all axes or none). Refused, it answers 429 with the provider-style headers
(``x-ratelimit-*-requests`` / ``-tokens``, the IETF fields with ``qu``,
``Retry-After``) and a problem document; the app never runs. Granted, the app
runs, and the reservation is settled with what the request actually used:

- from ``actual(request, headers)`` when given, called once the response body
  has been sent (so a streaming response can report at its end, e.g. through
  ``request.state``, which is ``scope["state"]``);
- else from the response header ``usage_header`` (``x-tokens-used``: the total
  tokens, input and output), read when the response starts;
- else (no usage reported, a malformed value, or the app failed) the estimate
  stands: the reservation is settled at the estimate and nothing is refunded.

The response carries the provider-style headers of the budget after the
settlement when the usage was known at the start, else after the reservation.

When the budget's store cannot be asked at the reservation (down, too slow),
the failure mode answers (``failure_mode``, as the rate limit middleware's):
``open`` (the default) runs the app with nothing reserved and no budget
headers, ``closed`` answers 503 with ``Retry-After``; never a 500.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable, Sequence

from ratewarden.budgets import AsyncTokenBudget, BudgetDecision, Reservation, Usage
from ratewarden.budgets import provider_headers as budget_headers
from ratewarden.clock import Clock, SystemClock
from ratewarden.deprecation import UNSET
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.metrics import Metrics
from ratewarden.middleware._failure import FailureAnswer, chosen_failure_mode
from ratewarden.middleware._identity import ANONYMOUS, KeyFunc
from ratewarden.middleware._outcome import refusal, send_asgi
from ratewarden.middleware._request import (
    ClientGoneError,
    RequestInfo,
    from_asgi,
    read_body,
    replay,
)
from ratewarden.middleware._rules import Selection, check_name
from ratewarden.middleware._types import ASGIApp, Message, Receive, Scope, Send

__all__ = ["ActualFunc", "EstimateFunc", "TokenBudgetMiddleware"]

log = logging.getLogger("ratewarden.middleware")

RawHeaders = Sequence[tuple[bytes, bytes]]

#: What a request is expected to use: a ``Usage``, or its input tokens (the output part is
#: then the budget's ``max_output_tokens`` cap). Gets the request and its body (``b""``
#: unless ``read_body``).
EstimateFunc = Callable[[RequestInfo, bytes], "Usage | int"]

#: What a request used, known once its response is sent: a ``Usage``, total tokens, or
#: None (unknown: the estimate stands). Gets the request and the response's headers.
ActualFunc = Callable[[RequestInfo, RawHeaders], "Usage | int | None"]

_MiB = 1024 * 1024


class TokenBudgetMiddleware:
    """Reserve on an ``AsyncTokenBudget`` before the app, settle with the actual use after.

    - ``budget``: the ``AsyncTokenBudget`` (memory or Redis).
    - ``estimate``: ``(request, body) -> Usage | int``; see ``EstimateFunc``.
    - ``key``: the identity (default: the client address); ``fallback`` when it has none.
    - ``name``: the prefix of the budget key, ``<name>:<identity>``.
    - ``actual``: ``(request, response headers) -> Usage | int | None``, after the body.
    - ``usage_header``: the response header with the total tokens used, when no ``actual``.
    - ``read_body``: read the request body (up to ``max_body`` bytes, else 413) and hand it
      to ``estimate``; the app still receives it.
    - ``paths`` / ``methods``: which requests are budgeted (all by default).
    - ``ietf``: add the IETF ``RateLimit-Policy`` / ``RateLimit`` fields with ``qu``.
    - ``failure_mode``: ``"open"`` or ``"closed"``, when the store fails at the
      reservation (``failure`` is its deprecated name); ``metrics`` counts those requests
      (``degraded``, rule ``name``), logged on the ``clock`` at most once a minute per
      reason.
    """

    def __init__(
        self,
        app: ASGIApp,
        *,
        budget: AsyncTokenBudget,
        estimate: EstimateFunc,
        key: KeyFunc | None = None,
        name: str = "budget",
        actual: ActualFunc | None = None,
        usage_header: str = "x-tokens-used",
        read_body: bool = False,
        max_body: int = _MiB,
        paths: Iterable[str] | str | None = None,
        methods: Iterable[str] | str | None = None,
        fallback: str = ANONYMOUS,
        ietf: bool = True,
        failure_mode: str = "open",
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        failure: str = UNSET,
    ) -> None:
        failure_mode = chosen_failure_mode(type(self).__name__, failure_mode, failure)
        if not isinstance(budget, AsyncTokenBudget):
            raise ConfigurationError(f"budget {budget!r} must be an AsyncTokenBudget")
        for what, func in (("estimate", estimate), ("actual", actual)):
            if func is not None and not callable(func):
                raise ConfigurationError(f"token budget middleware {what}={func!r}: a callable")
        if not isinstance(usage_header, str) or not usage_header.strip():
            raise ConfigurationError(f"usage_header {usage_header!r} must be a header name")
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise ConfigurationError(f"max_body {max_body!r} must be a byte count >= 0")
        self.selection = Selection(
            "token budget middleware", key=key, fallback=fallback, paths=paths, methods=methods
        )
        self.app = app
        self.budget = budget
        self.estimate = estimate
        self.key = self.selection.key
        self.name = check_name(name)
        self.failure_answer = FailureAnswer(
            failure_mode, metrics, self.name, clock if clock is not None else SystemClock()
        )
        self.actual = actual
        self.usage_header = usage_header.strip().lower().encode("latin-1")
        self.read_body = bool(read_body)
        self.max_body = max_body
        self.fallback = fallback
        self.ietf = bool(ietf)

    def _usage(self, value: object, where: str, estimate: Usage | None = None) -> Usage:
        """A ``Usage`` from what a callable returned: a Usage, or a whole number of tokens."""
        if isinstance(value, Usage):
            return value
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ConfigurationError(
                f"token budget middleware: {where} returned {value!r}; "
                "it must return a Usage or a whole number of tokens >= 0"
            )
        if estimate is None:  # an estimate: input tokens, output capped by the budget
            return self.budget.estimate(value)
        # A total: the input part is what was estimated for input, the rest is output.
        used_input = min(estimate.input_tokens, value)
        return Usage.of(used_input, value - used_input, 1, dict(estimate.units) or None)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = from_asgi(scope)
        if not self.selection.matches(request):
            await self.app(scope, receive, send)
            return
        body = b""
        if self.read_body:
            try:
                read = await read_body(receive, self.max_body)
            except ClientGoneError:  # the client left before its body ended: no one to answer
                return
            if read is None:
                too_large = refusal(413, "The request body is too large.")
                await send_asgi(send, too_large, head=False)
                return
            body = read
            receive = replay(body, receive)
        estimate = self._usage(self.estimate(request, body), "estimate")
        key = f"{self.name}:{self.selection.identity(request)}"
        try:
            reservation = await self.budget.reserve_usage(key, estimate)
        except StorageError as exc:
            outcome = self.failure_answer.caught(exc)
            if outcome.blocked:
                await send_asgi(send, outcome, head=request.method == "HEAD")
            else:  # open: the app runs with nothing reserved, so nothing to settle
                await self.app(scope, receive, send)
            return
        if not reservation.allowed:
            await self._refuse(send, reservation.decision, head=request.method == "HEAD")
            return
        await _Settling(self, request, reservation).run(scope, receive, send)

    async def _refuse(self, send: Send, decision: BudgetDecision, *, head: bool) -> None:
        detail = f"Token budget {self.name!r} exceeded"
        if math.isfinite(decision.retry_after):
            detail += f"; retry in {max(1, math.ceil(decision.retry_after))} s."
        else:
            detail += ": this request needs more than the budget can ever allow."
        headers = tuple(budget_headers(decision, ietf=self.ietf))
        await send_asgi(send, refusal(429, detail, headers=headers), head=head)

    def headers_of(self, decision: BudgetDecision) -> list[tuple[bytes, bytes]]:
        """The provider-style headers of ``decision``, as ASGI byte pairs."""
        return [
            (n.lower().encode("latin-1"), v.encode("latin-1"))
            for n, v in budget_headers(decision, ietf=self.ietf)
        ]


class _Settling:
    """One granted request: forward its response, then settle its reservation once."""

    def __init__(
        self, middleware: TokenBudgetMiddleware, request: RequestInfo, reservation: Reservation
    ) -> None:
        self.middleware = middleware
        self.request = request
        self.reservation = reservation
        self.settled = False
        self.response_headers: RawHeaders = ()

    async def run(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.middleware.app(scope, receive, self._wrap(send))
        finally:
            await self.settle(None)

    def _wrap(self, send: Send) -> Send:
        async def send_settling(message: Message) -> None:
            kind = message["type"]
            if kind == "http.response.start":
                message = await self._start(message)
            await send(message)
            if kind == "http.response.body" and not message.get("more_body", False):
                await self.settle(self._actual())

        return send_settling

    async def _start(self, message: Message) -> Message:
        headers: RawHeaders = message.get("headers", ())
        self.response_headers = headers
        decision = self.reservation.decision
        if self.middleware.actual is None:
            used = self._from_header(headers)
            if used is not None:
                decision = await self.settle(used) or decision
        return {**message, "headers": [*headers, *self.middleware.headers_of(decision)]}

    def _from_header(self, headers: RawHeaders) -> Usage | None:
        wanted = self.middleware.usage_header
        for name, value in headers:
            if name.lower() == wanted:
                text = value.decode("latin-1").strip()
                if text.isascii() and text.isdigit():
                    return self.middleware._usage(int(text), "usage", self.reservation.estimate)
                log.warning(
                    "token budget: %s %r is not a whole number; the estimate stands",
                    wanted.decode(),
                    text,
                )
                return None
        return None

    def _actual(self) -> Usage | None:
        actual = self.middleware.actual
        if actual is None:
            return None
        found = actual(self.request, self.response_headers)
        if found is None:
            return None
        return self.middleware._usage(found, "actual", self.reservation.estimate)

    async def settle(self, used: Usage | None) -> BudgetDecision | None:
        """Settle once: with ``used``, or at the estimate when it is unknown."""
        if self.settled:
            return None
        self.settled = True
        try:
            settlement = await self.middleware.budget.settle_usage(
                self.reservation, used if used is not None else self.reservation.estimate
            )
        except StorageError as exc:
            log.warning("token budget settle failed (the reservation keeps its charge): %s", exc)
            return None
        return settlement.decision
