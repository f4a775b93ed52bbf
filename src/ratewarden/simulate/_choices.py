"""The runs a command line asks for: each pattern and rate once, how long each run lasts,
and the file each figure goes to (never one file for two figures)."""

from __future__ import annotations

import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from ratewarden.errors import ConfigurationError
from ratewarden.simulate._pattern import SECOND_US, Pattern
from ratewarden.simulate._replay import Replay
from ratewarden.simulate.runner import MAX_DURATION_S, check_duration

__all__ = ["DEFAULT_DURATION_S", "figure_paths", "note", "once", "planned_runs", "run_length"]

#: How long a run lasts without --duration (a replay lasts its log's span).
DEFAULT_DURATION_S = 600.0

_T = TypeVar("_T")
_L = TypeVar("_L")


def note(text: str) -> None:
    """A line on stderr beside the table: something the table alone does not say."""
    print(f"ratewarden simulate: note: {text}", file=sys.stderr)


def once(
    flag: str, texts: Sequence[str], items: Sequence[_T], label: Callable[[_T], str]
) -> list[_T]:
    """``items`` (made from ``texts``, given as ``flag``) without those whose label, the name
    their rows and figures get, another one already has: the same traffic or rate runs once,
    with a note naming both."""
    seen: dict[str, str] = {}
    kept = []
    for text, item in zip(texts, items, strict=True):
        name = label(item)
        if name in seen:
            note(f"{flag} {text!r} is the same as {flag} {seen[name]!r} ({name}); it runs once")
            continue
        seen[name] = text
        kept.append(item)
    return kept


def run_length(patterns: Sequence[Pattern], given: float | None) -> float:
    """The seconds a run of ``patterns`` (one, or a region's each) lasts.

    ``given`` (--duration) when there is one; else a replay log's span, rounded up to the
    whole second after its last request (the longest, with several), or 600 s. A log
    longer than the run is noted with the requests it leaves out.
    """
    replays = [(p, p.requests()) for p in patterns if isinstance(p, Replay)]
    if given is None:
        if not replays:
            return DEFAULT_DURATION_S
        pattern, requests = max(replays, key=lambda pair: pair[1][-1][0])
        seconds = requests[-1][0] // SECOND_US + 1
        if seconds > MAX_DURATION_S:
            raise ConfigurationError(
                f"pattern replay: {pattern.file} spans {requests[-1][0] / SECOND_US:,.0f} s, more "
                f"than the {MAX_DURATION_S:,} s (30 days) a run may last; give --duration to "
                "replay its first part"
            )
        return float(seconds)
    duration_us = check_duration(given)
    for pattern, requests in replays:
        kept = sum(1 for offset, _ in requests if offset < duration_us)
        if kept < len(requests):
            span = requests[-1][0] / SECOND_US
            note(
                f"{pattern.file} spans {_seconds(span)} s; --duration {given:g} replays its "
                f"first {kept:,} of {len(requests):,} requests (leave --duration out to replay "
                "it whole)"
            )
    return given


def _seconds(value: float) -> str:
    return f"{value:,.0f}" if value >= 10 else f"{value:g}"


def _slug(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9.]+", "-", text).strip("-")


def _path(base: str, parts: Sequence[str | None]) -> Path:
    """``base`` itself, or with the pattern and/or rate(s) that tell several figures apart."""
    path = Path(base)
    slugs = [_slug(text) for text in parts if text]
    if not slugs:
        return path
    return path.with_name(f"{path.stem}-{'-'.join(slugs)}{path.suffix}")


def figure_paths(
    bases: Sequence[str] | None, figures: Sequence[tuple[str | None, str | None]]
) -> list[list[Path]]:
    """Per figure (its pattern and rate labels, None where one of a kind needs none), the file
    each ``--plot`` base gives it. Two figures sharing a file is refused before any run."""
    taken: dict[Path, str] = {}
    paths = []
    for parts in figures:
        mine = []
        for base in bases or ():
            path = _path(base, parts)
            what = " ".join(part for part in parts if part) or "the figure"
            if path.resolve() in taken:
                raise ConfigurationError(
                    f"--plot {base!r}: {taken[path.resolve()]} and {what} would both be written "
                    f"to {str(path)!r}; give each --plot once, or patterns and rates that differ"
                    if taken[path.resolve()] != what
                    else f"--plot {base!r}: {str(path)!r} would be written twice; give it once"
                )
            taken[path.resolve()] = what
            mine.append(path)
        paths.append(mine)
    return paths


def planned_runs(
    chosen: Sequence[Pattern],
    limits: Sequence[_L],
    name: Callable[[_L], str],
    duration: float | None,
    plot: Sequence[str] | None,
) -> list[tuple[Pattern, float, _L, list[Path]]]:
    """Every pattern with every limit (a rate, or a layered limit named by ``name``): the
    pattern, how long its run lasts (``run_length``: a replay lasts its log), the limit, and
    the files its figures go to (``figure_paths``; each named by the pattern and the limit
    when there are several of them)."""
    lengths = [run_length([pattern], duration) for pattern in chosen]
    combos = [(p, n, limit) for p, n in zip(chosen, lengths, strict=True) for limit in limits]
    files = figure_paths(plot, [
        (p.describe() if len(chosen) > 1 else None, name(limit) if len(limits) > 1 else None)
        for p, _, limit in combos
    ])  # fmt: skip
    return [(*combo, paths) for combo, paths in zip(combos, files, strict=True)]
