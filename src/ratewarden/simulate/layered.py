"""Layered limits in simulated time: several rates on one key, decided all or nothing.

A layered limit (``limiter.hit(key, [Rate.parse("10/second"), Rate.parse("1000/hour")])``)
admits a request only when every layer has room, and a request that any layer
denies consumes nothing on the others. ``run_layered`` offers a pattern to such a
limit through the loop ``runner.run`` uses (``runner.decide``: a ``Limiter`` on
the in-process store, whose layers are the pure algorithm functions run by
``algorithms.layered``), and keeps for every decision which layers had no room
and which one the decision speaks for. A pattern's loads (and the boundary
pattern's window) are those of the first layer.

When several layers deny one request, it is counted two ways:

- ``denied``: once, for the layer that speaks for the denial (``Decision.rate``): the
  one that waits longest, whose ``retry_after`` the caller is told (on a tie, the
  first listed). The layers' ``denied`` add up to the run's.
- ``no room``: for every layer that had no room for it, whether or not another
  layer also refused it; so a request two layers refuse counts for both.

Like the single-rate table, the counts are in cost (requests, unless a replay
file gives costs).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from ratewarden import algorithms
from ratewarden.checks import check_rates
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate._pattern import Pattern, is_whole
from ratewarden.simulate._table import aligned
from ratewarden.simulate.runner import (
    check_duration,
    check_pattern,
    decide,
    effective_rate,
    p99_wait,
    worst_window,
)

__all__ = [
    "LayerSummary",
    "LayeredRun",
    "LayeredSummary",
    "check_layers",
    "format_layered",
    "parse_layers",
    "run_layered",
]


@dataclass(frozen=True, slots=True)
class LayerSummary:
    """One layer of a layered run: the denials it speaks for, those it had no room for, and
    the most admitted in one of its trailing periods."""

    rate: str
    limit: int
    denied: int
    no_room: int
    worst_window: int

    @property
    def worst_ratio(self) -> float:
        """The worst trailing period as a multiple of the layer's limit."""
        return self.worst_window / self.limit


@dataclass(frozen=True, slots=True)
class LayeredSummary:
    """A layered run's totals, and a ``LayerSummary`` per layer in the order given."""

    pattern: str
    algorithm: str
    offered: int
    admitted: int
    denied: int
    p99_wait_s: float | None
    layers: tuple[LayerSummary, ...]


@dataclass(frozen=True, slots=True)
class LayeredRun:
    """Every decision of one layered simulation, in arrival order (times relative to the start).

    ``binding`` is, per decision, the index of the layer that speaks for a denial (-1 when
    admitted); ``no_room`` has bit ``i`` set when layer ``i`` had no room.
    """

    pattern: str
    algorithm: str
    rates: tuple[Rate, ...]
    duration_us: int
    times_us: tuple[int, ...]
    costs: tuple[int, ...]
    allowed: tuple[bool, ...]
    delays_us: tuple[int, ...]
    binding: tuple[int, ...]
    no_room: tuple[int, ...]

    def admitted_times(self) -> list[tuple[int, int]]:
        """``(time_us, cost)`` of the admitted requests."""
        return [
            (t, c) for t, c, ok in zip(self.times_us, self.costs, self.allowed, strict=True) if ok
        ]

    def summary(self) -> LayeredSummary:
        """Totals, then per layer: denied, no room and its worst trailing period."""
        offered = sum(self.costs)
        admitted_times = self.admitted_times()
        admitted = sum(cost for _, cost in admitted_times)
        denied = [0] * len(self.rates)
        no_room = [0] * len(self.rates)
        for cost, binding, refused in zip(self.costs, self.binding, self.no_room, strict=True):
            if binding < 0:
                continue
            denied[binding] += cost
            for i in range(len(self.rates)):
                if refused >> i & 1:
                    no_room[i] += cost
        layers = tuple(
            LayerSummary(
                rate=str(rate),
                limit=rate.limit,
                denied=denied[i],
                no_room=no_room[i],
                worst_window=worst_window(admitted_times, rate.period_us),
            )
            for i, rate in enumerate(self.rates)
        )
        return LayeredSummary(
            pattern=self.pattern,
            algorithm=self.algorithm,
            offered=offered,
            admitted=admitted,
            denied=offered - admitted,
            p99_wait_s=p99_wait(self.algorithm, self.delays_us, self.allowed),
            layers=layers,
        )


#: The most digits a layer's burst is read with (a rate's own limit takes no more).
_DIGITS = 20

_TWO_OR_MORE = (
    "a layered limit needs two rates or more, such as 10/second,1000/hour; "
    "one rate alone is a single-rate run"
)


def parse_layers(text: str) -> tuple[Rate, ...]:
    """``"10/second,1000/hour"`` (``,`` or ``;`` between layers, as ``Rate.parse_many``);
    a layer may carry its own burst: ``"10/second:burst=20,1000/hour"``."""
    rates = []
    parts = [part.strip() for part in re.split(r"[;,]", text)]
    if "" in parts[:-1] or (len(parts) > 1 and not parts[-1] and not parts[-2]):
        raise ConfigurationError("a layer is empty; write the rates as 10/second,1000/hour")
    for part in filter(None, parts):
        spec, colon, option = part.partition(":")
        burst = None
        if colon:
            key, _, raw = (text.strip() for text in option.partition("="))
            if key != "burst" or not is_whole(raw) or len(raw) > _DIGITS or int(raw) < 1:
                raise ConfigurationError(
                    f"layer {part!r}: the one option a layer takes is burst=N, "
                    "a whole number above 0 (10/second:burst=20)"
                )
            burst = int(raw)
        rates.append(Rate.parse(spec, burst=burst))
    if len(rates) < 2:
        raise ConfigurationError(_TWO_OR_MORE)
    return tuple(rates)


def check_layers(algorithm: str, rates: Sequence[Rate]) -> tuple[Rate, ...]:
    """``rates`` as ``algorithm`` runs them as layers (window algorithms drop a burst, as
    ``runner.run`` does), refused unless there are two or more, none twice, each one the
    algorithm can take. ``rates`` as text is refused (``parse_layers`` reads it), as is a
    single Rate or anything else that is not a list or tuple of Rates."""
    module = algorithms.get(algorithm)
    if isinstance(rates, str):
        raise ConfigurationError(
            f"rates {rates!r} are text, not Rates; read them with parse_layers({rates!r})"
        )
    if isinstance(rates, Rate):
        raise ConfigurationError(
            f"rates {str(rates)!r} is one Rate; a layered limit is a list of two or more "
            "(one rate alone is a single-rate run)"
        )
    if not isinstance(rates, list | tuple):
        raise ConfigurationError(f"rates {rates!r} must be a list of two Rates or more")
    for rate in rates:
        if not isinstance(rate, Rate):
            example = rate if isinstance(rate, str) else "10/second"
            raise ConfigurationError(f"layer {rate!r} is not a Rate; use Rate.parse({example!r})")
    layers = tuple(effective_rate(module.NAME, rate) for rate in rates)
    if len(layers) < 2:
        raise ConfigurationError(_TWO_OR_MORE)
    try:
        check_rates(layers)
        for rate in layers:
            module.params(rate)
    except ConfigurationError as exc:
        raise ConfigurationError(f"as layers of {module.NAME}: {exc}") from None
    return layers


def run_layered(
    pattern: Pattern, algorithm: str, rates: Sequence[Rate], duration_s: float
) -> LayeredRun:
    """Offer ``pattern`` for ``duration_s`` seconds to ``algorithm`` with ``rates`` as layers
    of one key (all or nothing, as ``Limiter.hit(key, rates)`` decides them)."""
    check_pattern(pattern)
    layers = check_layers(algorithm, rates)  # refused before anything runs
    name = algorithms.get(algorithm).NAME
    duration_us = check_duration(duration_s)
    times: list[int] = []
    costs: list[int] = []
    allowed: list[bool] = []
    delays: list[int] = []
    binding: list[int] = []
    no_room: list[int] = []
    for t, cost, decision in decide(pattern, name, layers, duration_us):
        times.append(t)
        costs.append(cost)
        allowed.append(decision.allowed)
        delays.append(round(decision.delay * 1_000_000))
        if decision.allowed:
            binding.append(-1)
            no_room.append(0)
            continue
        binding.append(layers.index(decision.rate))  # the layer that speaks for the denial
        no_room.append(sum(1 << i for i, layer in enumerate(decision.layers) if not layer.allowed))
    return LayeredRun(
        pattern=pattern.describe(),
        algorithm=name,
        rates=layers,
        duration_us=duration_us,
        times_us=tuple(times),
        costs=tuple(costs),
        allowed=tuple(allowed),
        delays_us=tuple(delays),
        binding=tuple(binding),
        no_room=tuple(no_room),
    )


def format_layered(rows: Sequence[LayeredSummary]) -> str:
    """The summaries as an aligned text table: per run, a row for all layers, then one per
    layer (the denials it speaks for, those it had no room for, its worst period)."""
    header = ("pattern", "algorithm", "layer", "offered", "admitted", "denied", "no room",
              "worst period", "p99 wait")  # fmt: skip
    lines = [header]
    for row in rows:
        wait = "-" if row.p99_wait_s is None else f"{row.p99_wait_s:.3f}s"
        lines.append((row.pattern, row.algorithm, "all layers", str(row.offered),
                      str(row.admitted), str(row.denied), "-", "-", wait))  # fmt: skip
        lines += [
            (row.pattern, row.algorithm, layer.rate, "-", "-", str(layer.denied),
             str(layer.no_room), f"{layer.worst_window} ({layer.worst_ratio:.2f}x)", "-")
            for layer in row.layers
        ]  # fmt: skip
    return aligned(lines, left=3)
