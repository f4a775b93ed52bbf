"""The rule model: what a loaded rate limit config is made of, and how it writes itself out.

The names a rule may use (units, algorithms, failure modes), the error types a
load raises (``ConfigProblem``, ``ConfigError``) and the frozen rules and
descriptor tree: ``Limit``, ``DescriptorRule``, ``Level``, ``Node``, ``Match``,
``DomainConfig`` and ``RateLimitConfig``, each with ``to_dict`` (normalised,
loadable YAML). The other modules of ``ratewarden.server.config`` read YAML into
them; the package re-exports them.

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

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import FAILURE_MODES  # re-exported: the core's one tuple
from ratewarden.rate import UNITS, Rate

__all__ = [
    "ALGORITHM_NAMES",
    "DEFAULT_ALGORITHM",
    "DEFAULT_FAILURE_MODE",
    "FAILURE_MODES",
    "ConfigError",
    "ConfigProblem",
    "DomainConfig",
    "Level",
    "Limit",
    "Match",
    "Node",
    "RateLimitConfig",
    "DescriptorRule",
    "UNIT_NAMES",
]

#: The units envoyproxy/ratelimit accepts (any case), in the order of the proto enum.
UNIT_NAMES = ("second", "minute", "hour", "day", "week", "month", "year")
#: Every algorithm name ratewarden defines; ``algorithms.ALGORITHMS`` says which are built.
ALGORITHM_NAMES = (
    "fixed_window",
    "gcra",
    "leaky_bucket",
    "sliding_log",
    "sliding_window",
    "token_bucket",
)
#: envoyproxy/ratelimit's only algorithm, so that existing configs behave as before.
DEFAULT_ALGORITHM = "fixed_window"
#: Envoy's own default (``failure_mode_deny: false``) lets requests through.
DEFAULT_FAILURE_MODE = "open"


# ---------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a config: where (file, 1-based line, key) and what to do."""

    file: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.key}: {self.message}"


class ConfigError(ConfigurationError):
    """The config did not load; ``errors`` lists every problem found, in file order."""

    def __init__(self, errors: Sequence[ConfigProblem]) -> None:
        self.errors: tuple[ConfigProblem, ...] = tuple(errors)
        lines = [str(problem) for problem in self.errors]
        if len(lines) == 1:
            message = lines[0]
        else:
            message = f"{len(lines)} problems in the rate limit config:\n" + "\n".join(lines)
        super().__init__(message)


# ---------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True)
class Limit:
    """``requests_per_unit`` per ``unit_multiplier`` x ``unit``, with an optional burst.

    ``rate`` is the ``Rate`` a store counts; it is None when ``requests_per_unit``
    is 0, which envoyproxy/ratelimit treats as "always over the limit".
    """

    requests_per_unit: int
    unit: str
    unit_multiplier: int = 1
    burst: int | None = None
    rate: Rate | None = field(default=None, repr=False, compare=False)

    @property
    def period_us(self) -> int:
        return UNITS[self.unit] * self.unit_multiplier

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "requests_per_unit": self.requests_per_unit}
        if self.unit_multiplier != 1:
            out["unit_multiplier"] = self.unit_multiplier
        if self.burst is not None:
            out["burst"] = self.burst
        return out

    def __str__(self) -> str:
        unit = self.unit if self.unit_multiplier == 1 else f"{self.unit_multiplier} x {self.unit}"
        text = f"{self.requests_per_unit}/{unit}"
        return text if self.burst is None else f"{text} (burst {self.burst})"


@dataclass(frozen=True, slots=True)
class DescriptorRule:
    """The ``rate_limit`` of one descriptor node, with its node's flags (was ``Rule``: the
    name is the HTTP middleware's, ``ratewarden.middleware.Rule``).

    ``path`` is envoyproxy/ratelimit's key for the rule (``domain.key_value.key``),
    used in metrics and in ``describe()``; ``source`` is ``file:line``.
    ``limits`` is empty only for an ``unlimited`` rule. ``budget`` marks a
    descriptor's ``budget`` (a token budget, read by ``server/config/budget.py``): one
    GCRA limit whose hits are tokens, checked on hits 0 and charged otherwise.
    """

    domain: str
    path: str
    source: str
    limits: tuple[Limit, ...]
    unlimited: bool = False
    name: str = ""
    replaces: tuple[str, ...] = ()
    algorithm: str = DEFAULT_ALGORITHM
    failure_mode: str = DEFAULT_FAILURE_MODE
    shadow_mode: bool = False
    quota_mode: bool = False
    detailed_metric: bool = False
    budget: bool = False
    #: A limit of 0 requests: every request is over, without asking a store.
    always_over: bool = field(init=False, repr=False, compare=False)
    #: The rates a store counts, made once: stores cache a call's plan by this tuple's identity.
    rates: tuple[Rate, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "always_over", any(lim.rate is None for lim in self.limits))
        rates = tuple(limit.rate for limit in self.limits if limit.rate is not None)
        object.__setattr__(self, "rates", rates)

    def limit_for(self, rate: Rate | None) -> Limit | None:
        """The configured ``Limit`` whose rate is ``rate`` (the binding one of a decision)."""
        for limit in self.limits:
            if limit.rate == rate:
                return limit
        return self.limits[0] if self.limits else None

    def to_dict(self) -> dict[str, Any]:
        """The ``rate_limit`` (or ``budget``) block, normalised (loadable YAML)."""
        if self.budget:
            return self._budget_dict()
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.replaces:
            out["replaces"] = [{"name": name} for name in self.replaces]
        if self.unlimited:
            out["unlimited"] = True
            return out
        if self.algorithm != DEFAULT_ALGORITHM:
            out["algorithm"] = self.algorithm
        if self.failure_mode != DEFAULT_FAILURE_MODE:
            out["failure_mode"] = self.failure_mode
        if len(self.limits) == 1:
            out.update(self.limits[0].to_dict())
        else:
            out["limits"] = [limit.to_dict() for limit in self.limits]
        return out

    def _budget_dict(self) -> dict[str, Any]:
        # Written here, beside rate_limit's block, so that the model needs no reader to
        # write itself out; server/config/budget.py reads the same keys back.
        limit = self.limits[0]
        out: dict[str, Any] = {"unit": limit.unit, "tokens_per_unit": limit.requests_per_unit}
        if limit.unit_multiplier != 1:
            out["unit_multiplier"] = limit.unit_multiplier
        if limit.burst is not None:
            out["burst"] = limit.burst
        if self.failure_mode != DEFAULT_FAILURE_MODE:
            out["failure_mode"] = self.failure_mode
        if self.name:
            out["name"] = self.name
        return out

    def describe(self) -> str:
        if self.unlimited:
            what = "unlimited"
        else:
            what = ", ".join(str(limit) for limit in self.limits)
            what += f" algorithm={self.algorithm} failure_mode={self.failure_mode}"
        flags = [
            flag
            for flag, on in (
                ("shadow_mode", self.shadow_mode),
                ("quota_mode", self.quota_mode),
                ("detailed_metric", self.detailed_metric),
                ("budget", self.budget),
            )
            if on
        ]
        if self.name:
            flags.append(f"name={self.name}")
        if self.replaces:
            flags.append("replaces=" + ",".join(self.replaces))
        tail = f" [{' '.join(flags)}]" if flags else ""
        return f"{self.path}: {what}{tail}  ({self.source})"


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
    #: Recent descriptors' entries -> what the service derives from their match (its keys):
    #: filled by ``server/descriptors.py``, emptied when full. The config never changes,
    #: so an answer stays right for as long as this domain is the one served.
    memo: dict[Any, Any] = field(default_factory=dict, init=False, repr=False, compare=False)

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
