"""``python -m benchmarks --rlqs``: through one Envoy, no filter, the RLS filter and the quota
filter (RLQS) over ``ratewarden serve``, side by side (issue 18, "Benchmark").

One Envoy (``--concurrency 1``) in front of the trivial upstream has a listener per
variant (``_rlqs_stack.VARIANTS``): ``off`` (no filter), ``filter`` (one trivial filter,
header_mutation appending a request header: what any extra filter costs), ``rls`` (Envoy's
rate limit filter: one ``ShouldRateLimit`` call per request, one descriptor, to a ``ratewarden
serve`` on its default transport), ``rlqs`` (the ``rate_limit_quota`` filter, its
assignments from ``ratewarden serve --rlqs``; a limit far out of reach, so nothing is
denied), ``rlqs-fixed`` (the same with a fixed bucket id and no matcher predicate: no
header read, no regex a request), ``rlqs-allow`` (that fixed bucket on an ``unlimited`` rule:
a blanket ALLOW_ALL assignment, no token bucket, the quota filter's floor) and
``rlqs-bound`` (the quota filter on a rule of
``BOUND_RATE`` a second that the load exceeds: what Envoy admits, set against
docs/rlqs.md's bound).

A round of a variant is a warm-up run of h2load (HTTP/1.1, ``IN_FLIGHT`` connections,
a request in flight on each), a check (a request through the listener answered as
expected; for the RLS, Envoy's ``ratelimit.ok`` up by one; for the quota listeners, the
bucket's assignment in ``/rlqs.json``), the timed run, the check again. Rounds of the
variants rotate, so load from elsewhere falls on all of them. Around each timed run the
CPU time of both ``ratewarden serve`` processes, Envoy and the upstream is read from
``/proc/<pid>/task/*/schedstat`` (nanoseconds, every thread; ``/proc/<pid>/stat`` counts
10 ms ticks, too coarse for what the quota service spends in a round), and divided by
the requests answered: CPU milliseconds per thousand requests. A round lasts
``seconds`` (6 by default), more than Envoy 1.40's 5 s between reports, so each quota
round holds at least one report.
"""

from __future__ import annotations

import collections
import datetime as dt
import math
import os
import shutil
import sys
import tempfile
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks import _h2load, _rlqs_report
from benchmarks._rlqs_stack import (
    ALLOW_DOMAIN,
    BOUND_DOMAIN,
    BOUND_RATE,
    FIXED_DOMAIN,
    HEADERS,
    HOST,
    RLQS_DOMAIN,
    RULES,
    VARIANTS,
    Proxy,
    Service,
    envoy,
    serve,
)

#: Requests in flight through Envoy (HTTP/1.1 connections), as the serve benchmark's Envoy rows.
IN_FLIGHT = 16


@dataclass(frozen=True, slots=True)
class Plan:
    """How long each timed run and warm-up lasts, and how many rounds of every variant."""

    seconds: float = 6.0
    warmup: float = 1.0
    rounds: int = 5
    in_flight: int = IN_FLIGHT


@dataclass(frozen=True, slots=True)
class Round:
    """One timed run of a variant: what h2load saw and what each process spent."""

    seconds: float
    admitted: int  # answered 200
    denied: int  # answered 429 (by Envoy, from its token bucket)
    #: Requests answered otherwise or failed, and RLS calls that failed (the request let through).
    errors: int
    p50_ms: float
    p99_ms: float
    #: CPU seconds over the run: serve_rls, serve_rlqs, envoy, upstream, h2load.
    cpu_s: dict[str, float]
    #: The RLS filter's counters over the run (the rls variant).
    rls_stats: dict[str, int] = field(default_factory=dict)

    @property
    def answered(self) -> int:
        return self.admitted + self.denied

    @property
    def rate(self) -> float:
        """Requests answered (admitted or denied) per second."""
        return self.answered / self.seconds

    def per_thousand_ms(self, process: str) -> float:
        """CPU milliseconds of ``process`` per thousand requests answered."""
        return self.cpu_s[process] * 1e6 / self.answered if self.answered else math.nan


@dataclass(slots=True)
class Row:
    """A variant's rounds."""

    variant: str
    rounds: list[Round] = field(default_factory=list)
    first_error: str | None = None


def cpu_s(pid: int) -> float:
    """CPU seconds every live thread of ``pid`` ran (``/proc/<pid>/task/*/schedstat``)."""
    total = 0
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            total += int((task / "schedstat").read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue  # a thread that ended meanwhile
    return total / 1e9


def statuses(log: Path) -> tuple[collections.Counter[str], list[int]]:
    """An h2load log's statuses, and the 200s' microseconds."""
    counts: collections.Counter[str] = collections.Counter()
    latencies = []
    for line in log.read_text().splitlines():
        _, status, elapsed = line.split("\t")
        counts[status] += 1
        if status == "200":
            latencies.append(int(elapsed))
    return counts, latencies


@dataclass
class _Running:
    rls: Service
    rlqs: Service
    proxy: Proxy
    workdir: Path

    def groups(self) -> dict[str, int]:
        return {
            "serve_rls": self.rls.pid,
            "serve_rlqs": self.rlqs.pid,
            "envoy": self.proxy.pid,
            "upstream": self.proxy.upstream_pid,
        }


def assignment(state: dict[str, Any], domain: str) -> dict[str, Any] | str | None:
    """What ``/rlqs.json`` shows held for ``{api_key: k1}`` in ``domain``: a token bucket
    (a dict), ``"allow_all"`` or ``"deny_all"``; None when nothing is held."""
    for held in state["assignments"]:
        if held["domain"] == domain and held["bucket"] == {"api_key": "k1"}:
            found: dict[str, Any] | str = held["assignment"]
            return found
    return None


def token_bucket(state: dict[str, Any], domain: str) -> dict[str, Any] | None:
    """The token bucket ``/rlqs.json`` shows held for ``{api_key: k1}`` in ``domain``."""
    found = assignment(state, domain)
    return found if isinstance(found, dict) else None


def check(variant: str, running: _Running) -> None:
    """One request through ``variant``, answered as expected; ``RuntimeError`` otherwise."""
    proxy = running.proxy
    before = proxy.ratelimit_stats().get("ok", 0) if variant == "rls" else 0
    status = proxy.get(variant)
    if status not in ((200, 429) if variant == "rlqs-bound" else (200,)):
        raise RuntimeError(f"envoy {variant}: HTTP {status}")
    if variant == "rls" and proxy.ratelimit_stats().get("ok", 0) != before + 1:
        raise RuntimeError(f"envoy rls: the filter's call was not OK: {proxy.ratelimit_stats()}")
    if variant.startswith("rlqs"):
        domains = {"rlqs-bound": BOUND_DOMAIN, "rlqs-fixed": FIXED_DOMAIN}
        if variant == "rlqs-allow":
            found = assignment(running.rlqs.rlqs(), ALLOW_DOMAIN)
            if found != "allow_all":
                raise RuntimeError(f"envoy {variant}: expected allow_all held, got {found!r}")
            return
        domain = domains.get(variant, RLQS_DOMAIN)
        held = token_bucket(running.rlqs.rlqs(), domain)
        if held is None:
            raise RuntimeError(f"envoy {variant}: no token bucket held for the bucket in {domain}")
        if variant == "rlqs-bound" and held["tokens_per_fill"] != BOUND_RATE:
            raise RuntimeError(f"envoy {variant}: one Envoy should hold all {BOUND_RATE}: {held}")


def _round(row: Row, running: _Running, plan: Plan) -> None:
    variant = row.variant
    url = f"http://{HOST}:{running.proxy.listeners[variant]}/"
    load = _h2load.Load(url, plan.in_flight, 1, headers=HEADERS)
    output, log = running.workdir / "h2load.out", running.workdir / "h2load.log"
    if plan.warmup > 0:
        _h2load.finish(_h2load.start(load, plan.warmup, None, output), plan.warmup, None, output)
    try:
        check(variant, running)
    except RuntimeError as exc:
        row.first_error = row.first_error or f"before a round: {exc}"[:300]
        return
    groups = running.groups()
    before_stats = running.proxy.ratelimit_stats() if variant == "rls" else {}
    before = {name: cpu_s(pid) for name, pid in groups.items()}
    run = _h2load.finish(_h2load.start(load, plan.seconds, log, output), plan.seconds, log, output)
    spent = {name: cpu_s(pid) - before[name] for name, pid in groups.items()}
    spent["h2load"] = run.cpu_s
    stats = {}
    if variant == "rls":
        after = running.proxy.ratelimit_stats()
        stats = {name: value - before_stats.get(name, 0) for name, value in after.items()}
    counts, latencies = statuses(log)
    admitted, denied = counts["200"], counts["429"]
    errors = max(run.failed - denied, sum(counts.values()) - admitted - denied)
    # A call that failed or timed out (Envoy's 20 ms) is let through (failure_mode_deny off)
    # and counted in "error" (and again in "failure_mode_allowed").
    errors += stats.get("error", 0)
    try:
        check(variant, running)
    except RuntimeError as exc:
        row.first_error = row.first_error or f"after a round: {exc}"[:300]
        return
    timed = _h2load.Run(plan.seconds, latencies, 0, 0, 0.0, "")
    row.rounds.append(
        Round(plan.seconds, admitted, denied, errors, timed.percentile_ms(0.5),
              timed.percentile_ms(0.99), spent, stats)
    )  # fmt: skip


def run(plan: Plan, progress: Callable[[int, Row], None] | None = None) -> list[Row]:
    """Start both services and Envoy, rotate the variants' rounds, stop everything."""
    _h2load.binary()
    rows = [Row(variant) for variant in VARIANTS]
    with ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="rw-bench-rlqs-"))
        stack.callback(shutil.rmtree, workdir, True)
        (workdir / "rules").mkdir()
        for name, text in RULES.items():
            (workdir / "rules" / name).write_text(text)
        rls = serve(stack, workdir, "rls", "--dashboard", "off")
        rlqs = serve(stack, workdir, "rlqs", "--rlqs", "--transport", "grpcio")
        proxy = envoy(stack, workdir, rls, rlqs)
        running = _Running(rls, rlqs, proxy, workdir)
        for variant in VARIANTS:  # the quota buckets' first reports: assignments before round 1
            proxy.get(variant)
        for r in range(plan.rounds):
            for i in range(len(rows)):
                row = rows[(r + i) % len(rows)]
                _round(row, running, plan)
                if progress is not None and row.rounds:
                    progress(r, row)
    return rows


def _progress(r: int, row: Row) -> None:
    last = row.rounds[-1]
    print(
        f"  round {r + 1}: {row.variant:<11} {last.rate:>8,.0f} req/s  admitted "
        f"{last.admitted:>7,}  denied {last.denied:>7,}  p99 {last.p99_ms:6.2f} ms"
        f"{f'  errors {last.errors:,}' if last.errors else ''}",
        file=sys.stderr,
        flush=True,
    )


def main(quick: bool, results: Path, command: str) -> int:
    """Run the RLQS benchmark; print the table and the targets; write JSON and markdown."""
    try:
        _h2load.binary()
    except RuntimeError as exc:
        print(f"python -m benchmarks --rlqs: {exc}", file=sys.stderr)
        return 1
    plan = Plan(seconds=1.0, warmup=0.3, rounds=1) if quick else Plan()
    info = _rlqs_report.meta(plan, command)
    print(
        f"rlqs benchmark: {len(VARIANTS)} Envoy listeners, {plan.rounds} rounds of "
        f"{plan.seconds:g} s after {plan.warmup:g} s of warm-up, {plan.in_flight} requests in "
        f"flight; {os.cpu_count()} CPUs shared by all; loadavg {info['loadavg_start']}",
        file=sys.stderr,
        flush=True,
    )
    rows = run(plan, _progress)
    info["loadavg_end"] = list(os.getloadavg())
    print()
    print(_rlqs_report.table(rows))
    print("\nIssue 18's targets (a report, not a test):")
    for line in _rlqs_report.targets(rows):
        print(f"  {line}")
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    results.mkdir(parents=True, exist_ok=True)
    for name in (f"rlqs-{stamp}.json", "rlqs-latest.json"):
        _rlqs_report.write_json(results / name, info, rows)
    (results / "rlqs-latest.md").write_text(_rlqs_report.markdown(rows) + "\n")
    print(f"\nwrote {results / f'rlqs-{stamp}.json'}, rlqs-latest.json and rlqs-latest.md")
    return 0
