"""Many samples observed into a Prometheus histogram at once: ``observe_many``.

prometheus_client's ``Histogram.observe`` takes two locks (the sum's, then a bucket's) and
walks the bucket bounds one by one: most of a microsecond a sample. The server tallies its
call and store timings and flushes them together (``ServiceStats.flush``): ``observe_many``
counts the samples into buckets first (``bisect_left`` over the bounds, in C) and then adds
each non-empty bucket's count and the samples' total once, under one lock each.

The result is what ``observe`` for each sample would give: a sample goes into the first
bucket whose bound is at least it (``amount <= bound``, so one equal to a bound is counted
in that bound's bucket; the last bound is +Inf), and the sum grows by the samples' total
(equal to the sample-by-sample sum up to float rounding). Exemplars are not recorded, as
``observe`` records none without one.

It reads private attributes of prometheus_client's histogram (a labelled child, or a
histogram without labels): ``_upper_bounds`` (sorted floats), ``_buckets`` and ``_sum``
(values with ``inc``: ``MutexValue``, or in multiprocess mode the mmap-backed
``MmapedValue``, the same ``inc``). When any is missing or shaped otherwise, as a future
prometheus_client may have it, each sample is given to ``observe`` instead: slower, never
wrong.

A leaf (it imports nothing of ratewarden, nor prometheus_client): ``PrometheusMetrics``
and the server's stats use it.
"""

from __future__ import annotations

import math
from bisect import bisect_left
from collections.abc import Sequence
from itertools import pairwise
from typing import Any, Protocol

__all__ = ["Observable", "observe_many"]


class Observable(Protocol):
    """What ``observe_many`` needs of a histogram: ``observe``, its fallback."""

    def observe(self, amount: float, /) -> None: ...


def observe_many(histogram: Observable, samples: Sequence[float]) -> None:
    """Observe each of ``samples`` into ``histogram``: the same bucket counts and (up to
    float rounding) the same sum as ``histogram.observe(sample)`` for each, in a few locked
    increments."""
    if not samples:
        return
    parts = _parts(histogram)
    total = sum(samples)
    # NaN: observe adds it to the sum and counts it in no bucket (every ``nan <= bound`` is
    # false), but bisect_left would count it in the first bucket (every ``bound < nan`` is
    # false too). A NaN or infinite sample makes the total NaN or infinite (as does a
    # finite total past the largest float), so one check sends any of them to observe,
    # which handles them as it always has; finite samples, what perf_counter differences
    # are, take the fast path.
    if parts is None or not math.isfinite(total):
        for sample in samples:
            histogram.observe(sample)
        return
    bounds, buckets, total_value = parts
    counts = [0] * len(bounds)
    for sample in samples:
        # bounds end in +Inf, so every finite sample's index is in range
        counts[bisect_left(bounds, sample)] += 1
    total_value.inc(total)  # observe increments the sum first, then the bucket
    for bucket, count in zip(buckets, counts, strict=True):
        if count:
            bucket.inc(count)


def _parts(histogram: object) -> tuple[list[float], list[Any], Any] | None:
    """``(upper bounds, bucket values, sum value)`` of a prometheus_client histogram child,
    or None when it does not have them in the shape ``observe_many`` relies on: bounds
    sorted floats ending in +Inf, one bucket value with ``inc`` per bound, a sum with ``inc``.
    """
    bounds = getattr(histogram, "_upper_bounds", None)
    buckets = getattr(histogram, "_buckets", None)
    total = getattr(histogram, "_sum", None)
    if not isinstance(bounds, list) or not isinstance(buckets, list):
        return None
    if not bounds or len(bounds) != len(buckets) or bounds[-1] != math.inf:
        return None
    if not all(type(bound) is float for bound in bounds):
        return None
    if any(low > high for low, high in pairwise(bounds)):
        return None
    if not callable(getattr(total, "inc", None)):
        return None
    if not all(callable(getattr(bucket, "inc", None)) for bucket in buckets):
        return None
    return bounds, buckets, total
