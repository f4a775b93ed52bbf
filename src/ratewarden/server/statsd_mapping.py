"""statsd_exporter's mapping file: StatsD names turned into Prometheus names and labels.

envoyproxy/ratelimit's ``USE_PROMETHEUS`` sink runs statsd_exporter's mapper (v0.26)
inside the service: every stat, by its StatsD name, goes through the mappings of
``PROMETHEUS_MAPPER_YAML`` (or upstream's default mapping) and becomes a Prometheus
metric. ``--metrics-mapping`` reads the same file, and ``StatsdMapping.find`` gives what
statsd_exporter's ``GetMapping`` gives, so a file written for upstream names the same
metrics here (``stats_mapped.MappedMetrics`` keeps them).

The file, as statsd_exporter reads it (unknown fields are refused, as its strict YAML
reading refuses them)::

    defaults:                      # all optional
      match_type: glob             # or regex
      observer_type: summary       # or histogram (timer_type: the older spelling)
      histogram_options: {buckets: [...]}      # default: Prometheus's DefBuckets
      summary_options: {quantiles: [{quantile: 0.5, error: 0.05}, ...], max_age: 10m}
      glob_disable_ordering: false
      ttl: 0                       # drop a series after this long without an update
    mappings:
      - match: "ratelimit.service.rate_limit.*.*.total_hits"
        name: "ratelimit_service_rate_limit_total_hits"
        labels: {domain: "$1", key1: "$2"}
        match_metric_type: counter # or gauge, observer: only stats of that type
        action: map                # or drop
        scale: 0.001               # every value multiplied by it
        help: "..."
        # observer_type, histogram_options, summary_options, ttl: as in defaults;
        # buckets, quantiles: the older spelling of the options' lists

A ``glob`` match is dot-separated fields, each a word or ``*``, which stands for one whole
field; a name matches a glob of as many fields. The first glob mapping in the file that
matches wins (with ``glob_disable_ordering``, the one whose fields are words the furthest
before its first ``*``: what statsd_exporter's state machine finds then). When no glob
mapping matches, the ``regex`` mappings are tried in order; a regex is searched for in the
name (unanchored, as Go's), in Python's syntax, which reads the patterns such files use
as RE2 does. ``$1`` or ``${1}`` in a name or a label stands for the match's field or group
(as statsd_exporter writes it: ``$1_total`` reads as a reference to ``1_total`` and so is
empty; write ``${1}_total``). A mapped name is then escaped for Prometheus (any character
but letters, digits and ``_`` becomes ``_``); so is the StatsD name of a stat no mapping
matches, which is kept as a metric of its own.

Where statsd_exporter differs: a file it cannot read leaves upstream running with no
mapping at all (upstream ignores the error); here it stops the start, naming the file and
the mapping. A summary's quantiles are within 1% of the value (``server/quantiles.py``),
not within the file's rank ``error``, over the same ``max_age`` and ``age_buckets``; with
``--workers`` above 1, over every worker's values (``server/stats_mapped_shared.py``). ``buf_cap``
and ``native_histogram_*`` are read and have no effect.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple

__all__ = [
    "DEFAULT_BUCKETS",
    "DEFAULT_QUANTILES",
    "Mapped",
    "MappingRule",
    "StatsdMapping",
    "SummaryOptions",
    "escape_name",
]

#: Prometheus's DefBuckets, statsd_exporter's histogram buckets when the file gives none.
DEFAULT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: statsd_exporter's quantiles when the file gives none.
DEFAULT_QUANTILES = (0.5, 0.9, 0.99)
KINDS = ("counter", "gauge", "observer")
#: Results remembered per (name, kind): stat names repeat every flush.
_CACHE = 65_536
_GLOB_REF = re.compile(r"\$\{?([a-zA-Z0-9_$]+)\}?")
_GO_REF = re.compile(r"\$(?:\{([a-zA-Z0-9_]+)\}|([a-zA-Z0-9_]+))")
_NOT_NAME = re.compile(r"[^a-zA-Z0-9_]")
_DASHES = re.compile(r"-{2,}")


def escape_name(name: str) -> str:
    """``name`` as statsd_exporter's ``EscapeMetricName`` makes it a Prometheus name: a
    leading digit gets a ``_`` before it, any other character than a letter, a digit or
    ``_`` becomes ``_`` (the second dash of ``--`` is dropped)."""
    if not name:
        return ""
    out = _NOT_NAME.sub("_", _DASHES.sub("-", name))
    return "_" + out if out[0].isdigit() else out


@dataclass(frozen=True, slots=True)
class SummaryOptions:
    """A summary's quantiles and their window (Prometheus's Go client's defaults: 10
    minutes in 5 streams)."""

    quantiles: tuple[float, ...] = DEFAULT_QUANTILES
    max_age: float = 600.0
    age_buckets: int = 5


@dataclass(frozen=True, slots=True)
class MappingRule:
    """One mapping of the file, with the defaults filled in."""

    match: str
    name: str
    labels: tuple[tuple[str, str], ...] = ()
    match_type: str = "glob"
    action: str = "map"
    match_metric_type: str = ""
    observer_type: str = "summary"
    buckets: tuple[float, ...] = DEFAULT_BUCKETS
    scale: float | None = None
    help: str = ""
    ttl: float = 0.0
    summary: SummaryOptions = SummaryOptions()

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.match.split("."))


class Mapped(NamedTuple):
    """What a stat maps to: its rule (None: no mapping matched), the Prometheus name
    (escaped) and the labels, sorted by name."""

    rule: MappingRule | None
    name: str
    labels: tuple[tuple[str, str], ...]


@dataclass(frozen=True, eq=False)
class StatsdMapping:
    """A mapping file, read: ``find`` maps a stat's name and kind."""

    path: str
    rules: tuple[MappingRule, ...]
    observer_type: str = "summary"
    buckets: tuple[float, ...] = DEFAULT_BUCKETS
    ttl: float = 0.0
    glob_disable_ordering: bool = False
    summary: SummaryOptions = SummaryOptions()

    def __post_init__(self) -> None:
        regexes = {rule.match: re.compile(rule.match) for rule in self.rules if _regex(rule)}
        object.__setattr__(self, "_regexes", regexes)
        object.__setattr__(self, "_cache", {})

    def find(self, name: str, kind: str) -> Mapped:
        """What the stat ``name`` of ``kind`` (counter, gauge or observer) maps to."""
        cache: dict[tuple[str, str], Mapped] = self._cache  # type: ignore[attr-defined]
        found = cache.get((name, kind))
        if found is None:
            if len(cache) >= _CACHE:
                cache.clear()
            found = cache[(name, kind)] = self._find(name, kind)
        return found

    def _find(self, name: str, kind: str) -> Mapped:
        fields = name.split(".")
        best: tuple[MappingRule, list[str]] | None = None
        for rule in self.rules:
            if _regex(rule) or rule.match_metric_type not in ("", kind):
                continue
            captures = _glob(rule.fields, fields)
            if captures is None:
                continue
            if not self.glob_disable_ordering:
                best = (rule, captures)
                break
            if best is None or _literal_first(rule.fields) > _literal_first(best[0].fields):
                best = (rule, captures)
        if best is not None:
            rule, captures = best
            return _mapped(rule, lambda text: _glob_fill(text, captures))
        regexes: dict[str, re.Pattern[str]] = self._regexes  # type: ignore[attr-defined]
        for rule in self.rules:
            if not _regex(rule):
                continue
            found = regexes[rule.match].search(name)
            if found is None or rule.match_metric_type not in ("", kind):
                continue
            return _mapped(rule, lambda text, found=found: _go_fill(text, found))
        return Mapped(None, escape_name(name), ())

    def __repr__(self) -> str:
        return f"StatsdMapping({self.path!r}, {len(self.rules)} mappings)"


def _regex(rule: MappingRule) -> bool:
    return rule.match_type == "regex"


def _glob(pattern: tuple[str, ...], fields: list[str]) -> list[str] | None:
    """The fields the ``*`` of ``pattern`` stand for, or None when ``fields`` do not match."""
    if len(pattern) != len(fields):
        return None
    captures = []
    for want, field in zip(pattern, fields, strict=True):
        if want == "*":
            captures.append(field)
        elif want != field:
            return None
    return captures


def _literal_first(pattern: tuple[str, ...]) -> tuple[bool, ...]:
    return tuple(field != "*" for field in pattern)


def _mapped(rule: MappingRule, fill: Any) -> Mapped:
    labels = tuple(sorted((label, fill(value)) for label, value in rule.labels))
    return Mapped(rule, escape_name(fill(rule.name)), labels)


def _glob_fill(template: str, captures: list[str]) -> str:
    """statsd_exporter's glob template: ``$N`` / ``${N}`` is the Nth ``*``'s field; a
    reference to anything else (a number past the last, ``$1_x`` read as ``1_x``) is empty."""

    def one(ref: re.Match[str]) -> str:
        text = ref.group(1)
        index = int(text) if text.isdigit() else 0
        return captures[index - 1] if 1 <= index <= len(captures) else ""

    return _GLOB_REF.sub(one, template)


def _go_fill(template: str, found: re.Match[str]) -> str:
    """Go's ``Regexp.ExpandString``: ``$N``, ``${N}``, ``$name``, ``${name}`` (the longest
    run of letters, digits and ``_``); an unknown group is empty; ``$$`` is ``$``."""
    out, at = [], 0
    while True:
        dollar = template.find("$", at)
        if dollar < 0:
            out.append(template[at:])
            return "".join(out)
        out.append(template[at:dollar])
        if template.startswith("$$", dollar):
            out.append("$")
            at = dollar + 2
            continue
        ref = _GO_REF.match(template, dollar)
        if ref is None:  # malformed: the $ is kept as it is
            out.append("$")
            at = dollar + 1
            continue
        key = ref.group(1) or ref.group(2)
        try:
            value = found.group(int(key) if key.isdigit() else key)
        except (IndexError, re.error):
            value = None
        out.append(value or "")
        at = ref.end()
