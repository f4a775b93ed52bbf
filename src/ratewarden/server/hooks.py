"""What the rate limit service tells its hooks and its log besides the decisions.

``ServiceHooks`` is the instrumentation interface (``ratewarden serve`` installs
``ServiceStats``). ``Reports`` holds the service's current hooks and writes what
happens beside a decision: a store failure (bounded log lines naming the rules it
failed, ``failure_lines``, and ``on_store_error``), a value past ``max_values_per_rule`` (a line and
``on_value_overflow``; all limit overrides of a domain as one pool, ``value_cap.OVERRIDES``),
a limit override it could not apply (a bounded line), a request to a domain the config
does not know (``on_domain_not_found``), and each store call's duration: it is the metrics object
of the service's limiter, whose ``store_latency`` it passes on to
``on_store_call``. A hook that raises is logged and swallowed: metrics never
change an answer.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

from ratewarden.clock import Clock
from ratewarden.errors import StorageError
from ratewarden.limiter import failure_reason
from ratewarden.metrics import LogRateLimiter, Metrics
from ratewarden.server.config import DescriptorRule
from ratewarden.server.response import DescriptorOutcome
from ratewarden.server.value_cap import OVERRIDES

__all__ = ["FAILURE_INTERVAL", "NAMED_RULES", "FailureLines", "Reports", "ServiceHooks"]

# The service's logger: records keep the name operators filter on.
log = logging.getLogger("ratewarden.server.service")


class ServiceHooks:
    """Instrumentation callbacks; subclass and override what you count.

    Called synchronously on the request path, after the response is built.
    An exception raised by a hook is logged and swallowed: metrics never change
    an answer.
    """

    def on_decision(self, domain: str, rule: DescriptorRule, outcome: DescriptorOutcome) -> None:
        """Once per request descriptor that had a rule (after replaces and overrides)."""

    def on_decisions(self, domain: str, outcomes: Sequence[DescriptorOutcome]) -> None:
        """Once per request: the outcome of each descriptor that had a rule, in request
        order (each names its rule). By default ``on_decision`` for each, a failing one
        logged and the rest still told; override it to count a request's at once."""
        for outcome in outcomes:
            try:
                self.on_decision(domain, outcome.rule, outcome)
            except Exception:
                log.exception(
                    "hook on_decision failed; the answer is unaffected",
                    extra={"event": "hook_failed", "hook": "on_decision"},
                )

    def on_store_error(self, domain: str, rule: DescriptorRule, error: Exception) -> None:
        """The store failed for this rule; ``rule.failure_mode`` decides instead."""

    def on_store_call(self, seconds: float) -> None:
        """One store call (one descriptor's hit, or one joint step) took ``seconds``,
        failed or not."""

    def on_value_overflow(self, domain: str, rule: DescriptorRule) -> None:
        """A new value past ``max_values_per_rule`` was counted on the rule's overflow counter.
        For a limit override, ``rule`` is its domain's pool of overrides (path
        ``<domain>.(limit overrides)``), which share one cap and one overflow counter."""

    def on_domain_not_found(self, domain: str, descriptors: int) -> None:
        """A request named a ``domain`` the config does not know: its ``descriptors`` were
        allowed without a rule (envoyproxy/ratelimit's ``<domain>.domain_not_found``)."""


#: Seconds over which a reason's store failure lines are bounded.
FAILURE_INTERVAL = 60.0
#: Rules a reason's lines name per interval, one line each; the others are counted.
NAMED_RULES = 5
#: Reasons remembered at once (each an error class, or ``breaker_open``).
_MAX_REASONS = 64
#: Rules not named a reason counts per interval (a limit override's rule is named after its
#: values: without a bound, a flood of them would grow the count's memory).
_MAX_UNNAMED = 1024


@dataclass(slots=True)
class _Reason:
    """One reason's interval: since when, the rules it named, and what it held back."""

    since: float
    named: set[str] = field(default_factory=set)
    lines: int = 0  # lines held back
    unnamed: dict[str, None] = field(default_factory=dict)  # their rules not named, in order


class FailureLines:
    """The store failure lines of ``ratewarden serve``: bounded, and naming the rules.

    An outage fails every call. Per reason (the error's class, or ``breaker_open`` for the
    open breaker, as the ``degraded`` metric says it) and per ``FAILURE_INTERVAL``, one line
    for each of the first ``NAMED_RULES`` rules that fail, whatever their failure mode (so a
    ``closed`` rule denying every call is named, not only the first rule to fail); the other
    failures are counted, and the reason's next line says how many lines it held back and
    names the first rules among them. A ``StorageError`` is the line ``store_failed``; any
    other exception (the store's own boundary missed it) is ``store_call_raised``, with its
    traceback on the first line of an interval only.
    """

    __slots__ = ("_clock", "_lock", "_reasons")

    def __init__(self, clock: Clock) -> None:
        self._clock = clock
        self._lock = threading.Lock()
        self._reasons: dict[str, _Reason] = {}

    def failed(self, rule: DescriptorRule, error: BaseException) -> None:
        """Write the line for ``rule``'s failure, or count it."""
        reason = failure_reason(error)
        held = self._take(reason, rule.path)
        if held is None:
            return
        first, lines, unnamed, more = held
        note = ""
        if lines:
            note = f" ({lines} similar {'line' if lines == 1 else 'lines'} suppressed"
            if unnamed:
                others = ", ".join(unnamed) + (f" and {more} more" if more > 0 else "")
                note += f", for rules not named: {others}"
            note += ")"
        if isinstance(error, StorageError):
            log.warning(
                "store failed (%s); failure_mode %s answers for %s%s",
                error,
                rule.failure_mode,
                rule.path,
                note,
                extra={"event": "store_failed", "rule": rule.path, "reason": reason},
            )
            return
        log.warning(
            "store call for %s raised unexpectedly (%s: %s); failure_mode %s answers%s",
            rule.path,
            type(error).__name__,
            error,
            rule.failure_mode,
            note,
            exc_info=error if first else None,
            extra={"event": "store_call_raised", "rule": rule.path, "reason": reason},
        )

    def _take(self, reason: str, path: str) -> tuple[bool, int, list[str], int] | None:
        """None when the line is held back (counted); else (first of its interval, lines
        held back before it, rules among them not named, how many more)."""
        now = self._clock.now()
        with self._lock:
            found = self._reasons.get(reason)
            if found is None or now - found.since >= FAILURE_INTERVAL:
                if found is None and len(self._reasons) >= _MAX_REASONS:
                    self._reasons.pop(next(iter(self._reasons)))
                fresh = _Reason(now, {path})
                self._reasons[reason] = fresh
                if found is None:
                    return True, 0, [], 0
                unnamed = list(found.unnamed)
                return True, found.lines, unnamed[:NAMED_RULES], len(unnamed) - NAMED_RULES
            if path not in found.named and len(found.named) < NAMED_RULES:
                found.named.add(path)
                return False, 0, [], 0
            found.lines += 1
            if path not in found.named and len(found.unnamed) < _MAX_UNNAMED:
                found.unnamed[path] = None
            return None


class Reports(Metrics):
    """The service's reports to ``hooks`` (swap them at any time) and to its log.

    As the limiter's ``Metrics`` only ``store_latency`` counts; the limiter's
    decisions are reported by the service itself, per descriptor.
    """

    __slots__ = ("_failures", "_lines", "hooks")

    def __init__(self, hooks: ServiceHooks, clock: Clock) -> None:
        self.hooks = hooks
        # One line per kind per minute, with a count: a client may cause one on every call.
        self._lines = LogRateLimiter(60.0, clock=clock)
        self._failures = FailureLines(clock)

    def store_latency(self, *, seconds: float) -> None:
        try:
            self.hooks.on_store_call(seconds)
        except Exception:
            log.exception(
                "hook on_store_call failed; the answer is unaffected",
                extra={"event": "hook_failed", "hook": "on_store_call"},
            )

    def store_error(self, rule: DescriptorRule, error: Exception) -> None:
        """The store failed for ``rule`` (or the open breaker refused the call): a bounded
        line (``FailureLines``), and the hooks told, the open breaker's ``CircuitOpenError``
        as it is (its ``reason`` is ``breaker_open``, as the library's)."""
        self._failures.failed(rule, error)
        try:
            self.hooks.on_store_error(rule.domain, rule, error)
        except Exception:
            log.exception(
                "hook on_store_error failed; the answer is unaffected",
                extra={"event": "hook_failed", "hook": "on_store_error"},
            )

    def overflow(self, rule: DescriptorRule, limit: int | None, *, override: bool) -> None:
        """A new value of ``rule`` went to its overflow counter (``limit`` values held).

        A limit override's rule is made per request and named after its values; all of a
        domain's overrides share one cap, so they are reported as one pool: one line a
        minute and one hook rule per domain (path ``<domain>.(limit overrides)``, the
        override's own limits), whatever the junk values."""
        pool = rule
        message, whose = "rule %s holds %d distinct values", rule.path
        if override:  # value_cap counts every override of a domain in one group
            pool = replace(rule, path=f"{rule.domain}.{OVERRIDES}")
            message, whose = "the limit overrides of domain %r hold %d distinct values", rule.domain
        self._lines.log(
            log,
            logging.WARNING,
            "overflow " + pool.path,
            message + "; new ones share one overflow counter",
            whose,
            limit,
            extra={"event": "value_overflow", "rule": pool.path},
        )
        try:
            self.hooks.on_value_overflow(pool.domain, pool)
        except Exception:
            log.exception(
                "hook on_value_overflow failed; the answer is unaffected",
                extra={"event": "hook_failed", "hook": "on_value_overflow"},
            )

    def override_ignored(self, domain: str, kind: str, why: str) -> None:
        """A limit override in ``domain`` could not apply (``why``); the config's rule decided.
        A line at most once a minute per domain and ``kind`` (``statuses.Ignored``): a client
        may send one on every call."""
        self._lines.log(
            log,
            logging.WARNING,
            f"override {kind} {domain}",
            "ignoring a limit override in domain %r: %s; the config applies",
            domain,
            why,
            extra={"event": "limit_override_ignored", "domain": domain},
        )

    def domain_not_found(self, domain: str, descriptors: int) -> None:
        """A request to an unknown ``domain``, with ``descriptors`` descriptors."""
        try:
            self.hooks.on_domain_not_found(domain, descriptors)
        except Exception:
            log.exception(
                "hook on_domain_not_found failed; the answer is unaffected",
                extra={"event": "hook_failed", "hook": "on_domain_not_found"},
            )
