"""The figures of ``python -m benchmarks --rlqs-fleet``: windows against the bound, shifts.

Pure functions of a ``Run`` (``_rlqs_fleet.py``). Over every window of ``W`` seconds (an
exact sliding window over the answers' times, as the load driver saw them) the most the
three Envoys admitted together, set against docs/rlqs.md's bound for ``R`` replicas,
``r W + M (R (floor(W / (K I)) + 1) + 1)`` with ``M = max(B, N)`` and ``K`` the replicas'
``--rlqs-change-rounds``, and the steady figure
``r W + M``. For each phase, how long the Envoy that became busy took to admit its fair
share (``RATE * BUSY / (BUSY + LIGHT)`` a second, 90% of it in one second), in seconds
and in Envoy 1.40's 5 s reporting intervals. Reported, never asserted.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks._rlqs_fleet import Run

from benchmarks import _rlqs_fleet as fleet

#: Envoy 1.40's seconds between two reports (its reporting_interval is ignored).
REPORT_S = 5.0
#: The newly busy Envoy has followed once it admits this part of its fair share in a second.
FOLLOWED = 0.9
WINDOWS = (1.0, 5.0, 10.0, 20.0, 60.0)


def most_in_window(times: Sequence[float], width: float) -> int:
    """The most of ``times`` (sorted) inside any window ``[t, t + width)``."""
    most = low = 0
    for high, t in enumerate(times):
        while t - times[low] >= width:
            low += 1
        most = max(most, high - low + 1)
    return most


def bounds(width: float, replicas: int, change_rounds: int = 1) -> tuple[float, float]:
    """docs/rlqs.md for ``width`` seconds: the steady figure and the worst case."""
    rate, most = fleet.RATE, max(fleet.BURST, fleet.ENVOYS)
    steady = rate * width + most
    spans = math.floor(width / (change_rounds * fleet.INTERVAL_S)) + 1
    worst = rate * width + most * (replicas * spans + 1)
    return steady, worst


@dataclass(frozen=True, slots=True)
class Window:
    width: float
    admitted: int
    steady: float
    worst: float


@dataclass(frozen=True, slots=True)
class Shift:
    """A phase: the Envoy that became busy, its fair share, when it admitted it (or None)."""

    phase: int
    envoy: int
    fair: float
    followed_s: float | None

    @property
    def intervals(self) -> float | None:
        return None if self.followed_s is None else self.followed_s / REPORT_S


def admitted_times(run: Run) -> list[float]:
    return sorted(t for answers in run.answers for t, status in answers if status == 200)


def windows(run: Run) -> list[Window]:
    times = admitted_times(run)
    out = []
    for width in WINDOWS:
        if width <= run.seconds:
            out.append(
                Window(
                    width,
                    most_in_window(times, width),
                    *bounds(width, run.replicas, run.change_rounds),
                )
            )
    return out


def shifts(run: Run, phase_s: float) -> list[Shift]:
    fair = fleet.RATE * fleet.BUSY / (fleet.BUSY + fleet.LIGHT)
    out = []
    for phase, rates in enumerate(fleet.SCHEDULE):
        envoy = rates.index(fleet.BUSY)
        start = phase * phase_s
        bins = [0] * math.ceil(phase_s)
        for t, status in run.answers[envoy]:
            if status == 200 and start <= t < start + phase_s:
                bins[int(t - start)] += 1
        followed = next((k + 1.0 for k, n in enumerate(bins) if n >= FOLLOWED * fair), None)
        out.append(Shift(phase, envoy, fair, followed))
    return out


def summary(run: Run) -> dict[str, Any]:
    answers = [a for envoy in run.answers for a in envoy]
    admitted = sum(status == 200 for _, status in answers)
    return {
        "replicas": run.replicas,
        "seconds": run.seconds,
        "asked": len(answers),
        "admitted": admitted,
        "denied": sum(status == 429 for _, status in answers),
        "other": sum(status not in (200, 429) for _, status in answers) + run.errors,
        "limit_times_seconds": fleet.RATE * run.seconds,
        "most_tokens_held": max((tokens for _, tokens, _ in run.held), default=0),
        "loadavg_start": run.loadavg_start,
    }


def text(runs: Sequence[Run], phase_s: float) -> str:
    lines = []
    for run in runs:
        s = summary(run)
        lines.append(
            f"R = {run.replicas}: {s['asked']:,} asked, {s['admitted']:,} admitted (the limit "
            f"over {run.seconds:g} s: {s['limit_times_seconds']:,}), {s['denied']:,} denied, "
            f"{s['other']} other; most tokens a fill held fleet-wide {s['most_tokens_held']} "
            f"(limit {fleet.RATE}); loadavg at start {s['loadavg_start'][0]:.2f}"
        )
        for w in windows(run):
            verdict = "within" if w.admitted <= w.worst else "OVER"
            lines.append(
                f"  W = {w.width:>4g} s: most admitted {w.admitted:>5,}  steady {w.steady:>7,.0f}"
                f"  bound {w.worst:>7,.0f}  {verdict}"
                f"{'' if w.admitted <= w.steady else ' (above steady)'}"
            )
        for shift in shifts(run, phase_s):
            took = (
                f"admitted {FOLLOWED:.0%} of it in a second {shift.followed_s:g} s after the "
                f"shift ({shift.intervals:.1f} reporting intervals)"
                if shift.followed_s is not None
                else f"never admitted {FOLLOWED:.0%} of it within the phase ({phase_s:g} s)"
            )
            lines.append(
                f"  phase {shift.phase + 1}: Envoy {shift.envoy} busy, fair share "
                f"{shift.fair:.1f}/s, {took}"
            )
    return "\n".join(lines)


def markdown(runs: Sequence[Run], phase_s: float) -> str:
    lines = [
        "| R | W | most admitted | steady `r W + M` | bound | phase shifts followed after |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        follow = ", ".join(
            "-" if s.followed_s is None else f"{s.followed_s:g} s" for s in shifts(run, phase_s)
        )
        for w in windows(run):
            lines.append(
                f"| {run.replicas} | {w.width:g} s | {w.admitted:,} | {w.steady:,.0f} | "
                f"{w.worst:,.0f} | {follow} |"
            )
    return "\n".join(lines)


def data(runs: Sequence[Run], phase_s: float, command: str) -> dict[str, Any]:
    return {
        "command": command,
        "rule": {"rate": fleet.RATE, "burst": fleet.BURST, "interval_s": fleet.INTERVAL_S},
        "schedule": fleet.SCHEDULE,
        "phase_s": phase_s,
        "runs": [
            {
                **summary(run),
                "windows": [vars_of(w) for w in windows(run)],
                "shifts": [vars_of(s) for s in shifts(run, phase_s)],
                "held": run.held,
            }
            for run in runs
        ],
    }


def vars_of(value: Window | Shift) -> dict[str, Any]:
    return {name: getattr(value, name) for name in value.__slots__}
