"""Pictures of simulated runs: what each algorithm admitted, against what was offered.

One figure per traffic pattern, one row per algorithm, two panels a row:

- left: offered and admitted requests per second over time (binned);
- right: cumulative admitted against the contract line ``limit / period x t``
  and the bucket envelope ``capacity + limit / period x t``.

A layered run (``layered.run_layered``) gets a limit line per layer on the left,
and each layer's envelope on the right, its height cut to what was admitted or
the lowest envelope, whichever is higher: the lowest envelope is the one that binds.

matplotlib is optional (``pip install 'ratewarden[simulate]'``) and imported
on first use; without it ``plot_runs`` raises a ``ConfigurationError`` that says
how to install it. The figure is drawn on a ``matplotlib.figure.Figure`` with
no pyplot, so nothing global (the backend, open figures) changes in the
calling process. The file's suffix picks the format: ``.png`` or ``.svg``.
"""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate
from pathlib import Path
from types import ModuleType
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate.layered import LayeredRun
from ratewarden.simulate.runner import Run

__all__ = ["FORMATS", "check_path", "plot_runs", "require_matplotlib"]

#: File suffixes ``plot_runs`` writes.
FORMATS = (".png", ".svg")

#: Bins along the time axis of the left panels.
_BINS = 200

#: The most bins a layered run's left panel gets: one per period of its shortest layer
#: (so a per-second layer's bursts show), up to this many.
_MOST_BINS = 5_000

#: Most points of a cumulative line before it is sampled instead of drawn per admission.
_STEPS = 5_000

#: The colours of a layered run's layers, in order (one rate's lines are red).
_LAYER_COLOURS = ("tab:red", "tab:orange", "tab:purple", "tab:green", "tab:brown")


def require_matplotlib() -> ModuleType:
    """``matplotlib.figure``, or a ConfigurationError naming the extra to install."""
    try:
        from matplotlib import figure
    except ImportError as exc:
        raise ConfigurationError(
            "plots need matplotlib, which is not installed: "
            "pip install 'ratewarden[simulate]' (or pip install matplotlib)"
        ) from exc
    return figure


def check_path(path: Path) -> None:
    """Refuse a file name ``plot_runs`` cannot write, before any simulation runs."""
    if path.name.lower() in FORMATS or not path.name:
        raise ConfigurationError(
            f"plot file {str(path)!r}: give a name before the suffix, such as out.png"
        )
    if path.suffix.lower() not in FORMATS:
        raise ConfigurationError(
            f"plot file {str(path)!r}: the name must end in {' or '.join(FORMATS)}"
        )
    if not path.parent.is_dir():
        raise ConfigurationError(
            f"plot file {str(path)!r}: directory {str(path.parent)!r} does not exist"
        )


def _binned(run: Run | LayeredRun, bins: int) -> tuple[list[float], list[float], list[float]]:
    """Bin centres (s), offered and admitted per second in each bin."""
    width_us = max(1, -(-run.duration_us // bins))
    offered = [0] * bins
    admitted = [0] * bins
    for t, cost, ok in zip(run.times_us, run.costs, run.allowed, strict=True):
        slot = min(t // width_us, bins - 1)
        offered[slot] += cost
        if ok:
            admitted[slot] += cost
    scale = 1_000_000 / width_us
    centres = [(i + 0.5) * width_us / 1_000_000 for i in range(bins)]
    return centres, [n * scale for n in offered], [n * scale for n in admitted]


def _layers(run: Run | LayeredRun) -> tuple[Rate, ...]:
    """The rates a run's lines are drawn for: its one rate, or each of its layers."""
    return run.rates if isinstance(run, LayeredRun) else (run.rate,)


def _colour(layer: int) -> str:
    """The colour of a run's layer ``layer`` (the only one of a single rate: red)."""
    return _LAYER_COLOURS[layer % len(_LAYER_COLOURS)]


def _rate_panel(axes: Any, run: Run | LayeredRun, bins: int) -> None:
    centres, offered, admitted = _binned(run, bins)
    axes.plot(centres, offered, color="0.6", linewidth=0.8, label="offered")
    axes.plot(centres, admitted, color="tab:blue", linewidth=1.0, label="admitted")
    rates = _layers(run)
    for i, rate in enumerate(rates):
        label = "limit / period" if len(rates) == 1 else f"{rate}: limit / period"
        axes.axhline(rate.limit * 1_000_000 / rate.period_us, color=_colour(i), linestyle=":",
                     linewidth=0.8, label=label)  # fmt: skip
    axes.set_ylabel(f"{run.algorithm}\nrequests/s")
    axes.legend(loc="upper right", fontsize="x-small")


def _cumulative(run: Run | LayeredRun) -> tuple[list[float], list[int]]:
    """Step points of cumulative admitted: every admission, or every 1/_STEPS of the run."""
    admitted = run.admitted_times()
    end = run.duration_us / 1_000_000
    if len(admitted) > _STEPS:
        # A point per admission would make an SVG of millions of vertices; sample the
        # step at _STEPS instants instead (each the total admitted up to that instant).
        width = run.duration_us / _STEPS
        totals = [0] * _STEPS
        for t, cost in admitted:
            totals[min(int(t // width), _STEPS - 1)] += cost
        times = [0.0, *((i + 1) * width / 1_000_000 for i in range(_STEPS))]
        return times, [0, *accumulate(totals)]
    times = [0.0, *(t / 1_000_000 for t, _ in admitted), end]
    counts = [0, *accumulate(cost for _, cost in admitted)]
    counts.append(counts[-1])
    return times, counts


def _cumulative_panel(axes: Any, run: Run | LayeredRun) -> None:
    times, counts = _cumulative(run)
    end = run.duration_us / 1_000_000
    axes.step(times, counts, where="post", color="tab:blue", linewidth=1.0, label="admitted")
    if isinstance(run, LayeredRun):
        _envelopes(axes, run.rates, end, counts[-1])
        return
    per_second = run.rate.limit * 1_000_000 / run.rate.period_us
    axes.plot([0, end], [0, per_second * end], color="tab:red", linewidth=0.8,
              label="contract (limit / period x t)")  # fmt: skip
    capacity = run.rate.capacity
    axes.plot([0, end], [capacity, capacity + per_second * end], color="tab:red",
              linestyle="--", linewidth=0.8, label="capacity + contract")  # fmt: skip
    axes.set_ylabel("cumulative admitted")
    axes.legend(loc="upper left", fontsize="x-small")


def _envelopes(axes: Any, rates: Sequence[Rate], end: float, admitted: int) -> None:
    """Each layer's ``capacity + limit / period x t``; the height stops a little above what
    was admitted or the lowest envelope's end, so the quota's line is not squashed flat."""
    tops = []
    for i, rate in enumerate(rates):
        per_second = rate.limit * 1_000_000 / rate.period_us
        tops.append(rate.capacity + per_second * end)
        axes.plot([0, end], [rate.capacity, tops[-1]], color=_colour(i), linestyle="--",
                  linewidth=0.8, label=f"{rate}: capacity + limit / period x t")  # fmt: skip
    axes.set_ylim(0, 1.1 * max(admitted, min(tops)))
    axes.set_ylabel("cumulative admitted")
    axes.legend(loc="upper left", fontsize="x-small")


def _bins(run: Run | LayeredRun, bins: int) -> int:
    """``bins``, or for a layered run as many as its shortest layer has periods (at most
    ``_MOST_BINS``): wider bins average a short layer's bursts below its own line."""
    if not isinstance(run, LayeredRun):
        return bins
    shortest = min(rate.period_us for rate in run.rates)
    return max(bins, min(_MOST_BINS, -(-run.duration_us // shortest)))


def plot_runs(runs: Sequence[Run | LayeredRun], path: str | Path, bins: int = _BINS) -> Path:
    """Draw ``runs`` (one pattern, any algorithms; one rate each or layered) into ``path``
    (.png or .svg); returns it."""
    target = Path(path)
    check_path(target)
    if not runs:
        raise ConfigurationError("plot_runs needs at least one run")
    figure = require_matplotlib()
    fig = figure.Figure(figsize=(12, 2.6 * len(runs) + 0.8), layout="constrained")
    grid = fig.subplots(len(runs), 2, squeeze=False, sharex=True)
    for row, run in zip(grid, runs, strict=True):
        _rate_panel(row[0], run, _bins(run, bins))
        _cumulative_panel(row[1], run)
    grid[-1][0].set_xlabel("seconds")
    grid[-1][1].set_xlabel("seconds")
    fig.suptitle(f"{runs[0].pattern}: admitted vs offered (left), cumulative vs contract (right)")
    try:
        fig.savefig(target, format=target.suffix.lower().lstrip("."))
    except OSError as exc:
        raise ConfigurationError(f"plot file {str(target)!r}: cannot write: {exc}") from exc
    return target
