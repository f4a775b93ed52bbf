"""The load shedding middlewares' shared, I/O-free part: options, traffic classes, answers.

``Shedding`` checks the options once, picks each request's traffic class and
says what a shedder's answer means for HTTP: a shed request gets ``status``
(503 by default: the server is overloaded, the client is over no limit of its
own) with ``Retry-After`` and a problem document naming the class, the
utilization and the class's ceiling. The ASGI and WSGI shells (``shedding``)
only ask the shedder and send.

A request's class comes from ``classify(request)``, a class name of the
shedder's ``ShedPolicy``; None means "no class said" and gets ``default``. A
name the policy does not have, or a ``classify`` that raises, is the app's bug,
not the client's: the request is classed ``default`` (still shed like any other
request of that class) and an error is logged, at most once a minute. A 500 for
every request would turn a typo into an outage, and shedding such requests
outright would do the same under no load at all.
``class_from_header`` trusts a header the app says it may trust: a value that is
no class of the policy is what a client may send, so it quietly gets the
default.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterable
from typing import Any

from ratewarden.budgets import AsyncFleetShedder, FleetShedder, LoadShedder, ShedDecision
from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError, StorageError
from ratewarden.limiter import Lease, check_metrics
from ratewarden.metrics import LogRateLimiter, Metrics
from ratewarden.middleware._clock import checked_clock
from ratewarden.middleware._failure import FailureAnswer
from ratewarden.middleware._holding import Held
from ratewarden.middleware._outcome import PASS, Outcome, refusal
from ratewarden.middleware._request import RequestInfo
from ratewarden.middleware._rules import check_name, compile_paths, method_set, selects

__all__ = ["ClassFromHeader", "ClassFunc", "Shedding", "class_from_header"]

log = logging.getLogger("ratewarden.middleware")

#: A request's traffic class: a class name of the shedder's policy, or None for the default.
ClassFunc = Callable[[RequestInfo], str | None]

Shedder = LoadShedder | FleetShedder | AsyncFleetShedder


class ClassFromHeader:
    """``class_from_header``'s classifier: the class a request names in ``header``."""

    __slots__ = ("default", "header")

    def __init__(self, header: str, default: str | None) -> None:
        self.header = header
        self.default = default

    def __call__(self, request: RequestInfo) -> str | None:
        value = request.headers.get(self.header)
        return value.strip() if value else None

    def __repr__(self) -> str:
        default = f", default={self.default!r}" if self.default is not None else ""
        return f"class_from_header({self.header!r}{default})"


def class_from_header(header: str = "x-priority", *, default: str | None = None) -> ClassFromHeader:
    """The traffic class a request names in ``header`` (``X-Priority: batch``), for an app
    whose clients may be trusted to say it (internal callers, a gateway that sets it).

    A request without the header, or with a value that is no class of the policy,
    gets ``default`` (the middleware's ``default`` when None). Any client can claim
    the first class: behind an untrusting edge, write a ``classify`` of your own.
    """
    if not isinstance(header, str) or not header.strip():
        raise ConfigurationError(f"class_from_header header {header!r} must be a header name")
    if default is not None and (not isinstance(default, str) or not default):
        raise ConfigurationError(f"class_from_header default {default!r} must be a class name")
    return ClassFromHeader(header.strip().lower(), default)


def _whole(what: str, value: object, minimum: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ConfigurationError(
            f"load shedding middleware {what}={value!r}: a whole number >= {minimum}"
        )
    return value


class Shedding:
    """The options both middlewares share, checked when the middleware is built."""

    def __init__(
        self,
        shedder: Shedder,
        *,
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
        who = "load shedding middleware"
        classes = [found for found, _ in shedder.policy.classes]
        self.classes = frozenset(classes)
        if classify is not None and not callable(classify):
            raise ConfigurationError(f"{who} classify={classify!r}: a callable of the request")
        self.classify = classify
        self.quiet = isinstance(classify, ClassFromHeader)
        own = classify.default if isinstance(classify, ClassFromHeader) else None
        if own is not None and default is not None and own != default:
            raise ConfigurationError(
                f"{who}: default={default!r} and {classify!r} name two defaults; give one"
            )
        chosen = own or default
        self.default = chosen if chosen is not None else classes[1]
        if not isinstance(self.default, str) or self.default not in self.classes:
            raise ConfigurationError(
                f"{who} default class {self.default!r} is not a class of the shed policy "
                f"(one of {', '.join(classes)})"
            )
        self.name = check_name(name)
        if status not in (429, 503):
            raise ConfigurationError(f"{who} status={status!r}: 503 (overloaded) or 429")
        self.status = status
        self.retry_after = _whole("retry_after", retry_after, 0)
        self.paths = compile_paths(paths)
        self.methods = method_set(methods, who)
        self.clock = checked_clock(who, clock)
        self.metrics = check_metrics(who, metrics, ("degraded", "shed_decision"))
        self.failure_answer = FailureAnswer(failure_mode, self.metrics, self.name, self.clock)
        self.ttl = _check_ttl(shedder)
        # A fleet shedder's slots: a class is shed when its whole slots are in flight.
        self._fleet: tuple[int, dict[str, int]] | None = None
        if not isinstance(shedder, LoadShedder):
            self._fleet = (shedder.capacity, shedder.limits)
        self._lines = LogRateLimiter(60.0, clock=self.clock)

    def matches(self, request: RequestInfo) -> bool:
        """True when the request is subject to shedding (its method and path are selected)."""
        return selects(self.paths, self.methods, request)

    def traffic_class(self, request: RequestInfo) -> str:
        """The request's class: ``classify``'s answer when the policy has it, else ``default``."""
        if self.classify is None:
            return self.default
        try:
            found: object = self.classify(request)
        except Exception as exc:  # the app's bug: class it by default, and say so
            self._complain(f"raised {type(exc).__name__}", f"raised {type(exc).__name__}: {exc}")
            return self.default
        if isinstance(found, str) and found in self.classes:
            return found
        if found is not None and not self.quiet:
            kind = f"returned a {type(found).__name__}"
            self._complain(kind, f"returned {found!r}, not a class of the shed policy")
        return self.default

    def _complain(self, kind: str, what: str) -> None:
        """Log ``what`` at most once a minute per ``kind`` of bug (the exception's type, or
        the type of a value that names no class), so that one bug does not hide another."""
        self._lines.log(
            log,
            logging.ERROR,
            f"classify {kind}",
            "ratewarden %r: classify %s; the request is classed %r",
            self.name,
            what,
            self.default,
        )

    def load(self, shedder: LoadShedder, traffic_class: str) -> Outcome:
        """A ``LoadShedder``'s answer for one request: pass it on, or shed it. A utilization
        that cannot be read (the callable raised, or gave no number) is answered by the
        failure mode, as a store failure is."""
        try:
            decision = shedder.admit(traffic_class)
        except Exception as exc:
            return self._unmeasured(exc)
        return PASS if self._counted(decision) else self.shed(decision)

    def fleet(
        self, found: tuple[ShedDecision, Lease] | StorageError, limiter: object
    ) -> Held | Outcome:
        """What a fleet shedder's acquire gave (its decision and lease, or the StorageError it
        raised) means: the slot, held (run the app, then give it back), else the Outcome to
        send (a shed request's refusal, or the failure mode's: open runs the app, no slot)."""
        if isinstance(found, StorageError):
            return self.failure_answer.caught(found, limiter)
        decision, lease = found
        if not self._counted(decision):
            return self.shed(decision)
        return Held(lease, self.ttl, self.clock)

    def _counted(self, decision: ShedDecision) -> bool:
        """Whether ``decision`` admits its request, counted as ``metrics.shed_decision``."""
        self.metrics.shed_decision(
            rule=self.name, traffic_class=decision.traffic_class, admitted=decision.allowed
        )
        return decision.allowed

    def shed(self, decision: ShedDecision) -> Outcome:
        """A shed request's answer: ``status``, ``Retry-After`` and a problem document."""
        utilization = round(decision.utilization, 4)
        traffic_class, ceiling = decision.traffic_class, decision.ceiling
        if self._fleet is not None and traffic_class in self._fleet[1]:
            capacity, limits = self._fleet
            detail = (
                f"Overloaded: {traffic_class!r} requests are shed while {limits[traffic_class]} "
                f"of the {capacity} slots are in flight (the class's ceiling {ceiling} of the "
                f"capacity, in whole slots: utilization {utilization})"
            )
        else:
            detail = (
                f"Overloaded: {traffic_class!r} requests are shed at utilization "
                f"{utilization}, at or above the class's ceiling of {ceiling}"
            )
        detail += f"; retry in {self.retry_after} s." if self.retry_after else "."
        return refusal(
            self.status,
            detail,
            retry_after=self.retry_after or None,
            extra={
                "traffic_class": decision.traffic_class,
                "utilization": utilization,
                "ceiling": decision.ceiling,
            },
        )

    def _unmeasured(self, error: Exception) -> Outcome:
        mode = self.failure_answer.failure_mode
        reason = type(error).__name__
        self.metrics.degraded(rule=self.name, failure_mode=mode, reason=reason)
        self._lines.log(
            log,
            logging.ERROR,
            "utilization",
            "ratewarden %r: the utilization could not be read (%s: %s); failure mode %r answers",
            self.name,
            reason,
            error,
            mode,
        )
        if mode == "open":
            return PASS
        detail = "The load shedder cannot read the load now; retry in 1 s."
        return refusal(503, detail, retry_after=1, extra={"retry_after": 1})


def _check_ttl(shedder: Any) -> float:
    """A fleet shedder's slot TTL (0 for a LoadShedder, which holds nothing)."""
    if isinstance(shedder, LoadShedder):
        return 0.0
    ttl = shedder.ttl
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(
            f"load shedding middleware: the shedder's ttl {ttl!r} must be a positive number "
            "of seconds (a slot's lease)"
        )
    return float(ttl)
