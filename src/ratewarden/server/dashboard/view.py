"""The dashboard's JSON: ``LiveStats.state()`` of one or more workers, merged and summarised.

``render(states, rules, now)`` is pure: the states (JSON data, possibly read
back from other worker processes), the rules loaded, and the time. The rules'
rates are per second over the last ``window_s`` seconds; the store latency
(calls, calls per second, quantiles) covers the last ``history_s`` seconds; histories
are one number a second, oldest first, for the last ``history_s`` seconds.

Every string is bounded (``ratewarden.labels.bounded``): rule paths, domains,
limits, sources and modes to ``MAX_LABEL_CHARS`` (128) characters, key text to
``MAX_KEY_CHARS`` (200). ``LiveStats`` records rule names and keys bounded
already; the config's strings are bounded here with the same function, so a
long configured path still finds its figures. Rows are keyed by the bounded
names of the config and of the totals, so whatever another worker's file holds,
no longer string reaches the answer.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ratewarden.labels import bounded
from ratewarden.server.config import DescriptorRule
from ratewarden.server.dashboard.live import (
    CATEGORIES,
    DECISIONS,
    DEGRADED,
    FIELDS,
    LATENCY_BOUNDS,
    MAX_KEY_CHARS,
    NEAR,
    OVER,
    SHADOWED,
)
from ratewarden.topk import Heavy, merge

__all__ = ["TOP_SHOWN", "WINDOW_S", "render"]

#: Seconds the rules' per-second rates average over (the store latency covers ``history_s``).
WINDOW_S = 10
#: Keys listed per top-key table.
TOP_SHOWN = 10


def render(
    states: Sequence[dict[str, Any]],
    rules: Iterable[DescriptorRule],
    now: float,
    *,
    window_s: int = WINDOW_S,
) -> dict[str, Any]:
    """The JSON document ``GET /dashboard.json`` answers."""
    history_s = max((int(s["history_s"]) for s in states), default=60)
    start = int(now) - history_s + 1
    per_second: dict[str, list[list[int]]] = {}
    latency = [0] * (len(LATENCY_BOUNDS) + 1)
    calls = [0] * history_s
    slowest = 0.0
    for state in states:
        for second in state["seconds"]:
            index = int(second["t"]) - start
            if not 0 <= index < history_s:
                continue
            for rule, counts in second["rules"].items():
                series = per_second.setdefault(rule, [[0] * len(FIELDS) for _ in range(history_s)])
                for field, amount in enumerate(counts):
                    series[index][field] += amount
            for bucket, amount in second["latency"].items():
                latency[int(bucket)] += amount
            calls[index] += second["calls"]
            slowest = max(slowest, float(second["max"]))
    totals = _sum_maps(state["totals"] for state in states)
    modes = _modes(states)
    loaded = {bounded(rule.path): rule for rule in rules}
    paths = list(loaded) + sorted(set(totals) - set(loaded))
    window = range(history_s - window_s, history_s)
    rows = [
        _rule_row(path, loaded.get(path), per_second.get(path), totals.get(path), window, window_s)
        for path in paths
    ]
    for row in rows:
        row["degraded_modes"] = modes.get(row["path"], {})
    return {
        "generated_at": now,
        "workers": len(states),
        "window_s": window_s,
        "history_s": history_s,
        "rules": rows,
        "top": {category: _top(states, category) for category in CATEGORIES},
        "store_latency": _latency(latency, calls, slowest),
    }


def _rule_row(
    path: str,
    rule: DescriptorRule | None,
    series: list[list[int]] | None,
    totals: list[int] | None,
    window: range,
    window_s: int,
) -> dict[str, Any]:
    series = series or []
    recent = [sum(series[i][field] for i in window if i < len(series)) for field in range(5)]
    rates = {name: recent[field] / window_s for field, name in enumerate(FIELDS)}
    if recent[OVER]:
        status = "over"
    elif recent[DEGRADED]:
        status = "degraded"
    elif recent[SHADOWED]:
        status = "shadow"
    elif recent[NEAR]:
        status = "near"
    elif recent[DECISIONS]:
        status = "ok"
    else:
        status = "idle"
    counted = dict(zip(FIELDS, totals or [0] * len(FIELDS), strict=True))
    row: dict[str, Any] = {
        "path": path,
        "loaded": rule is not None,
        "status": status,
        "rate": rates,
        "totals": counted,
        # The Rules table's over: a shadow rule's would-be over included, as the sparkline
        # draws it and over_limit (/metrics) counts it; "shadowed" alone is the shadow panel's.
        "over": {
            "rate": (recent[OVER] + recent[SHADOWED]) / window_s,
            "total": counted["over"] + counted["shadowed"],
        },
        "history": {
            "decisions": [second[DECISIONS] for second in series],
            "over": [second[OVER] + second[SHADOWED] for second in series],
        },
    }
    if rule is not None:
        limits = "unlimited" if rule.unlimited else ", ".join(x.in_words() for x in rule.limits)
        row.update(
            domain=bounded(rule.domain),
            limits=bounded(limits),
            algorithm=bounded(rule.algorithm),
            failure_mode=bounded(rule.failure_mode),
            shadow_mode=rule.shadow_mode,
            quota_mode=rule.quota_mode,
            source=bounded(rule.source),
        )
    return row


def _sum_maps(maps: Iterable[dict[str, list[int]]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for counts_by_rule in maps:
        for rule, counts in counts_by_rule.items():
            into = out.setdefault(bounded(rule), [0] * len(FIELDS))
            for field, amount in enumerate(counts):
                into[field] += amount
    return out


def _modes(states: Sequence[dict[str, Any]]) -> dict[str, dict[str, int]]:
    out: dict[str, dict[str, int]] = {}
    for state in states:
        for rule, modes in state["modes"].items():
            into = out.setdefault(bounded(rule), {})
            for mode, amount in modes.items():
                name = bounded(mode)
                into[name] = into.get(name, 0) + amount
    return out


def _top(states: Sequence[dict[str, Any]], category: str) -> list[dict[str, Any]]:
    parts = [
        ([Heavy(key, count, error) for key, count, error in part["entries"]], part["floor"])
        for state in states
        for part in state["top"][category]
    ]
    capacity = max((int(s["top_capacity"]) for s in states), default=TOP_SHOWN)
    heavies = merge(parts, capacity)[:TOP_SHOWN]
    out = []
    for heavy in heavies:
        rule, _, key = heavy.key.partition("\x00")
        out.append(
            {
                "rule": bounded(rule),
                "key": bounded(key, MAX_KEY_CHARS),
                "hits": heavy.count,
                "error": heavy.error,
            }
        )
    return out


def _latency(buckets: list[int], calls: list[int], slowest: float) -> dict[str, Any]:
    """Store calls over the whole history (the last minute): their count, rate and quantiles
    cover the same seconds, which the panel's one heading names."""
    count = sum(buckets)
    return {
        "calls": count,
        "per_second": sum(calls) / len(calls) if calls else 0.0,
        "p50_s": _quantile(buckets, count, 0.50, slowest),
        "p99_s": _quantile(buckets, count, 0.99, slowest),
        "max_s": slowest if count else None,
        "history": calls,
    }


def _quantile(buckets: list[int], count: int, q: float, slowest: float) -> float | None:
    """The upper bound of the bucket holding the q-quantile (None without calls).

    Past the last bound, the slowest call seen: JSON has no infinity.
    """
    if not count:
        return None
    rank = q * count
    seen = 0
    for index, amount in enumerate(buckets):
        seen += amount
        if seen >= rank:
            return min(LATENCY_BOUNDS[index], slowest) if index < len(LATENCY_BOUNDS) else slowest
    return slowest
