"""What the rate limit service tells its hooks and its log besides the decisions.

``ServiceHooks`` is the instrumentation interface (``ratewarden serve`` installs
``ServiceStats``). ``Reports`` holds the service's current hooks and writes what
happens beside a decision: a store failure (a bounded log line and
``on_store_error``), a value past ``max_values_per_rule`` (a line and
``on_value_overflow``; all limit overrides of a domain as one pool, ``value_cap.OVERRIDES``),
a limit override it could not apply (a bounded line), a request to a domain the config
does not know (``on_domain_not_found``), and each store call's duration: it is the metrics object
of the service's limiter, whose ``store_latency`` it passes on to
``on_store_call``. A hook that raises is logged and swallowed: metrics never
change an answer.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import replace

from ratewarden.clock import Clock
from ratewarden.errors import CircuitOpenError, StorageError, StorageUnavailableError
from ratewarden.metrics import LogRateLimiter, Metrics
from ratewarden.server.config import DescriptorRule
from ratewarden.server.response import DescriptorOutcome
from ratewarden.server.value_cap import OVERRIDES

__all__ = ["Reports", "ServiceHooks"]

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


class Reports(Metrics):
    """The service's reports to ``hooks`` (swap them at any time) and to its log.

    As the limiter's ``Metrics`` only ``store_latency`` counts; the limiter's
    decisions are reported by the service itself, per descriptor.
    """

    __slots__ = ("_lines", "hooks")

    def __init__(self, hooks: ServiceHooks, clock: Clock) -> None:
        self.hooks = hooks
        # An outage fails every call: one line per kind per minute, with a count.
        self._lines = LogRateLimiter(60.0, clock=clock)

    def store_latency(self, *, seconds: float) -> None:
        try:
            self.hooks.on_store_call(seconds)
        except Exception:
            log.exception(
                "hook on_store_call failed; the answer is unaffected",
                extra={"event": "hook_failed", "hook": "on_store_call"},
            )

    def store_error(self, rule: DescriptorRule, error: Exception) -> None:
        """The store failed for ``rule`` (or the open breaker refused the call)."""
        if isinstance(error, CircuitOpenError):
            # The open breaker has always been reported as the store being unavailable
            # (the name is the reason label of the degraded metric).
            error = StorageUnavailableError(str(error))
        if isinstance(error, StorageError):
            self._lines.log(
                log,
                logging.WARNING,
                type(error).__name__,
                "store failed (%s); failure_mode %s answers for %s",
                error,
                rule.failure_mode,
                rule.path,
                extra={"event": "store_failed", "rule": rule.path},
            )
        else:
            log.warning(
                "store call for %s raised unexpectedly",
                rule.path,
                exc_info=error,
                extra={"event": "store_call_raised", "rule": rule.path},
            )
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
