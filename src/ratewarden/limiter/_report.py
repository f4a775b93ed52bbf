"""How a failure mode's answers are reported: counted, and logged at a bounded rate.

A limiter reports the requests its own failure mode answered under its own
name. An adapter that hands the limiter a failure mode per call and reports under
its own name (the HTTP middleware: ``metrics=``, ``name=``, its logger, its
clock) passes a ``FailureReport`` as the call's ``on_failure`` hook: the same
counting and the same bounded log line, in one place.
"""

from __future__ import annotations

import logging
import warnings

from ratewarden.clock import Clock
from ratewarden.deprecation import UNSET, renamed
from ratewarden.errors import CircuitOpenError, ConfigurationError
from ratewarden.limiter._metrics_check import check_metrics
from ratewarden.limiter._settings import check_failure_mode
from ratewarden.metrics import LogRateLimiter, Metrics

__all__ = ["LOG_INTERVAL", "FailureReport", "failure_reason"]

#: Seconds between two warnings for the same reason (the lines in between are counted).
LOG_INTERVAL = 60.0


def failure_reason(error: BaseException) -> str:
    """The ``reason`` of a failure: ``breaker_open`` when the breaker refused the call,
    else the exception's class name (``StorageUnavailableError``)."""
    if isinstance(error, CircuitOpenError):
        return "breaker_open"
    return type(error).__name__


class FailureReport:
    """Count and log each request the failure mode ``failure_mode`` answered for ``name``.

    Calling it with the store's exception (it is an ``on_failure`` hook) calls
    ``metrics.degraded(rule=name, failure_mode=failure_mode, reason=...)`` and
    writes a warning to ``logger``, at most one per reason per ``interval``
    seconds of ``clock``; the next one says how many similar lines were held
    back. ``mode`` is the deprecated keyword name of ``failure_mode``. A value that is
    no failure mode (``open``, ``closed``, ``local``) is refused as everywhere else.

    The hook is told the error only, so the mode it reports is its own: hand the hit
    the same ``failure_mode`` (as the middleware does), else the limiter's own mode
    answers while the report names this one.
    """

    __slots__ = ("_lines", "failure_mode", "logger", "metrics", "name")

    def __init__(
        self,
        failure_mode: str = UNSET,
        *,
        name: str,
        clock: Clock,
        metrics: Metrics | None = None,
        logger: logging.Logger | str = "ratewarden.limiter",
        interval: float = LOG_INTERVAL,
        mode: str = UNSET,
    ) -> None:
        failure_mode = renamed("FailureReport", "mode", "failure_mode", mode, failure_mode, UNSET)
        if failure_mode is UNSET:
            raise ConfigurationError("FailureReport needs a failure_mode (open, closed or local)")
        failure_mode = str(check_failure_mode(failure_mode))
        checked = check_metrics("FailureReport", metrics, ("degraded",))
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"name {name!r} must be a non-empty string")
        self.failure_mode = failure_mode
        self.name = name
        self.metrics: Metrics = checked
        self.logger = logging.getLogger(logger) if isinstance(logger, str) else logger
        self._lines = LogRateLimiter(interval, clock=clock)

    def __call__(self, error: Exception) -> None:
        reason = failure_reason(error)
        self.metrics.degraded(rule=self.name, failure_mode=self.failure_mode, reason=reason)
        self._lines.log(
            self.logger,
            logging.WARNING,
            reason,
            "ratewarden %r: the store failed (%s: %s); failure mode %r answers",
            self.name,
            reason,
            error,
            self.failure_mode,
        )

    @property
    def mode(self) -> str:
        """Deprecated (one release): ``failure_mode``, with a ``DeprecationWarning``."""
        warnings.warn(
            "FailureReport.mode is deprecated; read failure_mode", DeprecationWarning, stacklevel=2
        )
        return self.failure_mode

    def __repr__(self) -> str:
        return f"FailureReport({self.failure_mode!r}, name={self.name!r})"
