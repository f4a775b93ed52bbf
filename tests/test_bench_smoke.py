"""The benchmark harness runs end to end on a handful of decisions, in memory only.

Speed is never asserted here (DESIGN.md, section 6); these tests catch a broken
harness: a case that no longer sets up, a loop that miscounts, a report that
no longer renders.
"""

from __future__ import annotations

import asyncio
import json
import statistics
from dataclasses import replace
from pathlib import Path

import pytest

from benchmarks import __main__ as cli
from benchmarks import _report, _suite
from benchmarks._case import Case, Env
from benchmarks._timing import AsyncRunner, Budget, Measurement, Runner

CALLS = 20
TINY = Budget(duration_s=3_600.0, warmup_s=0.0, warmup_full_pass=False, max_calls=CALLS)
TWO_ROUNDS = Budget(
    duration_s=3_600.0, warmup_s=0.0, rounds=2, warmup_full_pass=False, max_calls=CALLS
)


def memory_cases() -> list[Case]:
    return [case for case in _suite.all_cases() if case.backend == "memory"]


def test_every_memory_case_makes_exactly_the_decisions_asked_for() -> None:
    """Each in-memory case times 2 rounds of CALLS, none failing or denied; ratewarden's runs."""
    cases = memory_cases()
    rows = _suite.run(cases, Env(redis_url=None), TWO_ROUNDS, key_sets=(1, 3))
    assert len(rows) == 2 * len(cases)
    assert any(row.library == "ratewarden" and row.algorithm == "gcra" for row in rows)
    for row in rows:
        if row.role == "peer" and row.status.startswith("not available"):
            continue  # a peer missing from this environment is reported, not measured
        assert row.status == "ok", row
        assert row.measurement is not None
        assert row.measurement.calls == 2 * CALLS
        assert len(row.measurement.round_rates) == 2
        assert row.measurement.errors == 0
        assert row.measurement.denied == 0
        assert 0 < row.measurement.p50_us <= row.measurement.p99_us


def test_redis_cases_without_a_server_are_marked_not_available() -> None:
    """With no Redis URL every Redis row says "not available" instead of failing the run."""
    cases = [case for case in _suite.all_cases() if case.backend != "memory"]
    rows = _suite.run(cases, Env(redis_url=None), TINY, key_sets=(1,))
    assert rows
    assert all(row.status.startswith("not available") for row in rows), rows


def test_the_memcached_group_without_a_server_is_marked_not_available(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The memcached group (ratewarden sync and async, limits' two strategies, no other peer)
    runs from the command line with no server: every row says "not available", and its three
    target lines are n/a."""
    args = ["--backend", "memcached", "--backend", "memcached-async", "--max-calls", "5"]
    assert cli.main([*args, "--results", str(tmp_path)]) == 0
    data = json.loads((tmp_path / "latest.json").read_text())
    found = {(r["library"], r["algorithm"], r["backend"]) for r in data["rows"]}
    assert {
        ("ratewarden", "gcra", "memcached"),
        ("ratewarden", "fixed_window", "memcached"),
        ("ratewarden", "gcra", "memcached-async"),
        ("limits", "fixed-window", "memcached"),
        ("limits", "sliding-window-counter", "memcached"),
    } <= found
    assert {backend for _, _, backend in found} == {"memcached", "memcached-async"}
    assert not {"throttled-py", "pyrate-limiter"} & {library for library, _, _ in found}
    for row in data["rows"]:
        assert row["status"].startswith("not available"), row
        if row["library"] == "ratewarden":
            assert row["status"] == "not available: no memcached (run scripts/bench)", row
    lines = [t for t in data["targets"] if t["name"].startswith("memcached")]
    assert sorted({t["name"] for t in lines}) == [
        "memcached async",
        "memcached fixed window",
        "memcached sync",
    ]
    assert all(t["verdict"] == "n/a" for t in lines)
    assert "memcached-async x64" in capsys.readouterr().out


def test_errors_are_counted_and_the_loop_goes_on() -> None:
    """A decide() that raises on every other call yields half errors, still CALLS timed calls."""
    calls = iter(range(10_000))

    def flaky(key: str) -> bool:
        if next(calls) % 2:
            raise ConnectionError("gone")
        return True

    runner = Runner(flaky, ["a", "b"])
    runner.round(TINY)
    found = runner.result()
    assert found.calls == CALLS
    assert found.errors == CALLS // 2
    assert found.first_error == "ConnectionError: gone"


def test_rounds_continue_round_robin_over_the_keys() -> None:
    """A second round starts at the key after the last one the first round used."""
    seen: list[str] = []

    def decide(key: str) -> bool:
        seen.append(key)
        return True

    runner = Runner(decide, [str(i) for i in range(7)])
    runner.round(Budget(duration_s=3_600.0, warmup_s=0.0, rounds=2, max_calls=5))
    runner.round(Budget(duration_s=3_600.0, warmup_s=0.0, rounds=2, max_calls=5))
    assert seen == ["0", "1", "2", "3", "4", "5", "6", "0", "1", "2"]


def test_async_loop_keeps_the_asked_number_in_flight() -> None:
    """The async loop runs CALLS decisions over 8 workers, and at most 8 are ever outstanding."""
    state = {"now": 0, "peak": 0}

    async def decide(key: str) -> bool:
        state["now"] += 1
        state["peak"] = max(state["peak"], state["now"])
        await asyncio.sleep(0)
        state["now"] -= 1
        return key != "denied"

    runner = AsyncRunner(decide, ["a", "denied"], in_flight=8)
    asyncio.run(runner.round(TINY))
    found = runner.result()
    assert found.calls == CALLS
    assert found.denied == CALLS // 2
    assert state["peak"] == 8


def test_command_line_writes_the_table_targets_and_json(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`python -m benchmarks --backend memory --max-calls N` prints a table, writes latest.json."""
    assert cli.main(["--backend", "memory", "--max-calls", "5", "--results", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "ratewarden [gcra]" in out
    assert "memory, 1 key: ratewarden [gcra] on memory" in out
    data = json.loads((tmp_path / "latest.json").read_text())
    assert {row["backend"] for row in data["rows"]} == {"memory"}
    peers_measured = any(r["role"] == "peer" and r["status"] == "ok" for r in data["rows"])
    memory_targets = [t for t in data["targets"] if t["name"] == "memory"]
    assert memory_targets
    assert all((t["ratio"] is not None) == peers_measured for t in memory_targets)
    assert all(t["verdict"] == "n/a" for t in data["targets"] if t["name"] != "memory")
    assert "\n| backend | keys |" in (tmp_path / "latest.md").read_text()


def test_table_shows_every_row_once() -> None:
    """The plain table has a header, a rule, and one line per row."""
    rows = _suite.run(memory_cases()[:2], Env(redis_url=None), TINY, key_sets=(1,))
    lines = _report.table(rows).splitlines()
    assert len(lines) == 2 + len(rows)
    assert lines[0].startswith("backend")


def _row(
    library: str,
    role: str,
    rates: tuple[float, ...],
    backend: str = "memory",
    algorithm: str = "gcra",
) -> _suite.Row:
    measurement = Measurement(
        calls=len(rates),
        errors=0,
        denied=0,
        elapsed_s=1.0,
        per_second=statistics.median(rates),
        round_rates=rates,
        p50_us=1.0,
        p99_us=2.0,
        cpu_us=1.0,
    )
    return _suite.Row(library, algorithm, backend, role, 1, 1, "ok", measurement)


def test_a_target_reports_the_round_by_round_ratios_beside_the_ratio_of_medians() -> None:
    """Rounds taken side by side give their own ratios: median and range, next to the verdict."""
    rows = [
        _row("ratewarden", "subject", (300.0, 100.0, 400.0)),
        _row("limits", "peer", (100.0, 100.0, 100.0)),
    ]
    (memory,) = [t for t in _report.targets(rows, (1,)) if t.name == "memory"]
    assert memory.ratio == 3.0
    assert memory.paired == (3.0, 1.0, 4.0)
    assert memory.line().endswith("PASS; round by round 3.00x (median), 1.00-4.00x")
    assert memory.to_json()["paired_round_ratios"] == {"median": 3.0, "min": 1.0, "max": 4.0}


def test_the_memcached_lines_compare_within_the_memcached_group() -> None:
    """memcached sync divides by the fastest peer on memcached (not a faster one in memory),
    the fixed window line by limits' fixed window there, async by ratewarden's sync figure."""
    rows = [
        _row("limits", "peer", (900.0,), algorithm="fixed-window"),
        _row("ratewarden", "subject", (200.0,), "memcached"),
        _row("ratewarden", "subject", (150.0,), "memcached", "fixed_window"),
        _row("limits", "peer", (100.0,), "memcached", "fixed-window"),
        _row("limits", "peer", (50.0,), "memcached", "sliding-window-counter"),
        replace(_row("ratewarden", "subject", (600.0,), "memcached-async"), in_flight=64),
    ]
    found = {t.name: t for t in _report.targets(rows, (1,))}
    assert found["memcached sync"].ratio == 2.0
    assert "fastest peer limits [fixed-window] on memcached" in found["memcached sync"].line()
    assert found["memcached fixed window"].ratio == 1.5
    assert found["memcached async"].ratio == 3.0
    line = found["memcached async"].line()
    assert line.startswith(
        "memcached async, 1 key: ratewarden [gcra] on memcached-async x64 / "
        "ratewarden [gcra] on memcached = 3.00x"
    )


def test_micro_prints_every_memory_figure(capsys: pytest.CaptureFixture[str]) -> None:
    """`python -m benchmarks.micro` without Redis prints each in-memory figure, each measured."""
    from benchmarks import micro

    assert micro.main([]) == 0
    lines = dict(line.split(" ", 1) for line in capsys.readouterr().out.splitlines())
    for name in ("memory_1key_us", "memory_10k_us", "memory_10k_live_us", "memory_10k_evicting_us"):
        assert float(lines[name].replace(",", "")) > 0, name
