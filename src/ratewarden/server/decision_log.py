"""One log line per decided descriptor, at ``--log-level debug``.

envoyproxy/ratelimit logs each descriptor and the limit it applies when ``LOG_LEVEL`` is
``debug``; operators read those lines to see why a request was limited. ``DecisionLog``
wraps the service's hooks (the stats) and writes a ``decision`` line for each descriptor
that had a rule, after the response is built, then hands the outcomes on unchanged.

It is put in front of the hooks only when the log level is ``debug`` (``with_decision_log``),
so at any other level a request pays nothing for it. The lines name the request's
descriptor values (user ids, API keys...), as upstream's do: they are for debugging, not
for a production log.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from ratewarden.server.config import DescriptorRule
from ratewarden.server.hooks import ServiceHooks
from ratewarden.server.response import DescriptorOutcome, shown_layer

__all__ = ["DecisionLog", "describe", "with_decision_log"]

# The service's logger: records keep the name operators filter on.
log = logging.getLogger("ratewarden.server.service")

#: Characters of one descriptor value a line shows (a caller may send any string).
_LONGEST = 200


def _short(text: str) -> str:
    return text if len(text) <= _LONGEST else text[:_LONGEST] + "..."


def describe(outcome: DescriptorOutcome) -> str:
    """The line for one outcome: what was asked, which rule, what it answered."""
    entries = ",".join(f"({_short(key)}={_short(value)})" for key, value in outcome.entries)
    rule = outcome.rule
    if outcome.failure is not None:
        answer = f"store failed: failure mode {outcome.failure}"
    elif outcome.shadowed:
        answer = "OVER_LIMIT, reported OK (shadow_mode)"
    else:
        answer = "OVER_LIMIT" if outcome.over_limit else "OK"
    decision = outcome.decision
    if rule.unlimited:
        limit = "unlimited"
    elif decision is None:
        limit = ", ".join(str(rate) for rate in rule.rates) or "no limit"
    else:  # the limit and count the status reports (over: nothing left for these hits)
        remaining = 0 if outcome.over_limit else max(decision.remaining, 0)
        limit = f"limit {shown_layer(decision).rate}, remaining {remaining}"
    cached = ", from the over-limit cache" if outcome.local_cache else ""
    return (
        f"descriptor {entries} in domain {_short(outcome.domain)}: rule {rule.path} "
        f"({rule.algorithm}, {limit}), hits {outcome.hits}: {answer}{cached}"
    )


class DecisionLog(ServiceHooks):
    """``inner``'s hooks, with a ``decision`` debug line per decided descriptor."""

    __slots__ = ("inner",)

    def __init__(self, inner: ServiceHooks) -> None:
        self.inner = inner

    def on_decisions(self, domain: str, outcomes: Sequence[DescriptorOutcome]) -> None:
        if log.isEnabledFor(logging.DEBUG):
            for outcome in outcomes:
                log.debug(
                    describe(outcome),
                    extra={
                        "event": "decision",
                        "domain": domain,
                        "rule": outcome.rule.path,
                        "over_limit": outcome.over_limit,
                    },
                )
        self.inner.on_decisions(domain, outcomes)

    def on_decision(self, domain: str, rule: DescriptorRule, outcome: DescriptorOutcome) -> None:
        self.inner.on_decision(domain, rule, outcome)

    def on_store_error(self, domain: str, rule: DescriptorRule, error: Exception) -> None:
        self.inner.on_store_error(domain, rule, error)

    def on_store_call(self, seconds: float) -> None:
        self.inner.on_store_call(seconds)

    def on_value_overflow(self, domain: str, rule: DescriptorRule) -> None:
        self.inner.on_value_overflow(domain, rule)

    def on_domain_not_found(self, domain: str, descriptors: int) -> None:
        self.inner.on_domain_not_found(domain, descriptors)


def with_decision_log(hooks: ServiceHooks, log_level: str) -> ServiceHooks:
    """``hooks`` as they are, or behind a ``DecisionLog`` when ``log_level`` is debug."""
    return DecisionLog(hooks) if log_level == "debug" else hooks
