"""The report of ``python -m benchmarks --rlqs``: the table, issue 18's targets, the JSON.

A figure is the median over the rounds with their range beside it; a ratio to ``off`` is
taken round by round (round *i* of a variant against round *i* of ``off``, moments apart
in the same rotation). The targets are reported, never asserted.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import math
import os
import statistics
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from benchmarks._rlqs_stack import BOUND_RATE
from benchmarks._serve_report import span

if TYPE_CHECKING:
    from benchmarks._rlqs import Plan, Row

#: Issue 18's targets: RLQS at 0.9 of no filter, its service's CPU under 1% of the RLS's.
THROUGHPUT_SHARE = 0.9
CPU_SHARE = 0.01
#: The quota service's round interval (``--rlqs-interval``, its default) and the Envoys.
INTERVAL_S = 1.0
ENVOYS = 1
#: Which service answers a variant.
SERVICE = {
    "off": "",
    "filter": "",
    "rls": "serve_rls",
    "rlqs": "serve_rlqs",
    "rlqs-fixed": "serve_rlqs",
    "rlqs-allow": "serve_rlqs",
    "rlqs-bound": "serve_rlqs",
}


#: The throughput line's companions: the cheaper quota listeners and the control.
_BESIDE = (
    ("rlqs-fixed", "a fixed bucket id, no header read or regex"),
    ("rlqs-allow", "that fixed bucket assigned ALLOW_ALL, no token bucket"),
    ("filter", "one trivial filter, no quota"),
)


def _median(values: Sequence[float]) -> float:
    present = [v for v in values if not math.isnan(v)]
    return statistics.median(present) if present else math.nan


def _row(rows: Sequence[Row], variant: str) -> Row | None:
    return next((row for row in rows if row.variant == variant), None)


def vs_off(row: Row, rows: Sequence[Row]) -> list[float]:
    """``row``'s rate over ``off``'s, round by round."""
    off = _row(rows, "off")
    if off is None:
        return []
    return [
        mine.rate / theirs.rate if theirs.rate else math.nan
        for mine, theirs in zip(row.rounds, off.rounds, strict=False)
    ]


def cpu(row: Row, process: str) -> list[float]:
    """CPU ms per thousand requests of ``process`` in each of ``row``'s rounds."""
    return [r.per_thousand_ms(process) for r in row.rounds]


def idle_ms_per_s(rows: Sequence[Row], process: str) -> list[float]:
    """CPU ms a second of ``process`` during the rounds of the variants it does not serve."""
    return [
        r.cpu_s[process] * 1e3 / r.seconds
        for row in rows
        if SERVICE[row.variant] != process
        for r in row.rounds
    ]


def bound(seconds: float) -> tuple[float, float]:
    """docs/rlqs.md's bound over ``seconds`` for the bound rule, one Envoy: steady, worst."""
    rate, most = float(BOUND_RATE), max(BOUND_RATE, ENVOYS)
    return rate * seconds + most, rate * seconds + most * (math.floor(seconds / INTERVAL_S) + 2)


# --- the table --------------------------------------------------------------------------

_HEAD = (
    "variant", "requests/s median (min-max)", "vs no filter (rounds)", "admitted/s", "denied/s",
    "p50 ms", "p99 ms", "errors", "serve CPU ms/1k req", "envoy CPU ms/1k req",
    "upstream CPU ms/1k req",
)  # fmt: skip


def _cells(row: Row, rows: Sequence[Row]) -> list[str]:
    ratios = vs_off(row, rows)
    service = SERVICE[row.variant]
    return [
        row.variant + (f" (failed: {row.first_error})" if not row.rounds else ""),
        span([r.rate for r in row.rounds], ",.0f"),
        "-" if row.variant == "off" or not ratios else span(ratios, ".2f"),
        span([r.admitted / r.seconds for r in row.rounds], ",.0f"),
        span([r.denied / r.seconds for r in row.rounds], ",.0f"),
        span([r.p50_ms for r in row.rounds], ".2f"),
        span([r.p99_ms for r in row.rounds], ".2f"),
        f"{sum(r.errors for r in row.rounds):,}",
        span(cpu(row, service), ".3f") if service else "-",
        span(cpu(row, "envoy"), ".0f"),
        span(cpu(row, "upstream"), ".0f"),
    ]


def table(rows: Sequence[Row]) -> str:
    """The rows as aligned text."""
    lines = [list(_HEAD), *(_cells(row, rows) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(_HEAD))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(line, widths, strict=True)) for line in lines]
    out.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(out)


def markdown(rows: Sequence[Row]) -> str:
    """The rows as a markdown table."""
    lines = ["| " + " | ".join(_HEAD) + " |", "|" + " --- |" * len(_HEAD)]
    lines += ["| " + " | ".join(_cells(row, rows)) + " |" for row in rows]
    return "\n".join(lines)


# --- the targets ------------------------------------------------------------------------


def targets(rows: Sequence[Row]) -> list[str]:
    """Issue 18's three targets, each a line saying met or not and the figures."""
    out = []
    rlqs, rls, bounded = (_row(rows, v) for v in ("rlqs", "rls", "rlqs-bound"))
    off = _row(rows, "off")
    if rlqs is not None and rlqs.rounds:
        ratios = vs_off(rlqs, rows)
        middle = _median(ratios)
        met = "met" if middle >= THROUGHPUT_SHARE else "NOT met"
        over = sum(ratio >= THROUGHPUT_SHARE for ratio in ratios)
        out.append(
            f"throughput: RLQS at >= {THROUGHPUT_SHARE:g} of no filter (the median): {met}: "
            f"{span(ratios, '.2f')} over the rounds, {over} of {len(ratios)} rounds at >= "
            f"{THROUGHPUT_SHARE:g}; Envoy {span(cpu(rlqs, 'envoy'), '.0f')} us a request"
            + (f" against {span(cpu(off, 'envoy'), '.0f')} with no filter" if off else "")
        )
    for variant, what in _BESIDE:
        row = _row(rows, variant)
        if row is not None and row.rounds:
            ratios = vs_off(row, rows)
            out.append(
                f"  ({what}: {span(ratios, '.2f')} of no filter, "
                f"{sum(ratio >= THROUGHPUT_SHARE for ratio in ratios)} of {len(ratios)} rounds "
                f"at >= {THROUGHPUT_SHARE:g}; Envoy {span(cpu(row, 'envoy'), '.0f')} us a "
                "request)"
            )
    if rlqs is not None and rls is not None and rlqs.rounds and rls.rounds:
        quota, call = _median(cpu(rlqs, "serve_rlqs")), _median(cpu(rls, "serve_rls"))
        share = quota / call if call else math.nan
        met = "met" if share < CPU_SHARE else "NOT met"
        idle = _median(idle_ms_per_s(rows, "serve_rlqs"))
        above = [
            (r.cpu_s["serve_rlqs"] * 1e3 - idle * r.seconds) * 1e3 / r.answered
            for r in rlqs.rounds
            if r.answered
        ]
        out.append(
            f"service CPU: RLQS under {CPU_SHARE:.0%} of the RLS per request: {met}: "
            f"{quota:.3f} against {call:.1f} ms per 1,000 requests ({share:.2%}); "
            f"idle, serve --rlqs spends {span(idle_ms_per_s(rows, 'serve_rlqs'), '.2f')} ms/s "
            f"and serve (RLS) {span(idle_ms_per_s(rows, 'serve_rls'), '.2f')} ms/s; "
            f"RLQS above its idle: {span(above, '.3f')} ms per 1,000 requests"
        )
    if bounded is not None and bounded.rounds:
        seconds = bounded.rounds[0].seconds
        steady, worst = bound(seconds)
        admitted = [float(r.admitted) for r in bounded.rounds]
        met = "met" if max(admitted) <= steady else "NOT met"
        out.append(
            f"admission: {BOUND_RATE}/s to one Envoy, {seconds:g} s windows: {met}: admitted "
            f"{span(admitted, ',.0f')}, against r*W = {BOUND_RATE * seconds:,.0f}, the steady "
            f"bound r*W + M = {steady:,.0f} and the worst {worst:,.0f}"
        )
    return out


# --- the record -------------------------------------------------------------------------


def meta(plan: Plan, command: str) -> dict[str, Any]:
    from benchmarks._serve_report import _code, _versions

    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "versions": _versions(),
        "plan": dataclasses.asdict(plan),
        "loadavg_start": list(os.getloadavg()),
        "code": _code(),
    }


def write_json(path: Path, info: dict[str, Any], rows: Sequence[Row]) -> None:
    """The run as JSON: ``info``, every round of every row, and the targets' lines."""
    data = {
        **info,
        "rows": [
            {
                "variant": row.variant,
                "first_error": row.first_error,
                "rounds": [dataclasses.asdict(r) for r in row.rounds],
            }
            for row in rows
        ],
        "targets": targets(rows),
    }
    path.write_text(json.dumps(data, indent=1, allow_nan=True) + "\n")
