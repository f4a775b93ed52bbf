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

With ``--workers`` each worker's windows travel as plain data (``AgedQuantiles.state``,
``restore``), and ``merged`` answers over several workers' windows at once: the sum of
their answering streams, each turned to the reader's clock first. Every value in the sum
was observed within its own worker's window, so the merged answer keeps the window's
promise (four fifths of ``max_age`` to all of it) and the 1% bound.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any

from ratewarden.clock import Clock

__all__ = ["ACCURACY", "AgedQuantiles", "merged"]

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

    def state(self) -> list[Any]:
        """The counts as JSON-ready data: ``[positive, negative, zeros]``."""
        return [_pairs(self.positive), _pairs(self.negative), self.zeros]

    @classmethod
    def restore(cls, data: object) -> _Stream:
        """A stream from ``state()``'s data; ``ValueError`` when it is not that."""
        if not isinstance(data, list) or len(data) != 3:
            raise ValueError("a stream is [positive, negative, zeros]")
        stream = cls()
        positive, negative = _counts(data[0]), _counts(data[1])
        zeros = data[2]
        if type(zeros) is not int or zeros < 0:
            raise ValueError("a stream's zeros must be a count")
        stream.add(positive, negative, zeros)
        return stream

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


def _pairs(counts: Counter[int]) -> list[list[int]]:
    return [[index, count] for index, count in counts.items()]


def _counts(data: object) -> Counter[int]:
    if not isinstance(data, list):
        raise ValueError("a stream's buckets are [index, count] pairs")
    counts: Counter[int] = Counter()
    for pair in data:
        ok = isinstance(pair, list) and len(pair) == 2 and all(type(n) is int for n in pair)
        if not ok or pair[1] < 1:
            raise ValueError("a stream's buckets are [index, count] pairs")
        counts[pair[0]] += pair[1]
    return counts


def _number(value: object) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"{value!r} is not a finite number")
    return float(value)


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
        head = self._answering()
        return [head.quantile(q) for q in qs]

    def state(self) -> dict[str, Any]:
        """The window as JSON-ready data, for another process's ``restore``."""
        self._rotate()
        return {
            "step": self._step,
            "head": self._head,
            "rotates_at": self._rotates_at,
            "streams": [stream.state() for stream in self._streams],
        }

    @classmethod
    def restore(cls, clock: Clock, data: object) -> AgedQuantiles:
        """The window ``state()`` gave, read on ``clock`` (the same time as the writer's:
        wall-clock seconds); ``ValueError`` when ``data`` is not such a window."""
        if not isinstance(data, dict):
            raise ValueError("a window is a mapping")
        streams, head = data.get("streams"), data.get("head")
        step, rotates_at = _number(data.get("step")), _number(data.get("rotates_at"))
        if not isinstance(streams, list) or not streams:
            raise ValueError("a window needs its streams")
        if step <= 0 or type(head) is not int or not 0 <= head < len(streams):
            raise ValueError("a window's step must be positive and its head one of its streams")
        window = cls(clock, step * len(streams), len(streams))
        window._streams = [_Stream.restore(stream) for stream in streams]
        window._head = head
        window._rotates_at = rotates_at
        return window

    def _answering(self) -> _Stream:
        self._rotate()
        return self._streams[self._head]

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


def merged(windows: Sequence[AgedQuantiles], qs: Sequence[float]) -> list[float]:
    """Each of ``qs`` over every window's values at once (several workers' windows of one
    series); NaN for each when none saw a value in its window."""
    total = _Stream()
    for window in windows:
        head = window._answering()
        total.add(head.positive, head.negative, head.zeros)
    return [total.quantile(q) for q in qs]
