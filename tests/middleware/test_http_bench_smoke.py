"""benchmarks/_http.py still runs: servers start, load is served, every request allowed."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from benchmarks import _http

pytestmark = pytest.mark.timeout(120)


def test_http_benchmark_runs_without_redis_and_reports_both_variants() -> None:
    """A tiny run (no Redis variants): figures are positive and every answer is 200."""
    rows = _http.run(None, seconds=0.3, rounds=2, warmup=0.1, processes=2)
    assert [row.variant for row in rows] == ["off", "headers-only", "memory"]
    for row in rows:
        assert row.median > 0 and row.cpu_median > 0
        assert (
            len(row.rates) == 2
            and len(row.processes) == 2
            and len(row.each) == len(row.cpu_each) == 4
        )
        assert set(row.statuses) == {200}
    assert "| memory |" in _http.table(rows)
    verdicts = _http.verdicts(rows).splitlines()
    assert verdicts[0].startswith("memory: ") and ("MET;" in verdicts[0] or "MISS;" in verdicts[0])
    assert verdicts[-1].startswith("headers-only")


def test_the_in_process_measure_drives_each_app_and_reports_its_excess() -> None:
    """The in-process table has a row per variant and a positive CPU figure in each round."""
    cpu = _http.in_process(None, requests=200, rounds=2)
    assert list(cpu) == ["off", "headers-only", "memory"]
    assert all(len(values) == 2 and min(values) > 0 for values in cpu.values())
    assert "| memory |" in _http.in_process_table(cpu)


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_a_pinned_load_generator_runs_on_the_cpus_it_is_given() -> None:
    """``_round(..., cpus)`` starts the load generator with ``--cpus``; it loads the server.

    Without ``--spin``: its idle priority is for a CPU of the generator's own, and the one
    here is shared with this process and the server (and any other load on the machine),
    where a busy task leaves an idle-priority generator no time to send a request.
    """
    cpu = min(os.sched_getaffinity(0))
    port = _http._free_port()
    server = subprocess.Popen([sys.executable, "-m", "benchmarks._http", "serve", "off", str(port)])
    try:
        _http._wait_listening(port, server)
        result = _http._round(port, 0.2, {cpu}, spin=False)
    finally:
        server.terminate()
        server.wait(10)
    assert result["requests"] > 0 and set(result["statuses"]) == {"200"}
