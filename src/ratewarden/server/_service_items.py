"""One request descriptor while its request is decided: its data, its keys, its value cap.

``prepare`` turns a ``RateLimitRequest`` into ``Item``s: each descriptor matched
against the config, Envoy's per-descriptor ``limit`` override, ``replaces``, the
counter and metric keys (``counter_key``) and the ``max_values_per_rule`` cap.
``denied``, ``counter_id`` and ``is_short`` read items for the decision flow.
``prepare`` takes the service as its first argument; ``service`` imports this
module, never the other way round (but for type checking). Nothing here touches
a store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.server._status import override
from ratewarden.server.config import DomainConfig, Match, Rule

if TYPE_CHECKING:
    from ratewarden.server.service import _ServiceBase

__all__ = [
    "Cached",
    "Call",
    "Item",
    "Result",
    "Together",
    "counter_id",
    "counter_key",
    "denied",
    "is_short",
    "prepare",
]

# The service's logger: records keep the name operators filter on.
log = logging.getLogger("ratewarden.server.service")


def counter_key(domain: str, parts: Iterable[tuple[str, str]]) -> str:
    """The store key of one descriptor: ``rls/`` then length-prefixed fields.

    ``parts`` are ``(key, marked value)`` pairs where the value is ``=`` + the
    request's value, or ``*`` + the config pattern when ``share_threshold`` makes
    every matching value share one counter. Every field is written as
    ``<length>:<text>``, so the key can be read back unambiguously: no value, however
    many separators it holds, can make two descriptors share a counter.
    """
    fields = [domain]
    for key, marked in parts:
        fields.append(key)
        fields.append(marked)
    return "rls/" + "/".join(f"{len(text)}:{text}" for text in fields)


@dataclass(slots=True)
class Result:
    allowed: bool
    decision: Decision | None
    failure: str | None
    charged: bool
    cached: bool = False


@dataclass(frozen=True, slots=True)
class Cached:
    """A store denial answered again from the over-limit cache."""

    decision: Decision


@dataclass(slots=True)
class Item:
    """One request descriptor while its request is decided."""

    entries: tuple[tuple[str, str], ...]
    cost: int
    match: Match | None
    rule: Rule | None
    override: bool = False
    key: str = ""
    metric_key: str = ""
    result: Result | None = None

    @property
    def needs_store(self) -> bool:
        rule = self.rule
        return rule is not None and not rule.unlimited and not rule.always_over

    @property
    def over(self) -> bool:
        if self.rule is None or self.rule.unlimited:
            return False
        if self.rule.always_over:
            return True
        return self.result is not None and not self.result.allowed


@dataclass(frozen=True, slots=True)
class Call:
    item: Item
    cost: int


@dataclass(frozen=True, slots=True)
class Together:
    """Items of one algorithm decided in one atomic store step (``hit_all``), each at
    its own cost: every one charged, or none."""

    algorithm: str
    items: tuple[Item, ...]

    def calls(self) -> list[tuple[str, tuple[Rate, ...], int]]:
        """The ``(key, rates, cost)`` of each item, for the store's ``hit_all``."""
        return [(item.key, item.rule.rates if item.rule else (), item.cost) for item in self.items]


def prepare(service: _ServiceBase, request: Any) -> list[Item]:
    """The request's descriptors as items, with rules, keys and caps; raises if malformed."""
    if not request.domain:
        raise ConfigurationError(
            "RateLimitRequest.domain is empty; Envoy sets it from the filter's domain"
        )
    if not request.descriptors:
        raise ConfigurationError("RateLimitRequest has no descriptors; send at least one")
    config = service.config  # one snapshot for the whole request
    domain = config.domains.get(request.domain)
    request_hits = request.hits_addend or 1
    items: list[Item] = []
    replaces = False
    for descriptor in request.descriptors:
        entries = tuple((entry.key, entry.value) for entry in descriptor.entries)
        cost = descriptor.hits_addend.value if descriptor.HasField("hits_addend") else request_hits
        if domain is None:
            items.append(Item(entries, cost, None, None))
            continue
        match, key, metric_key = _resolve(domain, entries)
        item = Item(
            entries, cost, match, None if match is None else match.rule, False, key, metric_key
        )
        if descriptor.HasField("limit"):
            given = override(request.domain, entries, item.rule, descriptor.limit)
            if given is not None:
                item.rule, item.override = given, True
                item.key, item.metric_key = _keys(request.domain, item)
        replaces = replaces or bool(item.rule and item.rule.replaces)
        items.append(item)
    replaced = {name for item in items if item.rule for name in item.rule.replaces}
    for item in items:
        if replaces and item.rule is not None and item.rule.name and item.rule.name in replaced:
            item.rule = None  # replaced for this request: not checked, not consumed
        if item.rule is not None:
            _cap(service, item)
    return items


#: Descriptors a domain remembers the match and keys of (``DomainConfig.memo``).
_MEMO_SIZE = 16_384


def _resolve(domain: DomainConfig, entries: tuple[tuple[str, str], ...]) -> tuple[Any, str, str]:
    """``(match or None, counter key, metric key)`` of a descriptor's entries in ``domain``.

    The keys are empty when the match has no rule. Remembered per domain object, so a
    reload (a new config) starts afresh.
    """
    memo = domain.memo
    found: tuple[Any, str, str] | None = memo.get(entries)
    if found is None:
        match = domain.match(entries)
        if match is None or match.rule is None:
            found = (match, "", "")
        else:
            found = (match, *_keys(domain.name, Item(entries, 0, match, match.rule)))
        if len(memo) >= _MEMO_SIZE:
            memo.clear()
        memo[entries] = found
    return found


def _cap(service: _ServiceBase, item: Item) -> None:
    """Past ``max_values_per_rule``, a new value shares the rule's overflow counter."""
    rule = item.rule
    if rule is None or not item.needs_store:
        return
    item.key, overflowed = service.values.key(rule, item.key, override=item.override)
    if not overflowed:
        return
    service._store_log.log(
        log,
        logging.WARNING,
        "overflow " + rule.path,
        "rule %s holds %d distinct values; new ones share one overflow counter",
        rule.path,
        service.values.limit,
    )
    try:
        service.hooks.on_value_overflow(rule.domain, rule)
    except Exception:
        log.exception("hook on_value_overflow failed; the answer is unaffected")


def _keys(domain: str, item: Item) -> tuple[str, str]:
    """The counter key and the metric key of a descriptor with a rule."""
    rule = item.rule
    assert rule is not None
    match = item.match
    request_key = ".".join(f"{key}_{value}" if value else key for key, value in item.entries)
    if match is None or item.override:  # Envoy's limit override: counted per exact descriptor
        return counter_key(
            domain, ((k, "=" + v) for k, v in item.entries)
        ), f"{domain}.{request_key}"
    parts: list[tuple[str, str]] = []
    metric = [domain]
    for (key, value), node in zip(item.entries, match.nodes, strict=True):
        shared = node.share_threshold and not node.exact
        parts.append((key, ("*" + node.value) if shared else ("=" + value)))
        if node.value_to_metric and not node.exact:
            metric.append(f"{key}_{value}" if value else key)
        else:
            metric.append(f"{node.key}_{node.value}" if node.value else node.key)
    if rule.detailed_metric:
        return counter_key(domain, parts), f"{domain}.{request_key}"
    return counter_key(domain, parts), ".".join(metric)


def denied(items: list[Item], predicted: Callable[[Item], bool] | None = None) -> bool:
    """Any regular descriptor over, or every quota_mode one over; shadow rules never deny."""
    quota = quota_over = 0
    for item in items:
        rule = item.rule
        if rule is None or rule.unlimited or rule.shadow_mode:
            continue
        over = item.over or (predicted is not None and predicted(item))
        if rule.quota_mode:
            quota += 1
            quota_over += over
        elif over:
            return True
    return quota > 0 and quota_over == quota


def counter_id(item: Item) -> tuple[str, str, tuple[Rate, ...]]:
    """The counter an item's store call touches: algorithm, key and rates."""
    assert item.rule is not None
    return item.rule.algorithm, item.key, item.rule.rates


def is_short(item: Item, demand: int) -> bool:
    """Whether a checked (cost 0) counter lacks room for ``demand`` hits."""
    result = item.result
    assert result is not None
    if result.decision is None or (item.rule is not None and item.rule.budget):
        return not result.allowed  # a budget charge records tokens already spent: never short
    return not result.allowed or result.decision.remaining < demand
