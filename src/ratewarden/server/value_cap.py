"""The cap on distinct values per rule: a bound on key explosion.

A rule on a key without a value (``key: remote_address``) or with a wildcard
keeps one counter per distinct value a request sends. A client that sends a new
value on every request (random IPs in ``X-Forwarded-For``, made-up API keys)
would make one store key per request: the store grows without bound and every
value gets a fresh, full allowance, so the limit limits nothing.

``ValueCap`` remembers, per rule, the counter keys seen within the rule's
longest period (after that a counter has expired in the store anyway). Up to
``limit`` of them get their own counter. Past the cap, each *new* value is
counted on one shared overflow counter of that rule, with the rule's own
limits: the flood competes with itself for one allowance, the values already
known keep theirs, and the store holds at most ``limit + 1`` counters per rule
and window. Denying over-cap values outright was the other choice; it would
turn a flood of junk values into an outage for every new legitimate client.

Envoy's per-descriptor limit overrides have no rule in the config: each is a
rule made for the request, named after its values. They share one group per
domain (``OVERRIDES``), so that they cannot make a table, or an overflow
counter, per value either.

The memory bound is ``limit`` keys per rule (a few hundred bytes each). The cap
is per process: with ``--workers`` or several replicas, each counts its own.
"""

from __future__ import annotations

from collections import OrderedDict

from ratewarden.clock import Clock
from ratewarden.errors import ConfigurationError
from ratewarden.server.config import DescriptorRule

__all__ = ["OVERRIDES", "ValueCap", "overflow_key"]

#: The group of every limit override of a domain (no config rule path looks like it).
OVERRIDES = "(limit overrides)"


def overflow_key(domain: str, group: str) -> str:
    """The shared counter of a rule's (or group's) values past the cap.

    ``rls-overflow/`` can never begin a descriptor's own key (those begin with
    ``rls/``), and the domain and group are length-prefixed like theirs.
    """
    fields = (domain, group)
    return "rls-overflow/" + "/".join(f"{len(text)}:{text}" for text in fields)


class ValueCap:
    """Per rule, at most ``limit`` distinct counter keys per window; ``None`` turns it off."""

    def __init__(self, limit: int | None, clock: Clock) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int)):
            raise ConfigurationError(f"max_values_per_rule {limit!r} must be a whole number")
        if limit is not None and limit < 1:
            raise ConfigurationError(
                f"max_values_per_rule {limit!r} must be at least 1 (or None for no cap)"
            )
        self.limit = limit
        self._clock = clock
        # (domain, group) -> (counter key -> last seen (us), oldest first; the group's window).
        self._seen: dict[tuple[str, str], tuple[OrderedDict[str, int], int]] = {}

    def now_us(self) -> int:
        """The cap's clock: the ``now`` to give ``key`` for the keys of one request."""
        return self._clock.now_us()

    def key(
        self, rule: DescriptorRule, key: str, *, override: bool = False, now: int | None = None
    ) -> tuple[str, bool]:
        """The counter key to use for ``key`` under ``rule``, and whether it is the overflow.

        ``override``: the rule is an Envoy limit override, counted in its domain's
        ``OVERRIDES`` group rather than under its own per-request path. ``now``: the
        time in microseconds (``now_us()``), read once for a request's keys.
        """
        if self.limit is None:
            return key, False
        if now is None:
            now = self._clock.now_us()
        group = (rule.domain, OVERRIDES if override else rule.path)
        found = self._seen.get(group)
        if found is None:
            found = self._seen[group] = (OrderedDict(), _window_us(rule))
        seen, window = found
        if override:  # each override is a rule of its own: its own period
            window = _window_us(rule)
        if seen and next(iter(seen.values())) < now - window:
            self._expire(seen, now - window)
        if key in seen:
            seen[key] = now
            seen.move_to_end(key)
            return key, False
        if len(seen) < self.limit:
            seen[key] = now
            return key, False
        return overflow_key(rule.domain, group[1]), True

    def tracked(self, rule: DescriptorRule) -> int:
        """How many distinct keys of ``rule`` are remembered now (for tests and stats)."""
        found = self._seen.get((rule.domain, rule.path))
        return 0 if found is None else len(found[0])

    def keep_only(self, rules: tuple[DescriptorRule, ...]) -> None:
        """Forget rules no longer configured (called when a new config is swapped in).

        The override groups are kept while their domain is still configured.
        """
        live = {(rule.domain, rule.path) for rule in rules}
        live |= {(rule.domain, OVERRIDES) for rule in rules}
        for ident in [ident for ident in self._seen if ident not in live]:
            del self._seen[ident]

    @staticmethod
    def _expire(seen: OrderedDict[str, int], before: int) -> None:
        # Oldest first: the keys last seen before ``before`` lead.
        while seen and next(iter(seen.values())) < before:
            seen.popitem(last=False)


def _window_us(rule: DescriptorRule) -> int:
    """How long a counter of ``rule`` can live: its longest period."""
    return max((rate.period_us for rate in rule.rates), default=0)
