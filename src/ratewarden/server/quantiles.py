"""Quantiles over the last few minutes, for a mapping file's summaries: ``AgedQuantiles``.

statsd_exporter's summaries (Prometheus's Go client) report each quantile of the values
observed in a sliding window: ``max_age`` (10 minutes by default) split into
``age_buckets`` (5) streams. Every value goes into every stream; the oldest one answers,
and each ``max_age / age_buckets`` it is emptied and the next one answers. So an answer
covers between four fifths of ``max_age`` and all of it, and with no value in that time a
quantile is NaN.

This keeps the same window, but each stream is a log-bucketed sketch rather than the Go
client's targeted-quantile stream: a value is counted in the bucket ``ceil(log_g |v|)``
(``g = (1 + a) / (1 - a)``, ``a`` = 1%), and a quantile is answered with its bucket's
middle value, within 1% of the true value. The mapping's per-quantile ``error`` (a bound
on the rank) is read and has no effect. A stream holds one count per bucket it saw:
about 115 buckets per decade of values at most, whatever the rate.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence

from ratewarden.clock import Clock

__all__ = ["ACCURACY", "AgedQuantiles"]

#: The relative error of every answer.
ACCURACY = 0.01
_GAMMA = (1 + ACCURACY) / (1 - ACCURACY)
_LOG_GAMMA = math.log(_GAMMA)
#: Values nearer to zero than this count as zero.
_TINY = 1e-12


class _Stream:
    """Counts per bucket: positive values, negative ones (by their magnitude), zeros."""

    __slots__ = ("negative", "positive", "total", "zeros")

    def __init__(self) -> None:
        self.positive: Counter[int] = Counter()
        self.negative: Counter[int] = Counter()
        self.zeros = 0
        self.total = 0

    def add(self, positive: Counter[int], negative: Counter[int], zeros: int) -> None:
        self.positive.update(positive)
        if negative:
            self.negative.update(negative)
        self.zeros += zeros
        self.total += positive.total() + negative.total() + zeros

    def quantile(self, q: float) -> float:
        if not self.total:
            return math.nan
        rank = q * (self.total - 1)  # 0 for the smallest value, total - 1 for the largest
        seen = 0
        for index in sorted(self.negative, reverse=True):  # the most negative first
            seen += self.negative[index]
            if seen > rank:
                return -_middle(index)
        seen += self.zeros
        if seen > rank:
            return 0.0
        for index in sorted(self.positive):
            seen += self.positive[index]
            if seen > rank:
                return _middle(index)
        return _middle(max(self.positive))  # pragma: no cover - rank < total always lands


def _index(magnitude: float) -> int:
    return math.ceil(math.log(magnitude) / _LOG_GAMMA)


def _middle(index: int) -> float:
    """The value within ``ACCURACY`` of every value in bucket ``index``."""
    return 2 * _GAMMA**index / (_GAMMA + 1)


class AgedQuantiles:
    """The quantiles of the values observed in the last ``max_age`` seconds (see above)."""

    __slots__ = ("_clock", "_head", "_rotates_at", "_step", "_streams")

    def __init__(self, clock: Clock, max_age: float = 600.0, age_buckets: int = 5) -> None:
        if max_age <= 0 or age_buckets < 1:
            raise ValueError("max_age must be positive and age_buckets at least 1")
        self._clock = clock
        self._step = max_age / age_buckets
        self._streams = [_Stream() for _ in range(age_buckets)]
        self._head = 0
        self._rotates_at = clock.now() + self._step

    def observe(self, values: Iterable[float]) -> None:
        positive: Counter[int] = Counter()
        negative: Counter[int] = Counter()
        zeros = 0
        for value in values:
            if value > _TINY:
                positive[_index(value)] += 1
            elif value < -_TINY:
                negative[_index(-value)] += 1
            elif not math.isnan(value):  # NaN has no rank: left out
                zeros += 1
        self._rotate()
        for stream in self._streams:
            stream.add(positive, negative, zeros)

    def quantiles(self, qs: Sequence[float]) -> list[float]:
        """Each of ``qs`` (0 to 1) over the window; NaN for each when it saw no value."""
        self._rotate()
        head = self._streams[self._head]
        return [head.quantile(q) for q in qs]

    def _rotate(self) -> None:
        now = self._clock.now()
        if now < self._rotates_at:
            return
        streams = self._streams
        due = int((now - self._rotates_at) // self._step) + 1  # turns since the last one
        for _ in range(min(len(streams), due)):  # more than one round empties them all
            streams[self._head] = _Stream()
            self._head = (self._head + 1) % len(streams)
        self._rotates_at += self._step * due
