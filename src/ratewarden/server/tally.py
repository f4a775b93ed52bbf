"""What the service decided since the last flush, in plain integers: ``Tally``.

``ServiceStats`` counts every descriptor of every call. Counting straight into
Prometheus counters and the dashboard's figures costs a dozen locked increments
a descriptor; the tally costs a dict lookup and a few additions under one lock,
and ``take()`` hands everything over at once, for ``ServiceStats.flush`` to move
into the registry, the dashboard and StatsD. Nothing here knows those.

Per ``(domain, metric key, rule path, algorithm)`` a slot of counts, indexed by
the constants below: the five per-key counters of envoyproxy/ratelimit and the
over-limit cache's (in hits), ``ratewarden_decisions_total``'s three outcomes,
and the dashboard's per-rule counts (in decisions: decisions, over, near,
shadowed, degraded, in ``LiveStats.FIELDS``' order). Every descriptor with a rule is
one of ``ratewarden_decisions_total``'s outcomes, as it is one of the dashboard's
decisions: a limit of 0's denied (shadowed on a ``shadow_mode`` rule) and an unlimited
rule's allowed, though no store was asked. A descriptor a failure mode answered (the
store failed) counts as a decision, degraded, and in ``ratewarden_decisions_total``,
never in the hit counters, over, near or the top keys: no limit was checked. Beside
them, the top-key candidates (over, near, shadow), each store call's and each call's
duration, the calls answered by the fallback, and the calls the client gave up on
(cancelled). ``full`` says when it holds ``MAX_PENDING``
entries of a kind: flush then, so that memory stays bounded between flushes whatever
the traffic.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass, field

from ratewarden.server.config import DescriptorRule
from ratewarden.server.response import DescriptorOutcome

__all__ = ["MAX_PENDING", "Tally", "Taken"]

(
    TOTAL,
    OVER,
    NEAR,
    WITHIN,
    SHADOW,
    LOCAL,
    ALLOWED,
    DENIED,
    SHADOWED,
    LIVE_DECISIONS,
    LIVE_OVER,
    LIVE_NEAR,
    LIVE_SHADOWED,
    LIVE_DEGRADED,
) = range(14)
SLOT = 14
#: Entries of one kind a tally holds before it asks to be flushed.
MAX_PENDING = 8192
#: ``(slot index, outcome label)`` of ``ratewarden_decisions_total``.
OUTCOMES = ((ALLOWED, "allowed"), (DENIED, "denied"), (SHADOWED, "shadowed"))

Slot = tuple[str, str, str, str]
Top = tuple[str, str, tuple[tuple[str, str], ...], int]


@dataclass(slots=True)
class Taken:
    """Everything a tally held: its slots, top-key candidates, durations, failed and cancelled
    calls."""

    slots: dict[Slot, list[int]] = field(default_factory=dict)
    top: list[Top] = field(default_factory=list)
    store_times: list[float] = field(default_factory=list)
    call_times: list[float] = field(default_factory=list)
    failed_calls: int = 0
    cancelled_calls: int = 0


class Tally:
    """Counts since the last ``take()``; thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._now = Taken()

    def decision(self, domain: str, rule: DescriptorRule, outcome: DescriptorOutcome) -> bool:
        """Count one descriptor's outcome (``rule`` is ``outcome.rule``); True when the tally
        is full (flush it)."""
        return self.decisions(domain, (outcome,))

    def decisions(self, domain: str, outcomes: Sequence[DescriptorOutcome]) -> bool:
        """Count a request's outcomes, under one hold of the lock; True when the tally is
        full (flush it)."""
        with self._lock:
            now = self._now
            slots = now.slots
            for outcome in outcomes:
                rule = outcome.rule
                hits = outcome.hits
                over = outcome.over_limit
                shadowed = outcome.shadowed
                near = outcome.near_limit_hits
                decision = outcome.decision
                slot = (domain, outcome.metric_key, rule.path, rule.algorithm)
                counts = slots.get(slot)
                if counts is None:
                    counts = slots[slot] = [0] * SLOT
                counts[LIVE_DECISIONS] += 1
                if decision is not None:
                    if shadowed or decision.shadowed:
                        counts[SHADOWED] += 1
                    else:
                        counts[ALLOWED if decision.allowed else DENIED] += 1
                else:
                    # No Decision: a failure mode answered (as the library's PrometheusMetrics
                    # counts it), a limit of 0 denied or an unlimited rule allowed, without a
                    # store; a decision all the same, as the dashboard counts it.
                    counts[SHADOWED if shadowed else DENIED if over else ALLOWED] += 1
                if outcome.failure is not None:
                    # No limit was checked: not a hit under or over one (upstream counts none
                    # when Redis fails), only a degraded decision; failure_mode_allowed/denied
                    # and store_error count it.
                    counts[LIVE_DEGRADED] += 1
                    continue
                counts[TOTAL] += hits
                if over:
                    counts[OVER] += hits
                    if outcome.local_cache:
                        counts[LOCAL] += hits
                    if shadowed:
                        counts[SHADOW] += hits
                        counts[LIVE_SHADOWED] += 1
                    else:
                        counts[LIVE_OVER] += 1
                else:
                    counts[WITHIN] += hits
                    if near:
                        counts[NEAR] += near
                        counts[LIVE_NEAR] += 1
                if over or near:
                    category = "shadow" if shadowed else "over" if over else "near"
                    weight = near if category == "near" else max(hits, 1)
                    now.top.append((category, rule.path, outcome.entries, weight))
            return len(slots) >= MAX_PENDING or len(now.top) >= MAX_PENDING

    def store_call(self, seconds: float) -> bool:
        """One store call took ``seconds``; True when the tally is full."""
        with self._lock:
            self._now.store_times.append(seconds)
            return len(self._now.store_times) >= MAX_PENDING

    def call(self, seconds: float, failed: bool, cancelled: bool = False) -> bool:
        """One call answered in ``seconds`` (``failed``: by the fallback; ``cancelled``: not
        answered, the client gave up after ``seconds``); True when full."""
        with self._lock:
            now = self._now
            now.call_times.append(seconds)
            now.failed_calls += failed
            now.cancelled_calls += cancelled
            return len(now.call_times) >= MAX_PENDING

    def take(self) -> Taken:
        """Everything counted since the last ``take``, and start afresh."""
        with self._lock:
            taken, self._now = self._now, Taken()
        return taken
