"""Reading statsd_exporter's mapping file (``--metrics-mapping``): ``load_mapping``.

Checked whole, as statsd_exporter's strict YAML reading checks it: an unknown field, a
name that is not a metric name, a glob or regex that does not compile, a label name of
one character, buckets that do not rise, options of a histogram on a summary: each stops
the start with the file, the mapping's number and the field. ``statsd_mapping`` says what
the fields mean.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from itertools import pairwise
from pathlib import Path
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.parsers import yaml_file
from ratewarden.server.statsd_mapping import (
    DEFAULT_BUCKETS,
    KINDS,
    MappingRule,
    StatsdMapping,
    SummaryOptions,
)
from ratewarden.server.upstream_settings import go_duration

__all__ = ["load_mapping", "parse_mapping"]

_GLOB = re.compile(
    r"^(\*|[a-zA-Z_][a-zA-Z0-9_\-]*)(\.\*|\.[a-zA-Z0-9_][a-zA-Z0-9_\-]*)*$"
)  # statsd_exporter's metricLineRE
_TEMPLATE_REF = r"(\$\{?\d+\}?)"
_METRIC_NAME = re.compile(rf"^([a-zA-Z_]|{_TEMPLATE_REF})([a-zA-Z0-9_]|{_TEMPLATE_REF})*$")
_LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]+$")  # two characters at least, as theirs
_MAPPING_FIELDS = {
    "match", "name", "labels", "honor_labels", "observer_type", "timer_type", "buckets",
    "quantiles", "match_type", "help", "action", "match_metric_type", "ttl",
    "summary_options", "histogram_options", "scale",
}  # fmt: skip
_DEFAULTS_FIELDS = {
    "observer_type", "timer_type", "buckets", "quantiles", "match_type",
    "glob_disable_ordering", "ttl", "summary_options", "histogram_options",
}  # fmt: skip
_HISTOGRAM_FIELDS = {"buckets", "native_histogram_bucket_factor", "native_histogram_max_buckets"}
_SUMMARY_FIELDS = {"quantiles", "max_age", "age_buckets", "buf_cap"}


def load_mapping(value: Any) -> StatsdMapping:
    """The mapping file at path ``value`` read (a mapping already read passes through);
    raises ``ConfigurationError`` naming the file, the mapping and the field."""
    if isinstance(value, StatsdMapping):
        return value
    path = Path(str(value).strip())
    loaded = yaml_file(path)
    return parse_mapping(loaded if loaded is not None else {}, str(path))


def parse_mapping(loaded: Any, where: str) -> StatsdMapping:
    """The mapping file's content, ``loaded`` from YAML, checked whole."""
    _fields(loaded, where, {"defaults", "mappings"})
    defaults = loaded.get("defaults") or {}
    _fields(defaults, f"{where}, defaults", _DEFAULTS_FIELDS)
    base = _Defaults(defaults, f"{where}, defaults")
    mappings = loaded.get("mappings") or []
    if not isinstance(mappings, list):
        raise ConfigurationError(f"{where}: mappings must be a list")
    rules = tuple(
        _rule(item, f"{where}, mapping {index}", base) for index, item in enumerate(mappings, 1)
    )
    return StatsdMapping(
        where,
        rules,
        base.observer_type,
        base.buckets,
        base.ttl,
        base.glob_disable_ordering,
        base.summary,
    )


class _Defaults:
    """The file's ``defaults``, with statsd_exporter's own where they are not given."""

    def __init__(self, given: Mapping[str, Any], where: str) -> None:
        self.match_type = _choice(given, "match_type", ("glob", "regex"), where) or "glob"
        self.observer_type = _observer(given, where) or "summary"
        self.ttl = _duration(given.get("ttl"), f"{where}: ttl")
        self.glob_disable_ordering = _flag(given, "glob_disable_ordering", where)
        histogram = given.get("histogram_options") or {}
        _fields(histogram, f"{where}, histogram_options", _HISTOGRAM_FIELDS)
        buckets = _numbers(histogram.get("buckets"), f"{where}, histogram_options: buckets")
        legacy = _numbers(given.get("buckets"), f"{where}: buckets")
        self.buckets = buckets or legacy or DEFAULT_BUCKETS
        self.summary = _summary(given, given.get("summary_options"), where, SummaryOptions())


def _rule(item: Any, where: str, base: _Defaults) -> MappingRule:
    _fields(item, where, _MAPPING_FIELDS)
    name = item.get("name")
    if not isinstance(name, str) or not name:
        raise ConfigurationError(f"{where} sets no metric name (name)")
    if not _METRIC_NAME.match(name):
        raise ConfigurationError(
            f"{where}: name {name!r} is not a metric name (letters, digits, _ and $N)"
        )
    match = item.get("match")
    if not isinstance(match, str) or not match:
        raise ConfigurationError(f"{where} has no match")
    match_type = _choice(item, "match_type", ("glob", "regex"), where) or base.match_type
    if match_type == "glob" and not _GLOB.match(match):
        raise ConfigurationError(
            f"{where}: match {match!r} is not a glob (dot-separated words, or * for a whole one)"
        )
    if match_type == "regex":
        try:
            re.compile(match)
        except re.error as exc:
            raise ConfigurationError(f"{where}: match {match!r} is not a regex: {exc}") from None
    labels = item.get("labels") or {}
    if not isinstance(labels, dict):
        raise ConfigurationError(f"{where}: labels must be a mapping of NAME: VALUE")
    for label, value in labels.items():
        if not isinstance(label, str) or not _LABEL_NAME.match(label):
            raise ConfigurationError(
                f"{where}: {label!r} is not a label name (two characters or more)"
            )
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise ConfigurationError(f"{where}: label {label}'s value {value!r} must be text")
    observer = _observer(item, where) or base.observer_type
    histogram, summary = item.get("histogram_options"), item.get("summary_options")
    if observer == "histogram" and summary is not None:
        raise ConfigurationError(f"{where}: a histogram cannot take summary_options")
    if observer == "summary" and histogram is not None:
        raise ConfigurationError(f"{where}: a summary cannot take histogram_options")
    buckets = _rule_buckets(item, histogram, where) or base.buckets
    summary_options = _summary(item, summary, where, base.summary)
    scale = item.get("scale")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, int | float)):
        raise ConfigurationError(f"{where}: scale {scale!r} must be a number")
    text = item.get("help") or ""
    if not isinstance(text, str):
        raise ConfigurationError(f"{where}: help must be text")
    ttl = _duration(item.get("ttl"), f"{where}: ttl") or base.ttl
    _flag(item, "honor_labels", where)  # StatsD lines of these stats carry no tags to honour
    return MappingRule(
        match=match,
        name=name,
        labels=tuple((label, str(value)) for label, value in labels.items()),
        match_type=match_type,
        action=_choice(item, "action", ("map", "drop"), where) or "map",
        match_metric_type=_choice(item, "match_metric_type", KINDS, where),
        observer_type=observer,
        buckets=buckets,
        scale=None if scale is None else float(scale),
        help=text,
        ttl=ttl,
        summary=summary_options,
    )


def _rule_buckets(item: Mapping[str, Any], histogram: Any, where: str) -> tuple[float, ...]:
    legacy = _numbers(item.get("buckets"), f"{where}: buckets")
    if histogram is None:
        return legacy
    _fields(histogram, f"{where}, histogram_options", _HISTOGRAM_FIELDS)
    buckets = _numbers(histogram.get("buckets"), f"{where}, histogram_options: buckets")
    if legacy and buckets:
        raise ConfigurationError(f"{where}: buckets both at the top and in histogram_options")
    return buckets or legacy


def _summary(
    item: Mapping[str, Any], summary: Any, where: str, base: SummaryOptions
) -> SummaryOptions:
    """The summary's options: its own (``quantiles`` at the top is the older spelling),
    else ``base``'s (the defaults', else the Go client's)."""
    quantiles = _quantiles(item.get("quantiles"), f"{where}: quantiles")
    if summary is None:
        return SummaryOptions(quantiles or base.quantiles, base.max_age, base.age_buckets)
    inner = f"{where}, summary_options"
    _fields(summary, inner, _SUMMARY_FIELDS)
    given = _quantiles(summary.get("quantiles"), f"{inner}: quantiles")
    if quantiles and given:
        raise ConfigurationError(f"{where}: quantiles both at the top and in summary_options")
    max_age = _duration(summary.get("max_age"), f"{inner}: max_age")
    age_buckets = _whole(summary.get("age_buckets"), f"{inner}: age_buckets")
    _whole(summary.get("buf_cap"), f"{inner}: buf_cap")  # read: the sketch has no buffer
    return SummaryOptions(
        quantiles or given or base.quantiles,
        max_age or base.max_age,
        age_buckets or base.age_buckets,
    )


def _whole(value: Any, where: str) -> int:
    """A whole number, 0 or more (0 and absent: the default)."""
    if value is None:
        return 0
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{where} {value!r} must be a whole number, 0 or more")
    return value


def _fields(given: Any, where: str, known: set[str]) -> None:
    if not isinstance(given, dict):
        raise ConfigurationError(f"{where} must be a mapping")
    unknown = sorted(str(key) for key in set(given) - known)
    if unknown:
        raise ConfigurationError(
            f"{where} has unknown fields {unknown} ({', '.join(sorted(known))})"
        )


def _choice(given: Mapping[str, Any], field: str, choices: tuple[str, ...], where: str) -> str:
    value = given.get(field)
    if value in (None, ""):
        return ""
    if value not in choices:
        raise ConfigurationError(f"{where}: {field} {value!r} is not one of {', '.join(choices)}")
    return str(value)


def _observer(given: Mapping[str, Any], where: str) -> str:
    """``observer_type``, else the older ``timer_type``."""
    kinds = ("histogram", "summary")
    return _choice(given, "observer_type", kinds, where) or _choice(
        given, "timer_type", kinds, where
    )


def _flag(given: Mapping[str, Any], field: str, where: str) -> bool:
    value = given.get(field, False)
    if not isinstance(value, bool):
        raise ConfigurationError(f"{where}: {field} {value!r} must be true or false")
    return value


def _numbers(value: Any, where: str) -> tuple[float, ...]:
    if value is None:
        return ()
    if not isinstance(value, list) or any(
        isinstance(item, bool) or not isinstance(item, int | float) for item in value
    ):
        raise ConfigurationError(f"{where} must be a list of numbers")
    if any(high <= low for low, high in pairwise(value)):
        raise ConfigurationError(f"{where} must rise from one bound to the next: {value}")
    return tuple(float(item) for item in value)


def _quantiles(value: Any, where: str) -> tuple[float, ...]:
    """The quantiles of a ``[{quantile, error}, ...]`` list (the errors are checked, then
    left: see ``server/quantiles.py``)."""
    if value is None:
        return ()
    if not isinstance(value, list):
        raise ConfigurationError(f"{where} must be a list of {{quantile, error}}")
    found = []
    for item in value:
        _fields(item, where, {"quantile", "error"})
        numbers = [item.get(key, 0) for key in ("quantile", "error")]
        if any(isinstance(n, bool) or not isinstance(n, int | float) for n in numbers):
            raise ConfigurationError(f"{where}: quantile and error must be numbers")
        if not 0 <= numbers[0] <= 1:
            raise ConfigurationError(f"{where}: quantile {numbers[0]!r} must be from 0 to 1")
        found.append(float(numbers[0]))
    return tuple(found)


def _duration(value: Any, where: str) -> float:
    """A Go duration (``10s``, ``5m``), or a whole number of nanoseconds, in seconds."""
    if value is None:
        return 0.0
    if isinstance(value, int) and not isinstance(value, bool):
        seconds = value / 1e9
    elif isinstance(value, str):
        try:
            seconds = go_duration(value)
        except ConfigurationError as exc:
            raise ConfigurationError(f"{where} {value!r} {exc}") from None
    else:
        raise ConfigurationError(f"{where} {value!r} must be a duration such as 10m")
    if seconds < 0:
        raise ConfigurationError(f"{where} {value!r} must not be negative")
    return seconds
