"""A request's descriptors while it is decided: matched rules, counter keys, results.

``prepare`` turns a ``RateLimitRequest`` into ``Item``s: each descriptor matched
against the config, Envoy's per-descriptor ``limit`` override, ``replaces``, the
counter and metric keys (``counter_key``) and the ``max_values_per_rule`` cap
(``ValueCap``). ``denied``, ``counter_id`` and ``is_short`` read items for the
decision flow (``service``). It takes values, not the service; nothing here
touches a store.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

from ratewarden.algorithms import state_suffix
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.server.config import (
    DEFAULT_FAILURE_MODE,
    DescriptorRule,
    DomainConfig,
    Match,
    RateLimitConfig,
)
from ratewarden.server.statuses import Reporting, override
from ratewarden.server.value_cap import ValueCap

__all__ = [
    "Item",
    "Result",
    "Verdict",
    "counter_id",
    "counter_key",
    "denied",
    "joint_algorithm",
    "prepare",
    "settled",
    "to_check",
]


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
    """How one descriptor's call went: allowed, the Decision behind it (None when the
    ``open`` or ``closed`` failure mode answered), that mode, whether hits were consumed,
    whether the over-limit cache answered, and whether the failure mode answered because
    the open circuit breaker kept the call from the store (``refused``: asking again costs
    no wait, and finds the store once a probe has closed the circuit)."""

    allowed: bool
    decision: Decision | None
    failure: str | None
    charged: bool
    cached: bool = False
    refused: bool = False


@dataclass(slots=True)
class Item:
    """One request descriptor while its request is decided."""

    entries: tuple[tuple[str, str], ...]
    cost: int
    match: Match | None
    rule: DescriptorRule | None
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


def prepare(
    request: Any,
    config: RateLimitConfig,
    cap: ValueCap,
    reports: Reporting,
    failure_mode: str = DEFAULT_FAILURE_MODE,
) -> list[Item]:
    """The request's descriptors as items, with rules, keys and caps; raises if malformed.

    ``config`` is the one snapshot the whole request is decided on; ``reports`` is told
    each rule whose new value went to its overflow counter (``cap``) and each limit
    override that cannot apply (``statuses.override``); ``failure_mode`` is that of a
    limit override on a descriptor no rule matches.
    """
    name = request.domain
    if not name:
        raise ConfigurationError(
            "RateLimitRequest.domain is empty; Envoy sets it from the filter's domain"
        )
    domain = config.domains.get(name)
    if domain is None:
        _check_descriptors(request)
        request_hits = request.hits_addend or 1
        items: list[Item] = []
        for descriptor in request.descriptors:
            entries = tuple([(entry.key, entry.value) for entry in descriptor.entries])
            items.append(Item(entries, _addend(descriptor, request_hits), None, None))
        return items
    # Reading a request's fields costs more than its wire bytes do, and the bytes say
    # everything the fields say: the same bytes, the same request.
    wire = request.SerializeToString()
    read: tuple[int, list[_Resolved]] | None = domain.requests.get(wire)
    if read is None:
        _check_descriptors(request)
        read = _read(domain, request)
        if len(domain.requests) >= _MEMO_SIZE:
            domain.requests.clear()
        domain.requests[wire] = read
    request_hits, resolved = read
    items = []
    replaces = False
    for index, (entries, addend, limited, match, rule, key, metric_key) in enumerate(resolved):
        item = Item(
            entries, request_hits if addend is None else addend, match, rule, False, key, metric_key
        )
        if limited:
            limit = request.descriptors[index].limit
            given = override(name, entries, rule, limit, failure_mode, reports.override_ignored)
            if given is not None:
                item.rule, item.override = given, True
                item.key, item.metric_key = _keys(name, item)
        if item.rule is not None and item.rule.replaces:
            replaces = True
        items.append(item)
    if replaces:
        replaced = {other for item in items if item.rule for other in item.rule.replaces}
        for item in items:
            if item.rule is not None and item.rule.name and item.rule.name in replaced:
                item.rule = None  # replaced for this request: not checked, not consumed
    if cap.limit is not None:
        now = cap.now_us()
        for item in items:
            if item.needs_store:
                _cap(cap, item, reports, now)
    return items


#: Descriptors a domain remembers the reading of (``DomainConfig.memo``).
_MEMO_SIZE = 16_384

#: What a descriptor's wire bytes say, read once: its entries, its own hits_addend (None
#: when it has none), whether it carries a limit override, its match and that match's rule
#: (None when there is none) and the rule's counter and metric keys ("" without one).
_Resolved = tuple[
    tuple[tuple[str, str], ...], int | None, bool, Match | None, DescriptorRule | None, str, str
]


def _check_descriptors(request: Any) -> None:
    if not request.descriptors:
        raise ConfigurationError("RateLimitRequest has no descriptors; send at least one")


def _read(domain: DomainConfig, request: Any) -> tuple[int, list[_Resolved]]:
    """A request of ``domain`` read: its hits_addend (1 when unset) and each descriptor's
    reading, from ``domain.memo`` when the descriptor was seen before."""
    memo = domain.memo
    resolved = []
    for descriptor in request.descriptors:
        wire = descriptor.SerializeToString()
        found: _Resolved | None = memo.get(wire)
        if found is None:
            found = _resolve(domain, descriptor)
            if len(memo) >= _MEMO_SIZE:
                memo.clear()
            memo[wire] = found
        resolved.append(found)
    return request.hits_addend or 1, resolved


def _addend(descriptor: Any, request_hits: int) -> int:
    """The descriptor's own hits_addend, else the request's."""
    if descriptor.HasField("hits_addend"):
        value: int = descriptor.hits_addend.value
        return value
    return request_hits


def _resolve(domain: DomainConfig, descriptor: Any) -> _Resolved:
    """A descriptor read and matched in ``domain``: what ``_Resolved`` says.

    Remembered per domain object (by ``prepare``), so a reload (a new config) starts afresh.
    """
    entries = tuple([(entry.key, entry.value) for entry in descriptor.entries])
    addend = descriptor.hits_addend.value if descriptor.HasField("hits_addend") else None
    limited = descriptor.HasField("limit")
    match = domain.match(entries)
    rule = None if match is None else match.rule
    if rule is None:
        return entries, addend, limited, match, None, "", ""
    key, metric_key = _keys(domain.name, Item(entries, 0, match, rule))
    return entries, addend, limited, match, rule, key, metric_key


def _cap(cap: ValueCap, item: Item, reports: Reporting, now: int) -> None:
    """Past ``max_values_per_rule``, a new value shares the rule's overflow counter."""
    rule = item.rule
    assert rule is not None  # the item needs the store
    item.key, overflowed = cap.key(rule, item.key, override=item.override, now=now)
    if overflowed:
        reports.overflow(rule, cap.limit, override=item.override)


def _keys(domain: str, item: Item) -> tuple[str, str]:
    """The counter key and the metric key of a descriptor with a rule."""
    rule = item.rule
    assert rule is not None
    match = item.match
    if match is None or item.override:  # Envoy's limit override: counted per exact descriptor
        request_key = ".".join(f"{key}_{value}" if value else key for key, value in item.entries)
        return counter_key(
            domain, ((k, "=" + v) for k, v in item.entries)
        ), f"{domain}.{request_key}"
    parts: list[tuple[str, str]] = []
    metric = [domain]
    detailed = [domain]
    for (key, value), node in zip(item.entries, match.nodes, strict=True):
        given = f"{key}_{value}" if value else key
        if node.share_threshold and not node.exact:
            # Every value shares one counter, so the metric names the pattern, never the
            # value, whatever value_to_metric or detailed_metric say (as upstream).
            parts.append((key, "*" + node.value))
            shared = f"{key}_{node.value}" if node.value else key
            metric.append(shared)
            detailed.append(shared)
            continue
        parts.append((key, "=" + value))
        detailed.append(given)
        if node.value_to_metric and not node.exact:
            metric.append(given)
        else:
            metric.append(f"{node.key}_{node.value}" if node.value else node.key)
    return counter_key(domain, parts), ".".join(detailed if rule.detailed_metric else metric)


class Verdict:
    """Whether a request is denied, told one descriptor at a time (``add``): any regular
    descriptor over, or every quota_mode one over; shadow rules never deny.

    ``quota_mode`` is the global switch (envoyproxy/ratelimit's ``QUOTA_MODE``): every
    descriptor but an unlimited one is then a quota descriptor, one without a rule or in
    shadow mode too (never over), so a request is denied only when all of them are over.
    """

    __slots__ = ("_all", "_over", "_quota", "_quota_over")

    def __init__(self, quota_mode: bool = False) -> None:
        self._all = quota_mode
        self._over = False
        self._quota = self._quota_over = 0

    def add(self, rule: DescriptorRule | None, over: bool) -> None:
        if self._all:
            if rule is None or not rule.unlimited:
                self._quota += 1
                self._quota_over += over and rule is not None and not rule.shadow_mode
            return
        if rule is None or rule.unlimited or rule.shadow_mode:
            return
        if rule.quota_mode:
            self._quota += 1
            self._quota_over += over
        elif over:
            self._over = True

    @property
    def denied(self) -> bool:
        return self._over or (self._quota > 0 and self._quota_over == self._quota)


def denied(
    items: list[Item],
    predicted: Callable[[Item], bool] | None = None,
    *,
    quota_mode: bool = False,
) -> bool:
    """The ``Verdict`` of ``items`` (an item also counts as over when ``predicted``)."""
    verdict = Verdict(quota_mode)
    for item in items:
        verdict.add(item.rule, item.over or (predicted is not None and predicted(item)))
    return verdict.denied


def counter_id(item: Item) -> tuple[str, tuple[str, ...]]:
    """The state an item's store call touches: its key and each rate's ``state_suffix``, as
    the store names it (a window's holds no limit: a limit override shares its count)."""
    rule = item.rule
    assert rule is not None
    return item.key, tuple(state_suffix(rule.algorithm, rate) for rate in rule.rates)


def to_check(stored: list[Item]) -> list[Item]:
    """The items a request checks (cost 0) before it charges: all but budget charges,
    whose look is never over (they record tokens already spent)."""
    return [item for item in stored if item.cost == 0 or not (item.rule and item.rule.budget)]


def joint_algorithm(stored: list[Item]) -> str | None:
    """The algorithm of one atomic step that may decide every item, or None.

    That is when every item is an enforcing regular rule (no shadow_mode,
    quota_mode or budget) of one algorithm and no two count the same state: the
    same key and ``state_suffix`` (for a window, the same period whatever the
    limits), which the store's ``hit_all`` refuses.
    """
    algorithm = ""
    keys: set[str] = set()
    single = True  # every rule has one rate
    for item in stored:
        rule = item.rule
        if rule is None or rule.shadow_mode or rule.quota_mode or rule.budget:
            return None
        if algorithm and rule.algorithm != algorithm:
            return None
        algorithm = rule.algorithm
        keys.add(item.key)
        single = single and len(rule.rates) == 1
    if not (single and len(keys) == len(stored)):  # else no key and state can repeat
        counted: set[tuple[str, str]] = set()
        for item in stored:
            key, suffixes = counter_id(item)
            for suffix in suffixes:
                if (key, suffix) in counted:
                    return None
                counted.add((key, suffix))
    return algorithm or None


def settled(decision: Decision, cost: int) -> Result:
    """The limiter's Decision as the service reports it.

    The limiter answers a failure with a Decision naming its failure mode
    (``degraded``); the service reports ``open`` and ``closed`` with no decision
    at all (no remaining count or reset time to show), and ``local`` with the
    in-process decision as it is, the failure mode in ``Result.failure`` only.
    """
    mode = decision.degraded
    if not mode:
        return Result(decision.allowed, decision, None, decision.allowed and cost > 0)
    if mode == "local":
        decision = replace(decision, degraded="")
        return Result(decision.allowed, decision, mode, decision.allowed and cost > 0)
    return Result(mode == "open", None, mode, False)
