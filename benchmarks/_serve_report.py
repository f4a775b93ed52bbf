"""The report of ``python -m benchmarks --serve``: the table, each row against its grpcio twin,
issue 17's targets, Envoy's filter against no filter, and the JSON.

A ratio is a native row's rate over the same case's on ``--transport grpcio``
in the same run: the ratio of the two medians, and beside it the range of the
round-by-round ratios (round *i* of one against round *i* of the other, run
moments apart in the same rotation). The targets are reported, never asserted.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from benchmarks._serve import Case, Plan, Row

#: Issue 17's targets for this 2-core machine.
REDIS_CALLS = 10_000
REDIS_P99_MS = 5.0
REDIS_IN_FLIGHT = 16
REDIS_VS_GRPCIO = 4.0
MEMORY_CALLS = 20_000
SERVE_CPU_US = 100.0
_CPU = ("serve", "redis", "envoy", "upstream", "h2load")


def span(values: Sequence[float], fmt: str) -> str:
    """``median (min-max)`` of ``values`` (NaNs left out); ``-`` when there are none."""
    present = [v for v in values if not math.isnan(v)]
    if not present:
        return "-"
    middle = statistics.median(present)
    return f"{middle:{fmt}} ({min(present):{fmt}}-{max(present):{fmt}})"


def ratio(row: Row, rows: Sequence[Row]) -> tuple[float, list[float]] | None:
    """``row``'s median rate over its grpcio twin's, and the round-by-round ratios; None for
    a grpcio row, Envoy without the filter, or a twin that made no calls."""
    if row.case.transport in ("", "grpcio"):
        return None
    twin = next((r for r in rows if r.case == row.case.twin), None)
    if twin is None or not twin.median:
        return None
    rounds = [
        mine.rate / theirs.rate if theirs.rate > 0 else math.nan
        for mine, theirs in zip(row.rounds, twin.rounds, strict=False)
    ]
    return row.median / twin.median, rounds


# --- the table --------------------------------------------------------------------------

_HEADERS = (
    "case", "transport", "in flight", "calls/s median (min-max)", "vs grpcio (rounds)",
    "p50 ms", "p99 ms median (min-max)", "errors", *(f"{name} CPU us/call" for name in _CPU),
)  # fmt: skip


def _cells(row: Row, rows: Sequence[Row]) -> list[str]:
    def cpu(name: str) -> str:
        value = row.cpu_median(name)
        return "-" if value is None else f"{value:,.0f}"

    found = ratio(row, rows)
    versus = "-"
    if found is not None:
        versus = f"{found[0]:.2f}x"
        present = [r for r in found[1] if not math.isnan(r)]
        if present:
            versus += f" ({min(present):.2f}-{max(present):.2f})"
    return [
        row.case.label, row.case.transport or "-", str(row.case.in_flight),
        span(row.rates, ",.0f"), versus, f"{row.p_median('p50'):.2f}",
        span(row.p("p99"), ".2f"), f"{row.errors:,}", *(cpu(name) for name in _CPU),
    ]  # fmt: skip


def markdown(rows: Sequence[Row]) -> str:
    """The table as Markdown."""
    lines = ["| " + " | ".join(_HEADERS) + " |", "|---|---|" + "---:|" * (len(_HEADERS) - 2)]
    lines += ["| " + " | ".join(_cells(row, rows)) + " |" for row in rows]
    return "\n".join(lines)


def table(rows: Sequence[Row]) -> str:
    """The table as plain text."""
    cells = [list(_HEADERS), *(_cells(row, rows) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_HEADERS))]
    out = []
    for n, line in enumerate(cells):
        out.append(
            "  ".join(
                c.ljust(w) if i < 2 else c.rjust(w)
                for i, (c, w) in enumerate(zip(line, widths, strict=True))
            ).rstrip()
        )
        if n == 0:
            out.append("  ".join("-" * w for w in widths))
    return "\n".join(out)


# --- the targets ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Target:
    """One of issue 17's targets: met when a row of the run meets it, each candidate's line."""

    name: str
    met: bool
    lines: tuple[str, ...]

    def text(self) -> str:
        verdict = "MET" if self.met else "NOT MET"
        # Met when any row met it: say how many did (a row at 64 in flight may meet what the
        # rows at 16 do not).
        rows = sum("-> " in line for line in self.lines)
        if rows:
            verdict += f" (in {sum('-> MET' in line for line in self.lines)} of {rows} rows)"
        return "\n".join([f"{self.name}: {verdict}", *(f"  {line}" for line in self.lines)])

    def to_json(self) -> dict[str, Any]:
        return {"target": self.name, "met": self.met, "rows": list(self.lines)}


def _plain(case: Case, server: str) -> bool:
    return case.server.startswith(server) and case.descriptors == 3 and not case.deny


def _name(row: Row) -> str:
    return f"{row.case.label}, {row.case.transport}, {row.case.in_flight} in flight"


def _verdict(ok: bool) -> str:
    return "MET" if ok else "NOT MET"


def targets(rows: Sequence[Row]) -> list[Target]:
    """Issue 17's three service targets, judged on this run's rows (medians over rounds)."""
    found = []
    lines, met = [], False
    for row in rows:
        c = row.case
        if not _plain(c, "redis") or c.in_flight != REDIS_IN_FLIGHT or c.transport == "grpcio":
            continue
        versus = ratio(row, rows)
        times = versus[0] if versus else math.nan
        p99 = row.p_median("p99")
        ok = row.median >= REDIS_CALLS and p99 <= REDIS_P99_MS and times >= REDIS_VS_GRPCIO
        each = [
            a.rate >= REDIS_CALLS and a.p99_ms <= REDIS_P99_MS and r >= REDIS_VS_GRPCIO
            for a, r in zip(row.rounds, versus[1] if versus else [], strict=False)
        ]
        met |= ok
        lines.append(
            f"{_name(row)}: {span(row.rates, ',.0f')} calls/s, p99 {span(row.p('p99'), '.2f')}"
            f" ms, {times:.2f}x grpcio -> {_verdict(ok)} ({sum(each)} of {len(row.rounds)} "
            "rounds met all three)"
        )
    found.append(
        Target(
            f"Redis, 3 descriptors, {REDIS_IN_FLIGHT} in flight: >= {REDIS_CALLS:,} calls/s "
            f"at p99 <= {REDIS_P99_MS:g} ms and >= {REDIS_VS_GRPCIO:g}x grpcio in the same run",
            met,
            tuple(lines) or ("no row: the run had no Redis rows on a transport other than grpcio",),
        )
    )
    lines, met = [], False
    for row in rows:
        if _plain(row.case, "memory"):
            ok = row.median >= MEMORY_CALLS
            met |= ok
            fast = sum(r.rate >= MEMORY_CALLS for r in row.rounds)
            lines.append(
                f"{_name(row)}: {span(row.rates, ',.0f')} calls/s -> {_verdict(ok)} "
                f"({fast} of {len(row.rounds)} rounds)"
            )
    found.append(Target(f"memory, 3 descriptors: >= {MEMORY_CALLS:,} calls/s", met, tuple(lines)))
    lines, met = [], False
    for row in rows:
        cpu = row.cpu_median("serve")
        if _plain(row.case, "redis") and cpu is not None:
            ok = cpu <= SERVE_CPU_US
            met |= ok
            lines.append(
                f"{_name(row)}: serve {span(row.cpu_us('serve'), ',.0f')} us/call -> {_verdict(ok)}"
            )
    found.append(
        Target(
            f"serve's own CPU per call, Redis, 3 descriptors: <= {SERVE_CPU_US:g} us",
            met,
            tuple(lines) or ("no row: the run had no Redis rows",),
        )
    )
    return found


def envoy_notes(rows: Sequence[Row]) -> list[str]:
    """Each filter variant's p50/p99 and throughput against ``off`` at the same requests in
    flight, and Envoy's filter counters (``error``: the call failed or passed the 20 ms
    timeout, and the request went on, ``failure_mode_allowed``)."""
    offs = {r.case.in_flight: r for r in rows if r.case.envoy == "off"}
    notes = []
    for row in rows:
        off = offs.get(row.case.in_flight)
        if not row.case.envoy or row.case.envoy == "off" or off is None or not off.median:
            continue
        p50 = row.p_median("p50") - off.p_median("p50")
        p99 = row.p_median("p99") - off.p_median("p99")
        notes.append(
            f"filter -> {row.case.envoy} on {row.case.transport}, {row.case.in_flight} in flight: "
            f"p50 {p50:+.2f} ms, p99 {p99:+.2f} ms, requests/s x{row.median / off.median:.2f} "
            f"of no filter; Envoy's ratelimit counters {row.envoy_stats}"
        )
    return notes


# --- the record -------------------------------------------------------------------------


def row_json(row: Row, rows: Sequence[Row]) -> dict[str, Any]:
    c = row.case
    versus = ratio(row, rows)
    return {
        "label": c.label,
        "server": c.server,
        "transport": c.transport or None,
        "descriptors": c.descriptors,
        "in_flight": c.in_flight,
        "deny": c.deny,
        "envoy": c.envoy or None,
        "per_second_median": row.median,
        "vs_grpcio": None if versus is None else {"median": versus[0], "rounds": versus[1]},
        "calls": row.calls,
        "errors": row.errors,
        "first_error": row.first_error,
        "rounds": [
            {
                "per_second": r.rate, "p50_ms": r.p50_ms, "p99_ms": r.p99_ms, "calls": r.calls,
                "errors": r.errors, "cpu_us_per_call": r.cpu_us,
                "envoy_ratelimit_stats": r.envoy_stats or None,
            }
            for r in row.rounds
        ],
    }  # fmt: skip


def write_json(path: Path, meta: dict[str, Any], rows: Sequence[Row]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "rows": [row_json(row, rows) for row in rows],
        "targets": [target.to_json() for target in targets(rows)],
        "envoy": envoy_notes(rows),
    }
    # NaN (a round that never ran its load) is written as null, so any JSON reader takes it.
    path.write_text(json.dumps(_nulls(payload), indent=2) + "\n")


def _nulls(value: Any) -> Any:
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _nulls(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_nulls(v) for v in value]
    return value


def meta(plan: Plan, command: str, connections: int) -> dict[str, Any]:
    return {
        "date": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        "command": command,
        "nproc": os.cpu_count(),
        "python": sys.version.split()[0],
        "versions": _versions(),
        "plan": {
            "seconds": plan.seconds, "warmup": plan.warmup, "rounds": plan.rounds,
            "transports": list(plan.transports), "grpc_connections": connections,
            "load": "h2load",
        },
        "loadavg_start": list(os.getloadavg()),
        "code": _code(),
    }  # fmt: skip


def _code() -> dict[str, Any]:
    """The commit measured, and the files of ``src/`` that differed from it (other work in
    the checkout is measured too)."""
    import subprocess

    def git(*args: str) -> str:
        try:
            done = subprocess.run(["git", *args], capture_output=True, text=True, check=False)
        except OSError:  # no git here: the record says nothing of the code
            return ""
        return done.stdout

    changed = git("status", "--porcelain", "--", "src")
    return {
        "commit": git("rev-parse", "--short", "HEAD").strip() or None,
        "src_changed": [line[3:] for line in changed.splitlines()],
    }


def _versions() -> dict[str, str]:
    import subprocess
    from importlib import metadata

    found = {}
    for name in ("ratewarden", "grpcio", "pygrpc-native", "protobuf", "uvloop", "redis"):
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "not installed"
    try:
        line = subprocess.run(["h2load", "--version"], capture_output=True, text=True, check=False)
        found["h2load"] = line.stdout.strip()
    except OSError:
        found["h2load"] = "not installed"
    return found
