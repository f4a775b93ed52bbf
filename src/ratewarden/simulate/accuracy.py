"""How far the sliding window's estimate is from the exact count, on many sources.

The sliding window (``algorithms/sliding_window.py``) keeps two counters and
assumes the previous window's requests were spread evenly. The sliding log
counts exactly. Here both look at the same history: one admitted history per
source (the sliding window's, since that is the limiter being judged), and for
every request both the estimate and the exact count of that history in the
trailing period ``(t - P, t]``. A request is

- **wrongly allowed** when the estimate admits it but the exact count is
  already at the limit;
- **wrongly limited** when the estimate denies it but the exact count had room.

The *difference* is ``|estimate - exact| / exact`` per request (requests whose
exact count is 0 are left out of that mean), the figure Cloudflare reported as
6% next to 0.003% wrong decisions on its own traffic. Small counts make large
ratios (an estimate of 1.5 against 1 is 50% off), so the report also gives the
mean over requests whose exact count is at least half the limit ("near limit"),
where a decision can actually go wrong, and the mean absolute difference in
requests.

Sources are independent (each has its own key), so each is simulated alone:
its arrivals are generated, decided and forgotten before the next source, and
ten million requests fit in memory and in well under a minute. The decision
loop is written out inline for speed; a test holds it to
``sliding_window.check`` and ``sliding_log.check`` decision by decision.

Every source has its own mean rate, drawn log-normal (sigma 1) around a
median of ``load`` x the limit: with ``load=0.5`` about a quarter of the sources
offer more than the limit, with ``load=0.05`` almost none. The models differ
only in how a source spreads its mean over time (seeded: every run is the same):

- ``poisson``: exponential gaps, independent requests.
- ``onoff``: bursts and silences of exponential length (mean 10 s on, 40 s
  off), sending at five times the mean during a burst.
- ``pareto``: heavy-tailed gaps (Pareto, shape 1.5): long quiet spells, then
  clusters.

``worst period`` is the most any source got admitted in one trailing period:
what the sliding window's "slightly above the limit" came to on this traffic.

ratewarden's stores count admitted requests only (a denial writes nothing).
A limiter that counts every request a source sends (an edge deciding when to
start mitigating a source, say) is judged with ``counting="all"``: both
counters count every request, so a source that stays over the limit stays
denied by both, and only the transitions differ. The published figures do not
say which of the two Cloudflare's test counted, so the report offers both.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate._table import aligned

__all__ = [
    "CLOUDFLARE",
    "COUNTING",
    "MAX_LOAD",
    "MAX_REQUESTS",
    "MAX_SOURCES",
    "MIN_PERIODS",
    "MODELS",
    "Accuracy",
    "compare",
    "estimate_accuracy",
    "format_accuracy",
    "prepare",
]

_SECOND_US = 1_000_000

#: The most requests one report may simulate (per model).
MAX_REQUESTS = 100_000_000
#: The most sources (keys) one report may simulate, and the highest load (the median
#: source's mean rate as a multiple of the limit).
MAX_SOURCES = 10_000_000
MAX_LOAD = 1_000

#: What the two counters count: admitted requests (as the stores do) or every request.
COUNTING = ("admitted", "all")

#: The fewest periods a report may cover: the estimate only differs from the
#: exact count once a previous window weighs in.
MIN_PERIODS = 10

#: Cloudflare's published figures (400 million requests from 270,000 sources).
CLOUDFLARE = {"wrong_share": 0.003 / 100, "mean_difference": 0.06}

# Traffic model parameters, shared so that the models differ only in burstiness.
_SIGMA = 1.0  # log-normal spread of the sources' mean rates
_ON_S, _OFF_S = 10.0, 40.0  # mean burst and silence of the onoff model
_PARETO_SHAPE = 1.5

#: ``(mean gap us, duration us, rng) -> arrival times`` of one source.
_Arrivals = Callable[[float, int, random.Random], Iterator[int]]


def _poisson(gap_us: float, duration_us: int, rng: random.Random) -> Iterator[int]:
    """Exponential gaps averaging ``gap_us``."""
    rate = 1.0 / gap_us
    t = rng.expovariate(rate)
    while t < duration_us:
        yield int(t)
        t += rng.expovariate(rate)


def _onoff(gap_us: float, duration_us: int, rng: random.Random) -> Iterator[int]:
    """Bursts at ``(on + off) / on`` times the mean rate, silence in between.

    The phases are exponential (memoryless), so the bursts that end between two requests
    are drawn at once: their number is geometric, the burst time between the requests a
    gamma of one more, the silences a gamma of as many. The cost is per request, however
    many phases a quiet source lets pass.
    """
    burst = (_ON_S + _OFF_S) / _ON_S / gap_us  # requests per us during a burst
    ends = 1.0 / (_ON_S * _SECOND_US)  # bursts ending per us of burst
    off_us = _OFF_S * _SECOND_US
    log_ended = math.log1p(-burst / (burst + ends))  # log P(the burst ends before a request)
    t = rng.expovariate(1.0 / off_us)  # sources start at random phases
    while True:
        ended = math.floor(math.log(1.0 - rng.random()) / log_ended)
        if ended == 0:
            t += rng.expovariate(burst + ends)
        else:
            t += rng.gammavariate(ended + 1, 1.0 / (burst + ends))
            t += rng.gammavariate(ended, off_us)
        if t >= duration_us:
            return
        yield int(t)


def _pareto(gap_us: float, duration_us: int, rng: random.Random) -> Iterator[int]:
    """Pareto gaps (shape 1.5) scaled so that their mean is ``gap_us``."""
    scale = gap_us * (_PARETO_SHAPE - 1) / _PARETO_SHAPE
    t = scale * rng.paretovariate(_PARETO_SHAPE)
    while t < duration_us:
        yield int(t)
        t += scale * rng.paretovariate(_PARETO_SHAPE)


#: Traffic models by name.
MODELS: dict[str, _Arrivals] = {"poisson": _poisson, "onoff": _onoff, "pareto": _pareto}


@dataclass(frozen=True, slots=True)
class Accuracy:
    """The estimate against the exact count, for one traffic model."""

    model: str
    rate: str
    counting: str
    limit: int
    load: float
    sources: int
    requests: int
    wrongly_allowed: int
    wrongly_limited: int
    difference_sum: float
    difference_count: int
    absolute_sum: float
    near_sum: float
    near_count: int
    worst: int
    periods: float

    @property
    def wrong_share(self) -> float:
        """Share of all requests decided differently from the exact count."""
        return (self.wrongly_allowed + self.wrongly_limited) / max(self.requests, 1)

    @property
    def mean_difference(self) -> float:
        """Mean ``|estimate - exact| / exact`` over requests with ``exact > 0``."""
        return self.difference_sum / max(self.difference_count, 1)

    @property
    def near_difference(self) -> float:
        """Mean ``|estimate - exact| / exact`` where ``exact`` is at least half the limit."""
        return self.near_sum / max(self.near_count, 1)

    @property
    def mean_absolute(self) -> float:
        """Mean ``|estimate - exact|`` in requests, over every request."""
        return self.absolute_sum / max(self.requests, 1)


@dataclass(slots=True)
class _Tally:
    """Running totals of one model's report: the ``Accuracy`` fields of the same names."""

    requests: int = 0
    wrongly_allowed: int = 0
    wrongly_limited: int = 0
    difference_sum: float = 0.0
    difference_count: int = 0
    absolute_sum: float = 0.0
    near_sum: float = 0.0
    near_count: int = 0
    worst: int = 0


def _source(
    times: Iterable[int], limit: int, period_us: int, count_all: bool, tally: _Tally
) -> None:
    """Judge one source's requests (cost 1, times in order), adding to ``tally``.

    The estimate is ``sliding_window.check``'s (windows aligned on multiples of
    the period, compared without division); the exact count is
    ``sliding_log.check``'s over the same history: the admitted requests, or
    every request when ``count_all``.
    """
    log: deque[int] = deque()
    popleft, append = log.popleft, log.append
    window, prev, cur = -2, 0, 0
    room = limit * period_us
    requests = wrong_allowed = wrong_limited = counted = near_count = worst = 0
    relative = absolute = near = 0.0
    half = limit / 2
    for t in times:
        index = t // period_us
        if index != window:
            prev, cur = (cur, 0) if index == window + 1 else (0, 0)
            window = index
        horizon = t - period_us
        while log and log[0] <= horizon:
            popleft()
        exact = len(log)
        scaled = prev * (period_us - (t - index * period_us)) + cur * period_us
        requests += 1
        if scaled + period_us <= room:
            if exact >= limit:
                wrong_allowed += 1
            if exact >= worst and not count_all:
                worst = exact + 1
            cur += 1
            append(t)
        else:
            if exact < limit:
                wrong_limited += 1
            if count_all:
                cur += 1
                append(t)
        if exact:
            gap = abs(scaled / period_us - exact)
            relative += gap / exact
            absolute += gap
            counted += 1
            if exact >= half:
                near += gap / exact
                near_count += 1
    tally.requests += requests
    tally.wrongly_allowed += wrong_allowed
    tally.wrongly_limited += wrong_limited
    tally.difference_sum += relative
    tally.difference_count += counted
    tally.absolute_sum += absolute
    tally.near_sum += near
    tally.near_count += near_count
    tally.worst = max(tally.worst, worst)


def _mean_loads(sources: int, median: float, rng: random.Random) -> list[float]:
    """Each source's mean rate as a multiple of the limit (log-normal around ``median``)."""
    mu = math.log(median)
    return [rng.lognormvariate(mu, _SIGMA) for _ in range(sources)]


def estimate_accuracy(
    model: str,
    rate: Rate,
    requests: int,
    sources: int = 5_000,
    load: float = 0.5,
    seed: int = 1,
    counting: str = "admitted",
) -> Accuracy:
    """Simulate about ``requests`` requests from ``sources`` sources under ``model``.

    ``load`` is the median source's mean rate as a multiple of the limit (the
    sources' means are log-normal around it, sigma 1). The duration is chosen
    so that the means add up to ``requests`` in expectation; the report counts
    what was actually generated. ``counting`` is what both counters count:
    ``"admitted"`` (as ratewarden's stores do: a denial writes nothing) or
    ``"all"`` (every request, denied or not).
    """
    return prepare(model, rate, requests, sources, load, seed, counting)()


def prepare(
    model: str, rate: Rate, requests: int, sources: int, load: float, seed: int, counting: str
) -> Callable[[], Accuracy]:
    """``estimate_accuracy``'s run, checked and set up now, simulated when called.

    Bad arguments raise here the ConfigurationError ``estimate_accuracy`` would,
    so that a command checks every run before the first (long) one starts.
    """
    arrivals = MODELS.get(model)
    if arrivals is None:
        raise ConfigurationError(
            f"unknown traffic model {model!r}; choose one of: {', '.join(MODELS)}"
        )
    if isinstance(requests, bool) or not 1 <= requests <= MAX_REQUESTS:
        raise ConfigurationError(f"requests {requests!r} must be from 1 to {MAX_REQUESTS:,}")
    if isinstance(sources, bool) or not 1 <= sources <= min(requests, MAX_SOURCES):
        raise ConfigurationError(
            f"sources {sources!r} must be at least 1 and at most the number of requests"
        )
    if counting not in COUNTING:
        raise ConfigurationError(f"counting {counting!r} must be one of: {', '.join(COUNTING)}")
    if isinstance(load, bool) or not (isinstance(load, int | float) and 0 < load <= MAX_LOAD):
        raise ConfigurationError(f"load {load!r} must be a number above 0 and at most 1000")
    if rate.burst is not None and rate.burst != rate.limit:
        raise ConfigurationError(
            f"rate {rate}: the sliding window has no separate burst; drop burst="
        )
    means = _mean_loads(sources, load, random.Random(seed))
    per_us = rate.limit / rate.period_us  # requests per microsecond at load 1
    duration_us = max(1, round(requests / (sum(means) * per_us)))
    if duration_us < MIN_PERIODS * rate.period_us:
        raise ConfigurationError(
            f"{requests:,} requests from {sources:,} sources at load {load:g} last only "
            f"{duration_us / rate.period_us:.1f} periods of {rate}; the estimate needs at least "
            f"{MIN_PERIODS}: simulate more requests, fewer sources or a lower load"
        )

    def run() -> Accuracy:
        # The same means again, from the seed: a prepared run keeps no list of its sources.
        rng = random.Random(seed)
        means = _mean_loads(sources, load, rng)
        streams = (arrivals(1.0 / (mean * per_us), duration_us, rng) for mean in means)
        periods = duration_us / rate.period_us
        return compare(model, rate, streams, sources, load, periods, counting)

    return run


def compare(
    model: str,
    rate: Rate,
    streams: Iterable[Iterable[int]],
    sources: int,
    load: float = 0.0,
    periods: float = 0.0,
    counting: str = "admitted",
) -> Accuracy:
    """Judge every source's arrival times (microseconds, in order) against ``rate``."""
    tally = _Tally()
    count_all = counting == "all"
    for times in streams:
        _source(times, rate.limit, rate.period_us, count_all, tally)
    totals = {name: getattr(tally, name) for name in _Tally.__dataclass_fields__}
    return Accuracy(
        model=model,
        rate=str(rate),
        counting=counting,
        limit=rate.limit,
        load=load,
        sources=sources,
        periods=periods,
        **totals,
    )


def format_accuracy(rows: Sequence[Accuracy]) -> str:
    """The reports as a text table, with Cloudflare's figures as the last line."""
    header = ("model", "rate", "counting", "load", "sources", "requests", "wrongly allowed",
              "wrongly limited", "wrong", "mean difference", "near limit", "mean |diff|",
              "worst period")  # fmt: skip
    lines = [header]
    for row in rows:
        lines.append(
            (
                row.model,
                row.rate,
                row.counting,
                f"{row.load:g}",
                f"{row.sources:,}",
                f"{row.requests:,}",
                f"{row.wrongly_allowed:,}",
                f"{row.wrongly_limited:,}",
                f"{row.wrong_share:.4%}",
                f"{row.mean_difference:.2%}",
                f"{row.near_difference:.2%}",
                f"{row.mean_absolute:.2f}",
                f"{row.worst} ({row.worst / row.limit:.2f}x)" if row.worst else "-",
            )
        )
    lines.append(("cloudflare", "(reported)", "?", "?", "270,000", "400,000,000", "", "",
                  f"{CLOUDFLARE['wrong_share']:.4%}", f"{CLOUDFLARE['mean_difference']:.2%}",
                  "", "", ""))  # fmt: skip
    return aligned(lines, left=4)
