"""A mapping file's ``ttl`` and summary quantiles with ``--workers``: what the multiprocess
files lack, shared beside them.

prometheus_client's multiprocess files hold each series' values (a summary's count and
sum), summed over the workers by whichever answers ``/metrics``. They keep every series
and no window of values. So each worker also writes ``mapped-<pid>.json`` to the same
directory once a second (``publish``), from ``MappedMetrics.shared_state``:

- ``updated``: each series whose mapping has a ``ttl``, with when this worker last
  updated it (kept after it expired here);
- ``summaries``: each summary series' window of values (``quantiles.AgedQuantiles``).

The answering worker (``SharedMapped``, the collector ``/metrics`` reads then) takes its
own state fresh and the others' last published ones, and

- leaves out a series whose latest update in any worker is ``ttl`` or more ago, as one
  process removes it. Its values stay in the files: when it is updated again it reappears
  with its counts so far, where one process starts it from zero (a counter's reset, which
  Prometheus's ``rate`` takes in its stride either way);
- adds each summary series' quantiles, over every worker's window at once
  (``quantiles.merged``).

A worker's updates reach the others' answers at most a publication (a second) late. The
files of a worker that is gone stay, as the multiprocess files do: its windows age out
and its series' times stay as they were. A file that cannot be read, or an entry that is
not what this version writes, is skipped.
"""

from __future__ import annotations

import os
from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Any

from prometheus_client.samples import Sample

from ratewarden.clock import Clock
from ratewarden.server.dashboard import shared
from ratewarden.server.quantiles import AgedQuantiles, merged
from ratewarden.server.stats_mapped import MappedMetrics

__all__ = ["KIND", "SharedMapped", "publish", "shared_view"]

#: The files' kind: ``mapped-<pid>.json``.
KIND = "mapped"
_REQUIRED = frozenset(("pid", "updated", "summaries"))
#: The labels a family's samples add to their series' own.
_SAMPLE_LABELS = ("le", "quantile")

Series = tuple[str, tuple[tuple[str, str], ...]]


def own_state(mapped: MappedMetrics) -> dict[str, Any]:
    """This worker's state, as ``publish`` writes it."""
    return {"pid": os.getpid(), **mapped.shared_state()}


def publish(directory: str, mapped: MappedMetrics) -> None:
    """Write this worker's ``mapped-<pid>.json`` for the others."""
    shared.publish(directory, own_state(mapped), KIND)


class SharedMapped:
    """The collector of ``/metrics`` with ``--workers`` and a mapping file: ``inner`` (a
    ``MultiProcessCollector``) with the ``ttl`` and quantiles applied over every worker."""

    def __init__(self, inner: Any, mapped: MappedMetrics, directory: str, clock: Clock) -> None:
        self._inner = inner
        self._mapped = mapped
        self._directory = directory
        self._clock = clock

    def describe(self) -> list[Any]:
        return []

    def collect(self) -> list[Any]:
        families = list(self._inner.collect())
        states = shared.gather(self._directory, own_state(self._mapped), KIND, _REQUIRED)
        return shared_view(families, states, self._clock)


def shared_view(families: list[Any], states: Sequence[Any], clock: Clock) -> list[Any]:
    """``families`` with the series expired in every worker of ``states`` left out and each
    summary series' quantiles over every worker's window added (``clock``: now)."""
    now = clock.now()
    expired = {series for series, (at, ttl) in _updated(states).items() if now - at >= ttl}
    windows: dict[Series, list[AgedQuantiles]] = defaultdict(list)
    asked: dict[Series, list[float]] = {}
    for series, quantiles, window in _summaries(states, clock):
        windows[series].append(window)
        asked.setdefault(series, quantiles)
    for family in families:
        if expired:
            family.samples = [s for s in family.samples if _series(family, s) not in expired]
        if family.type != "summary":
            continue
        added = []
        for series, found in windows.items():
            if series[0] != family.name or series in expired:
                continue
            labels, qs = dict(series[1]), asked[series]
            for q, value in zip(qs, merged(found, qs), strict=True):
                added.append(Sample(family.name, {**labels, "quantile": repr(q)}, value))
        family.samples[:0] = added
    return families


def _series(family: Any, sample: Any) -> Series:
    labels = sample.labels.items()
    return family.name, tuple(sorted((k, v) for k, v in labels if k not in _SAMPLE_LABELS))


def _labels(data: object) -> tuple[tuple[str, str], ...]:
    if not isinstance(data, list):
        raise ValueError("labels are [name, value] pairs")
    pairs = []
    for pair in data:
        ok = isinstance(pair, list) and len(pair) == 2
        if not ok or not all(isinstance(part, str) for part in pair):
            raise ValueError("labels are [name, value] pairs")
        pairs.append((pair[0], pair[1]))
    return tuple(sorted(pairs))


def _updated(states: Iterable[Any]) -> dict[Series, tuple[float, float]]:
    """Each series with a ttl: its latest update in any worker, and its ttl."""
    latest: dict[Series, tuple[float, float]] = {}
    for state in states:
        for entry in _entries(state, "updated"):
            try:
                name, labels, at, ttl = entry
                series = (str(name), _labels(labels))
                at, ttl = _number(at), _number(ttl)
            except (TypeError, ValueError):
                continue  # another version's entry
            held = latest.get(series)
            if held is None or at > held[0]:
                latest[series] = (at, ttl)
    return latest


def _summaries(
    states: Iterable[Any], clock: Clock
) -> Iterable[tuple[Series, list[float], AgedQuantiles]]:
    for state in states:
        for entry in _entries(state, "summaries"):
            try:
                name, labels, quantiles, window = entry
                asked = [_number(q) for q in quantiles]
                found = ((str(name), _labels(labels)), asked, AgedQuantiles.restore(clock, window))
            except (TypeError, ValueError):
                continue
            yield found


def _entries(state: Any, key: str) -> list[Any]:
    entries = state.get(key) if isinstance(state, dict) else None
    return entries if isinstance(entries, list) else []


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{value!r} is not a number")
    return float(value)
