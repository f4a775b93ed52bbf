"""The table, the target ratios, and the JSON / Markdown copies of one run.

The targets are a report, never an assertion: a MISS changes no exit code.
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from benchmarks._suite import Row

__all__ = ["Target", "cpu_notes", "markdown", "markdown_run", "table", "targets", "write_json"]

_HEADERS = (
    "backend",
    "keys",
    "library [algorithm]",
    "decisions/s",
    "rounds min-max",
    "p50 us",
    "p99 us",
    "CPU us/dec",
    "errors",
    "denied",
    "note",
)
_NUMERIC = frozenset({1, 3, 4, 5, 6, 7, 8, 9})


@dataclass(frozen=True, slots=True)
class Target:
    """``subject / baseline >= goal`` on one key set; ``ratio`` is None when a side is missing."""

    name: str
    keys: int
    subject: str
    baseline: str
    ratio: float | None
    goal: float
    missing: str = ""
    #: ``(median, min, max)`` of the ratios of the two sides' rounds taken side by side
    #: (round i of each ran in the same rotation, moments apart); None without rounds.
    paired: tuple[float, float, float] | None = None

    @property
    def verdict(self) -> str:
        if self.ratio is None:
            return "n/a"
        return "PASS" if self.ratio >= self.goal else "MISS"

    def line(self) -> str:
        keys = "1 key" if self.keys == 1 else f"{self.keys:,} keys"
        head = f"{self.name}, {keys}: {self.subject} / {self.baseline}"
        if self.ratio is None:
            return f"{head} = n/a (target >= {self.goal:g}x) n/a: {self.missing}"
        line = f"{head} = {self.ratio:.2f}x (target >= {self.goal:g}x) {self.verdict}"
        if self.paired is not None:
            middle, low, high = self.paired
            line += f"; round by round {middle:.2f}x (median), {low:.2f}-{high:.2f}x"
        return line

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "keys": self.keys,
            "subject": self.subject,
            "baseline": self.baseline,
            "ratio": self.ratio,
            "goal": self.goal,
            "verdict": self.verdict,
            "missing": self.missing,
            "paired_round_ratios": None
            if self.paired is None
            else dict(zip(("median", "min", "max"), self.paired, strict=True)),
        }


def _backend(row: Row) -> str:
    return f"{row.backend} x{row.in_flight}" if row.in_flight > 1 else row.backend


def _cells(row: Row) -> tuple[str, ...]:
    m = row.measurement
    if m is None:
        return (_backend(row), f"{row.keys:,}", row.label, *("-",) * 7, row.status)
    note = "" if m.first_error is None else f"first error: {m.first_error}"[:80]
    spread = f"{min(m.round_rates):,.0f}-{max(m.round_rates):,.0f}" if m.round_rates else "-"
    return (
        _backend(row),
        f"{row.keys:,}",
        row.label,
        f"{m.per_second:,.0f}",
        spread,
        f"{m.p50_us:.1f}",
        f"{m.p99_us:.1f}",
        f"{m.cpu_us:.1f}",
        f"{m.errors:,}",
        f"{m.denied:,}",
        note,
    )


def table(rows: Sequence[Row]) -> str:
    """The one plain-text table of a run."""
    cells = [_HEADERS, *(_cells(row) for row in rows)]
    widths = [max(len(line[i]) for line in cells) for i in range(len(_HEADERS))]
    right = _NUMERIC - {1}

    def fmt(line: Sequence[str]) -> str:
        parts = [
            cell.rjust(width) if i in right else cell.ljust(width)
            for i, (cell, width) in enumerate(zip(line, widths, strict=True))
        ]
        return "  ".join(parts).rstrip()

    rule = "  ".join("-" * width for width in widths)
    return "\n".join([fmt(_HEADERS), rule, *(fmt(line) for line in cells[1:])])


def markdown(rows: Sequence[Row]) -> str:
    """The same table as Markdown."""
    lines = [
        "| " + " | ".join(_HEADERS) + " |",
        "|" + "|".join("---:" if i in _NUMERIC else "---" for i in range(len(_HEADERS))) + "|",
    ]
    for row in rows:
        lines.append("| " + " | ".join(c.replace("|", "/") for c in _cells(row)) + " |")
    return "\n".join(lines)


def _budget_text(budget: dict[str, Any]) -> str:
    if budget.get("max_calls") is not None:
        return f"{budget['max_calls']} calls timed, no warm-up"
    full = " (at least one pass over the keys)" if budget["warmup_full_pass"] else ""
    return (
        f"{budget['warmup_s']:g} s warm-up{full}, then {budget['duration_s']:g} s timed in "
        f"{budget['rounds']} rounds interleaved with the other cases of its group"
    )


def markdown_run(meta: dict[str, Any], rows: Sequence[Row], found: Sequence[Target]) -> str:
    """A run as Markdown: where and how it ran, the table, the targets."""
    versions = ", ".join(f"{name} {version}" for name, version in meta["versions"].items())
    budget = meta["budget"]
    lines = [
        f"- date: {meta['date']}",
        f"- command: `{meta['command']}`",
        f"- machine: {meta['nproc']} CPUs, {meta['cpu']}; {meta['platform']}",
        f"- python {meta['python']}, redis-server {meta.get('redis_server', 'not used')}, "
        f"memcached {meta.get('memcached_server', 'not used')}, "
        f"hiredis parser: {'yes' if meta['hiredis_parser'] else 'no'}",
        f"- packages: {versions}",
        f"- pinning: {meta['pinning']}",
        f"- each case: {_budget_text(budget)}",
        "- load average (1, 5, 15 min) at start: "
        + ", ".join(f"{x:.2f}" for x in meta["loadavg_start"])
        + "; at end: "
        + ", ".join(f"{x:.2f}" for x in meta.get("loadavg_end", [])),
        "",
        markdown(rows),
        "",
        "Targets (a report, not a test):",
        "",
        *(f"- {target.line()}" for target in found),
        "",
        "Client CPU per decision on Redis (informational):",
        "",
        *(f"- {note}" for note in cpu_notes(rows, sorted({r.keys for r in rows}))),
    ]
    return "\n".join(lines) + "\n"


@dataclass(frozen=True, slots=True)
class _Side:
    """One side of a ratio: what it is called, and which rows may stand for it."""

    name: str
    match: Callable[[Row], bool]
    fastest: bool = False


def _pick(rows: Sequence[Row], keys: int, side: _Side) -> Row | str:
    """The measured row for ``side`` (the fastest, if asked), or why there is none."""
    found = [r for r in rows if r.keys == keys and side.match(r)]
    measured = [r for r in found if r.measurement is not None]
    if not measured:
        return f"{side.name}: {found[0].status}" if found else f"{side.name}: not run"
    return max(measured, key=lambda r: r.per_second or 0.0) if side.fastest else measured[0]


def _ratio(
    name: str, keys: int, goal: float, rows: Sequence[Row], subject: _Side, baseline: _Side
) -> Target:
    top, bottom = _pick(rows, keys, subject), _pick(rows, keys, baseline)
    top_name = top if isinstance(top, str) else _on(top)
    bottom_name = bottom if isinstance(bottom, str) else _on(bottom)
    if baseline.fastest and not isinstance(bottom, str):
        bottom_name = f"{baseline.name} {bottom_name}"
    if isinstance(top, str) or isinstance(bottom, str):
        missing = "; ".join(side for side in (top, bottom) if isinstance(side, str))
        return Target(name, keys, subject.name, baseline.name, None, goal, missing)
    ratio = (top.per_second or 0.0) / (bottom.per_second or 1.0)
    return Target(name, keys, top_name, bottom_name, ratio, goal, paired=_paired(top, bottom))


def _paired(top: Row, bottom: Row) -> tuple[float, float, float] | None:
    """Round-by-round ratios: less moved by load that comes and goes than a ratio of medians."""
    if top.measurement is None or bottom.measurement is None:
        return None
    ratios = [
        a / b
        for a, b in zip(top.measurement.round_rates, bottom.measurement.round_rates, strict=False)
        if b > 0
    ]
    if not ratios:
        return None
    return statistics.median(ratios), min(ratios), max(ratios)


def _on(row: Row) -> str:
    return f"{row.label} on {_backend(row)}"


def _rw(backend: str, algorithm: str = "gcra") -> _Side:
    return _Side(
        f"ratewarden [{algorithm}] on {backend}{' x64' if backend.endswith('-async') else ''}",
        lambda r: (r.library, r.algorithm, r.backend) == ("ratewarden", algorithm, backend),
    )


def _fastest_peer(backend: str) -> _Side:
    return _Side("fastest peer", lambda r: r.role == "peer" and r.backend == backend, fastest=True)


def targets(rows: Sequence[Row], key_sets: Sequence[int]) -> list[Target]:
    """The three ratios of the brief, then the memcached group's three, per key set.

    The memcached lines' goals are reference marks set with the group, not targets of
    the brief: at least the fastest peer (which makes one round trip per decision, as
    ratewarden does), at least ``limits``' own fixed window, and an async figure 3x the
    sync one, as on Redis.
    """
    script_loop = _Side(
        "redis-py script loop", lambda r: r.role == "ceiling" and r.backend == "redis"
    )
    limits_fixed = _Side(
        "limits [fixed-window] on memcached",
        lambda r: (r.library, r.algorithm, r.backend) == ("limits", "fixed-window", "memcached"),
    )
    found = []
    for keys in key_sets:
        found += [
            _ratio("memory", keys, 3.0, rows, _rw("memory"), _fastest_peer("memory")),
            _ratio("redis sync", keys, 1.5, rows, _rw("redis"), script_loop),
            _ratio("redis async", keys, 3.0, rows, _rw("redis-async"), _rw("redis")),
        ]
    for keys in key_sets:
        found += [
            _ratio("memcached sync", keys, 1.0, rows, _rw("memcached"), _fastest_peer("memcached")),
            _ratio(
                "memcached fixed window",
                keys,
                1.0,
                rows,
                _rw("memcached", "fixed_window"),
                limits_fixed,
            ),
            _ratio("memcached async", keys, 3.0, rows, _rw("memcached-async"), _rw("memcached")),
        ]
    return found


def cpu_notes(rows: Sequence[Row], key_sets: Sequence[int]) -> list[str]:
    """Client CPU per decision on Redis: the library's own cost, without the round trip."""
    sides = (
        _rw("redis"),
        _Side("redis-py script loop", lambda r: r.role == "ceiling" and r.backend == "redis"),
        _rw("redis-async"),
    )
    notes = []
    for keys in key_sets:
        parts = []
        for side in sides:
            found = _pick(rows, keys, side)
            if not isinstance(found, str) and found.measurement is not None:
                parts.append(f"{_on(found)} {found.measurement.cpu_us:.1f} us")
        if parts:
            notes.append(f"{keys:,} key{'s' if keys > 1 else ''}: " + ", ".join(parts))
    return notes


def write_json(
    path: Path, meta: dict[str, Any], rows: Sequence[Row], found: Sequence[Target]
) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "meta": meta,
        "rows": [row.to_json() for row in rows],
        "targets": [target.to_json() for target in found],
    }
    path.write_text(json.dumps(payload, indent=2, allow_nan=True) + "\n")
