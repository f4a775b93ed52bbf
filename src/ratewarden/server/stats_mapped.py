"""envoyproxy/ratelimit's stats as Prometheus metrics named by a mapping file:
``MappedMetrics``, upstream's ``USE_PROMETHEUS`` sink with ``PROMETHEUS_MAPPER_YAML``.

Upstream's Prometheus sink hands each stat, by its StatsD name (``statsd.StatsEvents``
makes the same ones), to statsd_exporter's exporter; ``MappedMetrics`` does what that
exporter does with it:

- the stat's name and kind (counter, or observer for the ``response_time`` timer) are
  looked up in the mapping (``StatsdMapping.find``); a ``drop`` mapping drops it; a stat no
  mapping names keeps its StatsD name, escaped;
- ``scale`` multiplies the value (the timer's values are milliseconds, as upstream's);
- a counter adds to the counter of that name and labels, an observer goes into a
  histogram or a summary (the mapping's ``observer_type``, else the file's default, else
  summary);
- one name may carry several label sets (upstream's default mapping gives the per-key
  counters ``{domain, key1}`` and ``{domain, key1, key2}``): one metric family holds them;
- a name already taken by another kind of metric drops the stat (statsd_exporter's
  "conflict"), with a warning at most once a minute;
- a series not updated for its mapping's ``ttl`` is removed at the next read.

With ``upstream_names`` (``--metrics-upstream-names``, upstream's ``USE_PROMETHEUS=true``) a
counter's samples carry the mapped name as it is, as statsd_exporter's registry writes them
(not ``NAME_total``): gauges that only go up, as ``stats_upstream`` explains.

``ratewarden_metrics_mapping_events_total{result}`` counts the stats by what became of
them: ``mapped``, ``unmapped``, ``dropped``, ``conflict`` or ``error`` (a name Prometheus
refuses: a label called ``le`` on a histogram, say), as statsd_exporter's
``statsd_exporter_events_*`` count them.

A summary reports its quantiles (the mapping's ``quantiles``, else 0.5, 0.9 and 0.99) of
the values of the last ``max_age`` (``quantiles.AgedQuantiles``), beside its count and sum.

The metrics are not registered one by one: this is the registry's collector for all of
them. With ``--workers`` above 1 their values go to the shared multiprocess files like
every other metric, and whichever worker answers adds them up. The files keep every
series and no window of values, so each worker also writes what they lack
(``shared_state``: when each series with a ``ttl`` was last updated, and each summary
series' window), and the answering worker applies both over all workers
(``stats_mapped_shared``).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any, NamedTuple

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, Summary
from prometheus_client.samples import Sample

from ratewarden.clock import Clock, SystemClock
from ratewarden.histograms import observe_many
from ratewarden.metrics import LogRateLimiter
from ratewarden.server.quantiles import AgedQuantiles
from ratewarden.server.statsd import SERVER, StatsEvents
from ratewarden.server.statsd_mapping import StatsdMapping, SummaryOptions

__all__ = ["RESULTS", "MappedMetrics"]

log = logging.getLogger("ratewarden.server.stats_mapped")

#: What became of a stat, the ``result`` label of the events counter.
RESULTS = ("mapped", "unmapped", "dropped", "conflict", "error")
RESPONSE_TIME = SERVER + "response_time"
_CACHE = 65_536
_HELP = "envoyproxy/ratelimit's stat of that name, by the --metrics-mapping file."


class _Target(NamedTuple):
    """Where a stat's values go: ``child`` (None: nowhere), why, and the scale."""

    child: Any
    result: str
    scale: float
    kind: str
    series: tuple[Any, tuple[str, ...]] | None  # (metric, label values) when its ttl counts
    ttl: float
    ident: tuple[str, tuple[tuple[str, str], ...]] | None  # (name, labels) when its ttl counts


class MappedMetrics(StatsEvents):
    """Upstream's stats, named by ``mapping``, collected by ``registry``."""

    def __init__(
        self,
        mapping: StatsdMapping,
        registry: CollectorRegistry,
        *,
        clock: Clock | None = None,
        upstream_names: bool = False,
    ) -> None:
        super().__init__()
        self.mapping = mapping
        self._upstream_names = upstream_names
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._kinds: dict[str, str] = {}  # Prometheus name -> counter, histogram or summary
        self._metrics: dict[tuple[str, tuple[str, ...]], Any] = {}  # (name, label names)
        self._targets: dict[tuple[str, str], _Target] = {}  # (StatsD name, kind)
        self._touched: dict[tuple[Any, tuple[str, ...]], tuple[float, float]] = {}
        #: (name, labels) -> (last update, ttl) of every series with a ttl, kept after it
        #: expires here, for the other workers (``shared_state``).
        self._updated: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[float, float]] = {}
        self._lock = threading.Lock()
        self._lines = LogRateLimiter(60.0)
        events = Counter(
            "ratewarden_metrics_mapping_events",
            "envoyproxy/ratelimit's stats by what the --metrics-mapping file made of them.",
            ("result",),
            registry=registry,
        )
        self._events = {result: events.labels(result) for result in RESULTS}
        registry.register(self)

    # --- the stats (StatsEvents) ------------------------------------------------------

    def count(self, name: str, by: int = 1) -> None:
        target = self._target(name, "counter")
        self._events[target.result].inc()
        if target.child is None:
            return
        value = by * target.scale
        if value < 0:  # a negative scale: statsd_exporter refuses to lower a counter
            self._events["error"].inc()
            return
        target.child.inc(value)
        self._touch(target)

    def response_times(self, seconds: Sequence[float]) -> None:
        if not seconds:
            return
        target = self._target(RESPONSE_TIME, "observer")
        self._events[target.result].inc(len(seconds))
        if target.child is None:
            return
        factor = 1000.0 * target.scale  # upstream's timer is in milliseconds
        values = [s * factor for s in seconds]
        if target.kind == "histogram":
            observe_many(target.child, values)
        else:
            target.child.observe_many(values)
        self._touch(target)

    # --- the collector ----------------------------------------------------------------

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        """The mapped metrics, one family per name whatever its label sets."""
        self._expire()
        families: dict[str, Any] = {}
        for metric in list(self._metrics.values()):
            for family in metric.collect():
                merged = families.get(family.name)
                if merged is None:
                    families[family.name] = family
                else:
                    merged.samples.extend(family.samples)
        return list(families.values())

    # --- where a stat goes ------------------------------------------------------------

    def _target(self, name: str, kind: str) -> _Target:
        target = self._targets.get((name, kind))
        if target is None:
            with self._lock:
                if len(self._targets) >= _CACHE:
                    self._targets.clear()
                target = self._targets[(name, kind)] = self._resolve(name, kind)
        return target

    def _resolve(self, name: str, kind: str) -> _Target:
        mapped = self.mapping.find(name, kind)
        rule = mapped.rule
        if rule is not None and rule.action == "drop":
            return _Target(None, "dropped", 1.0, kind, None, 0.0, None)
        if kind == "counter":
            metric_kind = "counter"
        else:
            metric_kind = rule.observer_type if rule is not None else self.mapping.observer_type
        scale = 1.0 if rule is None or rule.scale is None else rule.scale
        ttl = rule.ttl if rule is not None else self.mapping.ttl
        result = "unmapped" if rule is None else "mapped"
        label_names = tuple(label for label, _ in mapped.labels)
        values = tuple(value for _, value in mapped.labels)
        if not mapped.name:
            return self._refused(name, "error", "the mapping gives it an empty name", kind)
        taken = self._kinds.get(mapped.name)
        if taken is not None and taken != metric_kind:
            return self._refused(name, "conflict", f"{mapped.name} is a {taken}", kind)
        metric = self._metrics.get((mapped.name, label_names))
        if metric is None:
            try:
                metric = self._make(mapped.name, metric_kind, label_names, rule)
            except ValueError as exc:
                return self._refused(name, "error", str(exc), kind)
            self._metrics[(mapped.name, label_names)] = metric
            self._kinds[mapped.name] = metric_kind
        child = metric.labels(*values) if label_names else metric
        series = (metric, values) if ttl > 0 else None
        ident = (mapped.name, mapped.labels) if ttl > 0 else None
        return _Target(child, result, scale, metric_kind, series, ttl, ident)

    def _make(self, name: str, kind: str, labels: tuple[str, ...], rule: Any) -> Any:
        text = (rule.help if rule is not None else "") or _HELP
        if kind == "counter" and self._upstream_names:
            return Gauge(name, text, labels, registry=None, multiprocess_mode="sum")
        if kind == "counter":
            return Counter(name, text, labels, registry=None)
        if kind == "histogram":
            buckets = rule.buckets if rule is not None else self.mapping.buckets
            return Histogram(name, text, labels, registry=None, buckets=buckets)
        options = rule.summary if rule is not None else self.mapping.summary
        return _Summary(name, text, labels, options, self._clock)

    def _refused(self, name: str, result: str, why: str, kind: str) -> _Target:
        self._lines.log(
            log,
            logging.WARNING,
            f"{result}:{name}",
            "--metrics-mapping: stat %s dropped (%s)",
            name,
            why,
            extra={"event": "metrics_mapping_dropped", "stat": name, "result": result},
        )
        return _Target(None, result, 1.0, kind, None, 0.0, None)

    # --- ttl --------------------------------------------------------------------------

    def _touch(self, target: _Target) -> None:
        if target.series is not None:
            touched = (self._clock.now(), target.ttl)
            self._touched[target.series] = touched
            assert target.ident is not None
            self._updated[target.ident] = touched

    def _expire(self) -> None:
        if not self._touched:
            return
        now = self._clock.now()
        stale = [series for series, (at, ttl) in self._touched.items() if now - at >= ttl]
        if not stale:
            return
        with self._lock:
            for metric, values in stale:
                del self._touched[(metric, values)]
                if values:
                    metric.remove(*values)
                else:
                    key = next(key for key, held in self._metrics.items() if held is metric)
                    del self._metrics[key]
                    if not any(name == key[0] for name, _ in self._metrics):
                        self._kinds.pop(key[0], None)
            self._targets.clear()  # the cached children of removed series are gone

    # --- what the other workers need ------------------------------------------------

    def shared_state(self) -> dict[str, Any]:
        """What the multiprocess files lack, as JSON-ready data (``stats_mapped_shared``):
        ``updated``, each series with a ``ttl`` and when it was last updated, and
        ``summaries``, each summary series' window and the quantiles it reports."""
        with self._lock:
            updated = [
                [name, [list(pair) for pair in labels], at, ttl]
                for (name, labels), (at, ttl) in self._updated.items()
            ]
            summaries = [m for m in self._metrics.values() if isinstance(m, _Summary)]
        return {
            "updated": updated,
            "summaries": [entry for summary in summaries for entry in summary.states()],
        }

    def __repr__(self) -> str:
        return f"MappedMetrics({self.mapping!r})"


class _Summary:
    """A summary with its quantiles: prometheus_client's ``Summary`` keeps the count and
    the sum (in the multiprocess files too), and an ``AgedQuantiles`` per series the
    quantiles, added to the family when it is collected (one process only)."""

    def __init__(
        self,
        name: str,
        text: str,
        labels: tuple[str, ...],
        options: SummaryOptions,
        clock: Clock,
    ) -> None:
        self._inner = Summary(name, text, labels, registry=None)
        self._name = name
        self._label_names = labels
        self._options = options
        self._clock = clock
        self._windows: dict[tuple[str, ...], AgedQuantiles] = {}
        self._lock = threading.Lock()

    def labels(self, *values: str) -> _SummaryChild:
        return _SummaryChild(self, self._inner.labels(*values), values)

    def observe_many(self, values: Sequence[float]) -> None:  # a summary without labels
        self.observed(self._inner, (), values)

    def observed(self, child: Any, key: tuple[str, ...], values: Sequence[float]) -> None:
        for value in values:
            child.observe(value)
        with self._lock:
            window = self._windows.get(key)
            if window is None:
                options = self._options
                window = AgedQuantiles(self._clock, options.max_age, options.age_buckets)
                self._windows[key] = window
            window.observe(values)

    def remove(self, *values: str) -> None:
        self._inner.remove(*values)
        with self._lock:
            self._windows.pop(values, None)

    def states(self) -> list[list[Any]]:
        """``[name, labels, quantiles, window]`` for each series (``shared_state``)."""
        with self._lock:
            windows = list(self._windows.items())
        return [
            [
                self._name,
                [list(pair) for pair in zip(self._label_names, key, strict=True)],
                list(self._options.quantiles),
                window.state(),
            ]
            for key, window in windows
        ]

    def collect(self) -> list[Any]:
        quantiles = self._options.quantiles
        families = list(self._inner.collect())
        with self._lock:
            windows = list(self._windows.items())
            answers = [(key, window.quantiles(quantiles)) for key, window in windows]
        for family in families:
            samples = [
                Sample(
                    family.name,
                    {
                        **dict(zip(self._label_names, key, strict=True)),
                        "quantile": repr(q),  # 0.5, 0.99: as the Go client writes them
                    },
                    value,
                )
                for key, values in answers
                for q, value in zip(quantiles, values, strict=True)
            ]
            family.samples[:0] = samples
        return families


class _SummaryChild:
    """One series of a ``_Summary``."""

    __slots__ = ("_child", "_key", "_summary")

    def __init__(self, summary: _Summary, child: Any, key: tuple[str, ...]) -> None:
        self._summary = summary
        self._child = child
        self._key = key

    def observe_many(self, values: Sequence[float]) -> None:
        self._summary.observed(self._child, self._key, values)
