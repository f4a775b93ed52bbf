"""benchmarks/_http.py still runs: servers start, load is served, every request allowed."""

from __future__ import annotations

import pytest

from benchmarks import _http

pytestmark = pytest.mark.timeout(120)


def test_http_benchmark_runs_without_redis_and_reports_both_variants() -> None:
    """A tiny run (no Redis variants): figures are positive and every answer is 200."""
    rows = _http.run(None, seconds=0.3, rounds=1, warmup=0.1)
    assert [row.variant for row in rows] == ["off", "headers-only", "memory"]
    for row in rows:
        assert row.median > 0 and row.cpu_median > 0
        assert set(row.statuses) == {200}
    assert "| memory |" in _http.table(rows)
    verdicts = _http.verdicts(rows).splitlines()
    assert verdicts[0].startswith("memory: ") and verdicts[0].endswith(("MET", "MISS"))
    assert verdicts[-1].startswith("headers-only")


def test_the_in_process_measure_drives_each_app_and_reports_its_excess() -> None:
    """The in-process table has a row per variant and a positive CPU figure in each round."""
    cpu = _http.in_process(None, requests=200, rounds=2)
    assert list(cpu) == ["off", "headers-only", "memory"]
    assert all(len(values) == 2 and min(values) > 0 for values in cpu.values())
    assert "| memory |" in _http.in_process_table(cpu)
