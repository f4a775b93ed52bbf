"""A quota bucket's id, matched against a domain's descriptors, as the RLS matches entries.

Envoy's ``BucketId`` is a map without order; a descriptor is a list of entries in
order. The order is the config's own: starting at the domain's top level, the
first key of the level (in config order) that the bucket has is the next entry,
matched as a request entry is (exact value, else the first wildcard, else the
key-only node); then the next level, until every key of the bucket is used. The
rule is the one on the last node, as for a descriptor, and a bucket with a key the
walk never reaches has no rule. So the YAML that limits the descriptor
``[(tenant, a), (path, /x)]`` limits the bucket ``{tenant: a, path: /x}`` alike.

Pure: no clock, no I/O, no protobuf.
"""

from __future__ import annotations

from collections.abc import Mapping

from ratewarden.server.config import DescriptorRule, DomainConfig, Level

__all__ = ["bucket_entries", "bucket_rule"]


def _keys_in_order(level: Level) -> list[str]:
    seen: dict[str, None] = {}
    for node in level:
        seen.setdefault(node.key, None)
    return list(seen)


def bucket_entries(domain: DomainConfig, bucket: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The bucket's ``(key, value)`` entries in the order the domain's levels name the keys;
    shorter than the bucket when some key is never reached."""
    left = dict(bucket)
    entries: list[tuple[str, str]] = []
    level = domain.root
    while left and level:
        key = next((key for key in _keys_in_order(level) if key in left), None)
        if key is None:
            break
        value = left.pop(key)
        entries.append((key, value))
        node = level.match(key, value)
        if node is None:
            break
        level = node.children
    return tuple(entries)


def bucket_rule(domain: DomainConfig, bucket: Mapping[str, str]) -> DescriptorRule | None:
    """The rule that limits ``bucket`` in ``domain``, or None."""
    entries = bucket_entries(domain, bucket)
    if len(entries) != len(bucket):
        return None
    match = domain.match(entries)
    return None if match is None else match.rule
