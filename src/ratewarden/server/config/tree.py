"""The descriptor tree: where a domain's rules hang, and how a request's descriptor finds one.

``Level`` (the nodes at one depth, indexed for matching), ``Node``, ``Match``,
``DomainConfig`` (one domain's tree and its rules) and ``RateLimitConfig`` (every
loaded domain), each with ``to_dict`` (normalised, loadable YAML). The rules
themselves, ``DescriptorRule`` and its ``Limit``s, are in ``model``; the readers
build the tree from YAML, and the package re-exports it.

Matching (``DomainConfig.match``) follows envoyproxy/ratelimit: at each level the
node with the exact key and value, else the first wildcard value of that key in
config order, else the key-only node. The rule that applies is the one on the
node reached by the request's *last* entry, never a parent's; a request that
goes deeper than the config, or ends on a node without a rule, has no rule.

This module is pure: no I/O, no clock, no store, no YAML.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from ratewarden.server.config.model import DescriptorRule

__all__ = ["DomainConfig", "Level", "Match", "Node", "RateLimitConfig"]


@dataclass(frozen=True, slots=True)
class Level:
    """The descriptor nodes at one depth, indexed the way matching reads them."""

    exact: Mapping[tuple[str, str], Node] = field(default_factory=lambda: MappingProxyType({}))
    wildcards: Mapping[str, tuple[Node, ...]] = field(default_factory=lambda: MappingProxyType({}))
    keys: Mapping[str, Node] = field(default_factory=lambda: MappingProxyType({}))
    nodes: tuple[Node, ...] = ()

    @classmethod
    def of(cls, nodes: Sequence[Node]) -> Level:
        """``nodes`` (no two with the same key and value) indexed for ``match``, in order."""
        exact: dict[tuple[str, str], Node] = {}
        wildcards: dict[str, list[Node]] = {}
        keys: dict[str, Node] = {}
        for node in nodes:
            if node.pattern is not None:
                wildcards.setdefault(node.key, []).append(node)
            elif node.value:
                exact[(node.key, node.value)] = node
            else:
                keys[node.key] = node
        return cls(
            MappingProxyType(exact),
            MappingProxyType({key: tuple(found) for key, found in wildcards.items()}),
            MappingProxyType(keys),
            tuple(nodes),
        )

    def match(self, key: str, value: str) -> Node | None:
        """Exact key+value, else the first matching wildcard of ``key``, else key-only."""
        node = self.exact.get((key, value))
        if node is not None:
            return node
        for candidate in self.wildcards.get(key, ()):
            assert candidate.pattern is not None
            if candidate.pattern.fullmatch(value):
                return candidate
        return self.keys.get(key)

    def __bool__(self) -> bool:
        return bool(self.nodes)

    def __iter__(self) -> Iterator[Node]:
        return iter(self.nodes)


@dataclass(frozen=True, slots=True)
class Node:
    """One ``descriptors`` entry: its key and value, its rule and its children.

    ``value`` is "" for a key-only node; ``pattern`` is set for a value with ``*``.
    ``share_threshold`` makes every request value this node matches (key-only or
    wildcard) count against one counter; ``value_to_metric`` puts the request's
    value in the metric key.
    """

    key: str
    value: str
    rule: DescriptorRule | None
    children: Level = field(repr=False)
    source: str = ""
    pattern: re.Pattern[str] | None = field(default=None, repr=False, compare=False)
    share_threshold: bool = False
    value_to_metric: bool = False
    metadata: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def exact(self) -> bool:
        """True when the node names one value (not key-only, not a wildcard)."""
        return bool(self.value) and self.pattern is None

    def metadata_dict(self) -> dict[str, Any]:
        """``metadata`` as plain dicts and lists (for a protobuf Struct or JSON)."""
        thawed: dict[str, Any] = _thaw(self.metadata)
        return thawed

    def to_dict(self) -> dict[str, Any]:
        """This node as loadable YAML, normalised."""
        out: dict[str, Any] = {"key": self.key}
        if self.value:
            out["value"] = self.value
        if self.rule is not None:
            out["budget" if self.rule.budget else "rate_limit"] = self.rule.to_dict()
            for flag in ("shadow_mode", "quota_mode", "detailed_metric"):
                if getattr(self.rule, flag):
                    out[flag] = True
            if self.rule.rlqs_weights:
                out["rlqs_weights"] = dict(self.rule.rlqs_weights)
        if self.share_threshold:
            out["share_threshold"] = True
        if self.value_to_metric:
            out["value_to_metric"] = True
        if self.metadata:
            out["metadata"] = _thaw(self.metadata)
        if self.children:
            out["descriptors"] = [child.to_dict() for child in self.children]
        return out


@dataclass(frozen=True, slots=True)
class Match:
    """Where one request descriptor landed: one node per request entry, the last one deciding."""

    nodes: tuple[Node, ...]

    @property
    def node(self) -> Node:
        return self.nodes[-1]

    @property
    def rule(self) -> DescriptorRule | None:
        return self.nodes[-1].rule


@dataclass(frozen=True, slots=True)
class DomainConfig:
    """One ``domain``: its descriptor tree and its rules in config order."""

    name: str
    source: str
    root: Level
    rules: tuple[DescriptorRule, ...]
    #: Recent descriptors (their wire bytes) -> what the service reads from them and derives
    #: from their match (entries, hits_addend, rule, keys):
    #: filled by ``server/descriptors.py``, emptied when full. The config never changes,
    #: so an answer stays right for as long as this domain is the one served.
    memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)
    #: Recent requests (their wire bytes) -> their hits_addend and their descriptors' entries
    #: in ``memo``: a request seen before is read with one lookup, as ``memo`` reads a descriptor.
    requests: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

    def match(self, entries: Sequence[tuple[str, str]]) -> Match | None:
        """The nodes a request descriptor's ``(key, value)`` entries reach, or None."""
        level = self.root
        nodes: list[Node] = []
        for index, (key, value) in enumerate(entries):
            node = level.match(key, value)
            if node is None:
                return None
            nodes.append(node)
            if index == len(entries) - 1:
                return Match(tuple(nodes))
            if not node.children:
                # The request goes deeper than the config: no rule, and no fallback
                # to this node's limit (envoyproxy/ratelimit does the same).
                return None
            level = node.children
        return None

    def to_dict(self) -> dict[str, Any]:
        return {"domain": self.name, "descriptors": [node.to_dict() for node in self.root]}


@dataclass(frozen=True, slots=True)
class RateLimitConfig:
    """Every loaded domain. Frozen: a reload builds a new one and swaps it in whole."""

    domains: Mapping[str, DomainConfig]
    files: tuple[str, ...] = ()

    def match(self, domain: str, entries: Sequence[tuple[str, str]]) -> Match | None:
        found = self.domains.get(domain)
        return None if found is None else found.match(entries)

    @property
    def rules(self) -> tuple[DescriptorRule, ...]:
        return tuple(rule for domain in self.domains.values() for rule in domain.rules)

    def describe(self) -> str:
        """One line per rule, in load order: what ``/rlconfig`` shows."""
        lines = [rule.describe() for rule in self.rules]
        return "\n".join(lines) + ("\n" if lines else "")

    def to_dict(self) -> dict[str, Any]:
        """``{"domains": [...]}``; each domain entry is itself a loadable config file."""
        return {"domains": [domain.to_dict() for domain in self.domains.values()]}


def _thaw(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {key: _thaw(item) for key, item in value.items()}
    if isinstance(value, tuple):
        return [_thaw(item) for item in value]
    return value
