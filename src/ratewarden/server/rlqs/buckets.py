"""A quota bucket's id, matched against a domain's descriptors, as the RLS matches entries.

Envoy's ``BucketId`` is a map without order; a descriptor is a list of entries in
order. The order is the config's own: the bucket is read as the descriptor whose
entries follow the domain's tree from the top, at each level trying the level's
keys in config order (each value matched as a request entry is: the exact value,
else the first wildcard, else the key-only node), and the first such walk that uses
every key of the bucket and ends on a node with a rule gives the rule. So the YAML
that limits the descriptor ``[(tenant, a), (path, /x)]`` limits the bucket
``{path: /x, tenant: a}`` alike, and a bucket no walk uses up has no rule.
``rule_budget`` is what the rule it meets gives the fleet: its tightest limit as a
token budget (``shares.Budget``).

Pure: no clock, no I/O, no protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction

from ratewarden.server.config import DescriptorRule, DomainConfig, Level
from ratewarden.server.rlqs.shares import Budget

__all__ = ["BUCKET_ALGORITHMS", "bucket_entries", "bucket_rule", "rule_budget"]

#: Algorithms with a bucket capacity (the rule's ``burst``); the others are windows.
BUCKET_ALGORITHMS = ("gcra", "token_bucket", "leaky_bucket")

Entries = tuple[tuple[str, str], ...]


def _keys_in_order(level: Level) -> list[str]:
    seen: dict[str, None] = {}
    for node in level:
        seen.setdefault(node.key, None)
    return list(seen)


def _walk(level: Level, left: Mapping[str, str], entries: Entries) -> Entries | None:
    """The first walk from ``level`` that uses every key of ``left`` and ends on a rule."""
    for key in _keys_in_order(level):
        if key not in left:
            continue
        value = left[key]
        node = level.match(key, value)
        if node is None:
            continue
        rest = {k: v for k, v in left.items() if k != key}
        here = (*entries, (key, value))
        if not rest:
            if node.rule is not None:
                return here
            continue
        found = _walk(node.children, rest, here) if node.children else None
        if found is not None:
            return found
    return None


def bucket_entries(domain: DomainConfig, bucket: Mapping[str, str]) -> Entries | None:
    """The bucket as a descriptor's ``(key, value)`` entries, in the order the domain's tree
    names the keys, or None when no walk of the tree uses every key and ends on a rule."""
    if not bucket:
        return None
    return _walk(domain.root, bucket, ())


def bucket_rule(domain: DomainConfig, bucket: Mapping[str, str]) -> DescriptorRule | None:
    """The rule that limits ``bucket`` in ``domain``, or None."""
    entries = bucket_entries(domain, bucket)
    match = None if entries is None else domain.match(entries)
    return None if match is None else match.rule


def rule_budget(rule: DescriptorRule, interval_s: float) -> Budget:
    """The fleet budget of a rule with limits: its tightest limit's tokens per period."""
    limit = min(rule.limits, key=lambda lim: Fraction(lim.requests_per_unit, lim.period_us))
    burst = None
    if rule.algorithm in BUCKET_ALGORITHMS:
        burst = limit.burst if limit.burst is not None else limit.requests_per_unit
    return Budget.of(limit.requests_per_unit, limit.period_us // 1_000_000, burst, interval_s)
