"""What the token budget middlewares (ASGI, WSGI) share, everything but the I/O.

``TokenBudgetBase`` is the constructor (every option checked once), the
admission of a request as a flow (estimate, reserve, refuse or the failure
mode's answer) and the headers; ``Settling`` is one granted request: its
response headers, the actual use (the ``actual`` callable or the usage header)
and the settle-once rule, also a flow. A flow runs on the budget's limiter
(``budget.run``): ``TokenBudgetMiddleware`` awaits it, ``WSGITokenBudgetMiddleware``
blocks on it, and neither writes the steps again. ``SettlingResponse`` (a
response iterable) and ``settled_chunks`` (an async stream) settle a streaming
response at its end, for the WSGI and the Django middlewares. Both flows count what
they did (``metrics.budget_reservation``: reserved, refused, settled, ...), so every
middleware is counted alike.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Sequence
from typing import Any, ClassVar, Generic, TypeVar

from ratewarden.budgets import (
    AsyncTokenBudget,
    BudgetDecision,
    Reservation,
    Settlement,
    TokenBudget,
    Usage,
)
from ratewarden.budgets import provider_headers as budget_headers
from ratewarden.checks import check_bool, keywords_checked
from ratewarden.clock import Clock
from ratewarden.deprecation import UNSET
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.headers import Header
from ratewarden.limiter import Flow, check_metrics
from ratewarden.metrics import Metrics, optional_hook
from ratewarden.middleware._clock import checked_clock
from ratewarden.middleware._failure import OPEN, FailureAnswer, chosen_failure_mode
from ratewarden.middleware._identity import ANONYMOUS, KeyFunc
from ratewarden.middleware._outcome import Outcome, close_wsgi, encoded, refusal
from ratewarden.middleware._request import RequestInfo
from ratewarden.middleware._rules import Selection, check_name
from ratewarden.middleware._shielded import to_the_end

__all__ = [
    "ActualFunc",
    "EstimateFunc",
    "Settling",
    "SettlingResponse",
    "TokenBudgetBase",
    "WSGIActualFunc",
    "settled_chunks",
]

log = logging.getLogger("ratewarden.middleware")

#: The app a middleware wraps: an ASGI or a WSGI callable.
A = TypeVar("A")
#: The budget it reserves on: an ``AsyncTokenBudget`` (ASGI) or a ``TokenBudget`` (WSGI).
B = TypeVar("B", AsyncTokenBudget, TokenBudget)
#: What a response header's name and value are: bytes (ASGI) or str (WSGI).
H = TypeVar("H", bytes, str)

#: What a request is expected to use: a ``Usage``, or its input tokens (the output part is
#: then the budget's ``max_output_tokens`` cap). Gets the request and its body (``b""``
#: unless ``read_body``).
EstimateFunc = Callable[[RequestInfo, bytes], "Usage | int"]

#: What a request used, known once its response is sent: a ``Usage``, total tokens, or
#: None (unknown: the estimate stands). Gets the request and the response's headers, as
#: ASGI sends them (lower-case byte pairs).
ActualFunc = Callable[[RequestInfo, Sequence[tuple[bytes, bytes]]], "Usage | int | None"]

#: ``ActualFunc`` on WSGI: the response's headers as the app gave them to
#: ``start_response`` (``(name, value)`` strings).
WSGIActualFunc = Callable[[RequestInfo, Sequence[tuple[str, str]]], "Usage | int | None"]

#: Either, by the type of the header names and values.
_Actual = Callable[[RequestInfo, Sequence[tuple[H, H]]], "Usage | int | None"]

_MiB = 1024 * 1024

#: The answer to a request whose body passes ``max_body``.
TOO_LARGE = refusal(413, "The request body is too large.")


class TokenBudgetBase(Generic[A, B, H]):
    """The constructor of the token budget middlewares (see ``TokenBudgetMiddleware`` for
    the options), the admission of a request and the headers of a budget decision."""

    #: The budget class (or classes) the middleware takes, and how a wrong one is told.
    _budget_class: ClassVar[type | tuple[type, ...]]
    _budget_hint: ClassVar[str]

    @keywords_checked
    def __init__(
        self,
        app: A,
        *,
        budget: B,
        estimate: EstimateFunc,
        key: KeyFunc | None = None,
        name: str = "budget",
        actual: _Actual[H] | None = None,
        usage_header: str = "x-tokens-used",
        read_body: bool = False,
        max_body: int = _MiB,
        paths: Iterable[str] | str | None = None,
        methods: Iterable[str] | str | None = None,
        fallback: str = ANONYMOUS,
        ietf: bool = True,
        failure_mode: str = OPEN,
        metrics: Metrics | None = None,
        clock: Clock | None = None,
        failure: str = UNSET,
    ) -> None:
        failure_mode = chosen_failure_mode(
            type(self).__name__,
            failure_mode,
            failure,
            stacklevel=5,  # past the keyword check
        )
        if not isinstance(budget, self._budget_class):
            raise ConfigurationError(f"budget {budget!r} must be {self._budget_hint}")
        if estimate is None:  # ``actual`` may be left out; ``estimate`` may not
            raise ConfigurationError(
                "token budget middleware estimate=None: a callable is needed, "
                "estimate(request, body) -> Usage, what a request reserves"
            )
        for what, func in (("estimate", estimate), ("actual", actual)):
            if func is not None and not callable(func):
                raise ConfigurationError(f"token budget middleware {what}={func!r}: a callable")
        if not isinstance(usage_header, str) or not usage_header.strip():
            raise ConfigurationError(f"usage_header {usage_header!r} must be a header name")
        if isinstance(max_body, bool) or not isinstance(max_body, int) or max_body < 0:
            raise ConfigurationError(f"max_body {max_body!r} must be a byte count >= 0")
        checked = checked_clock("token budget middleware", clock)
        check_bool("token budget middleware read_body", read_body)
        check_bool("token budget middleware ietf", ietf)
        self.selection = Selection(
            "token budget middleware",
            key=key,
            fallback=fallback,
            paths=_paths(paths),
            methods=methods,
        )
        self.app = app
        self.budget: B = budget
        self.estimate = estimate
        self.key = self.selection.key
        self.name = check_name(name)
        counted = check_metrics("token budget middleware", metrics, ("degraded",))
        self.failure_answer = FailureAnswer(failure_mode, counted, self.name, checked)
        self._reservation = optional_hook(counted, "budget_reservation")
        self.actual: _Actual[H] | None = actual
        #: The usage header's name, lower case.
        self.usage_header = usage_header.strip().lower()
        self.read_body = read_body
        self.max_body = max_body
        self.fallback = fallback
        self.ietf = ietf

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

    def admit_flow(self, request: RequestInfo, body: bytes) -> Flow[Reservation | Outcome]:
        """Reserve ``estimate(request, body)`` on the identity's budget, one store step: the
        granted ``Reservation`` (run the app, then settle it), else the ``Outcome`` to send
        (a 429 refusal, or the failure mode's answer to a store that failed: open runs the
        app with nothing reserved, closed answers 503). Run it with ``budget.run``."""
        estimate = self._usage(self.estimate(request, body), "estimate")
        key = f"{self.name}:{self.selection.identity(request)}"
        try:
            reservation = yield from self.budget.reserve_usage_flow(key, estimate)
        except StorageError as exc:
            return self.failure_answer.caught(exc)
        if not reservation.allowed:
            self.count("refused", estimate)
            return self.refused(reservation.decision)
        self.count("reserved", estimate)
        return reservation

    def count(self, outcome: str, usage: Usage | None) -> None:
        """A reservation's ``outcome`` and the tokens of ``usage`` (none: 0), counted by
        ``metrics.budget_reservation`` under ``name``."""
        tokens = 0 if usage is None else usage.amount("tokens")
        self._reservation(rule=self.name, outcome=outcome, tokens=tokens)

    def refused(self, decision: BudgetDecision) -> Outcome:
        """The 429 of a spent budget: the provider-style headers, ``Retry-After`` and a
        problem document saying when to come back."""
        detail = f"Token budget {self.name!r} exceeded"
        if math.isfinite(decision.retry_after):
            detail += f"; retry in {max(1, math.ceil(decision.retry_after))} s."
        else:
            detail += ": this request needs more than the budget can ever allow."
        return refusal(429, detail, headers=tuple(self.header_fields(decision)))

    def header_fields(self, decision: BudgetDecision) -> list[Header]:
        """The provider-style headers of ``decision`` (and the IETF fields unless ``ietf`` is
        off), as ``(name, value)`` strings."""
        return budget_headers(decision, ietf=self.ietf)

    def headers_of(self, decision: BudgetDecision) -> list[tuple[bytes, bytes]]:
        """The provider-style headers of ``decision``, as ASGI byte pairs."""
        return encoded(self.header_fields(decision))


def _paths(paths: object) -> Any:
    """``paths`` checked (None, one, or several; several as a tuple). ``methods`` are
    checked by ``Selection``, as every middleware's are."""
    if paths is not None and not isinstance(paths, str | re.Pattern):
        if not isinstance(paths, Iterable):
            raise ConfigurationError(
                f"token budget middleware paths={paths!r}: a path pattern or several"
            )
        paths = tuple(paths)
    return paths


def _text(value: bytes | str) -> str:
    return value.decode("latin-1") if isinstance(value, bytes) else value


class Settling(Generic[H]):
    """One granted request: its response's headers, what it used, and its settlement, made
    once (``settle_flow``) whichever comes first: the usage header at the response's
    start, the end of the body with ``actual``, or the end of the request at the estimate.
    """

    __slots__ = ("decision", "middleware", "request", "reservation", "response_headers", "settled")

    def __init__(
        self,
        middleware: TokenBudgetBase[Any, Any, H],
        request: RequestInfo,
        reservation: Reservation,
    ) -> None:
        self.middleware: TokenBudgetBase[Any, Any, H] = middleware
        self.request = request
        self.reservation = reservation
        self.settled = False
        self.response_headers: Sequence[tuple[H, H]] = ()
        #: The budget as the response's headers tell it: after the reservation, then after
        #: the settlement when it is made.
        self.decision: BudgetDecision = reservation.decision

    def started(self, headers: Sequence[tuple[H, H]]) -> Usage | None:
        """The response starts with ``headers`` (kept for ``actual``): the use its usage
        header reports when there is no ``actual``, to settle before the headers go out;
        else None."""
        self.response_headers = headers
        if self.middleware.actual is not None:
            return None
        return self._from_header(headers)

    def _from_header(self, headers: Sequence[tuple[H, H]]) -> Usage | None:
        wanted = self.middleware.usage_header
        for name, value in headers:
            if _text(name).lower() == wanted:
                text = _text(value).strip()
                if text.isascii() and text.isdigit():
                    return self.middleware._usage(int(text), "usage", self.reservation.estimate)
                log.warning(
                    "token budget: %s %r is not a whole number; the estimate stands", wanted, text
                )
                return None
        return None

    def actual_usage(self) -> Usage | None:
        """What ``actual`` says the request used, once its body is sent; None without one, or
        when it does not know."""
        actual = self.middleware.actual
        if actual is None:
            return None
        found = actual(self.request, self.response_headers)
        if found is None:
            return None
        return self.middleware._usage(found, "actual", self.reservation.estimate)

    def settle_flow(self, used: Usage | None) -> Flow[BudgetDecision | None]:
        """Settle once: with ``used``, or at the estimate when it is unknown; the budget
        after it (also in ``decision``), or None (settled before, or the store failed: the
        reservation keeps its charge). Run it with ``budget.run``."""
        if self.settled:
            return None
        self.settled = True
        reservation = self.reservation
        usage = used if used is not None else reservation.estimate
        try:
            settlement: Settlement = yield from self.middleware.budget.settle_usage_flow(
                reservation, usage
            )
        except StorageError as exc:
            self.middleware.count("settle_failed", None)
            log.warning("token budget settle failed (the reservation keeps its charge): %s", exc)
            return None
        if settlement.status == "unknown":  # its record expired: nothing was settled
            self.middleware.count("expired", None)
        else:
            self.middleware.count("settled", usage)
        if settlement.decision is not None:
            self.decision = settlement.decision
        return settlement.decision


class SettlingResponse:
    """A response iterable, blocking: settled with ``actual`` once the server (or Django) has
    iterated it all, else at the estimate when it closes it (after the app's iterable)."""

    __slots__ = ("_budget", "_result", "_settling")

    def __init__(
        self, result: Iterable[bytes], settling: Settling[str], budget: TokenBudget
    ) -> None:
        self._result = result
        self._settling = settling
        self._budget = budget

    def __iter__(self) -> Iterator[bytes]:
        # Not ``yield from``: closing this generator would close the app's iterable too,
        # a second time after ``close()``.
        for chunk in self._result:  # noqa: UP028
            yield chunk
        self._budget.run(self._settling.settle_flow(self._settling.actual_usage()))

    def close(self) -> None:
        """Close the app's iterable (as WSGI asks), then settle if nothing has."""
        try:
            close_wsgi(self._result)
        finally:
            self._budget.run(self._settling.settle_flow(None))


async def settled_chunks(
    chunks: AsyncIterator[bytes], settling: Settling[Any], budget: AsyncTokenBudget
) -> AsyncIterator[bytes]:
    """An async stream's chunks: settled with ``actual`` once the last is taken, else at the
    estimate when whoever takes them closes the iterator early (the client left)."""
    try:
        async for chunk in chunks:
            yield chunk
        await to_the_end(budget.run(settling.settle_flow(settling.actual_usage())))
    finally:
        await to_the_end(budget.run(settling.settle_flow(None)))
