"""`ratewarden simulate --region`: reconciled budgets across regions in simulated time."""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions import overshoot_bound
from ratewarden.simulate import patterns
from ratewarden.simulate.regions import RegionsRun, format_regions, run_regions

RATES = {
    "us": Rate.parse("100/second", burst=1),
    "eu": Rate.parse("50/second", burst=1),
    "ap": Rate.parse("20/second", burst=1),
}
GLOBAL = Rate.parse("6000/minute")


def _run(specs: dict[str, str], *, sync: float, lag: float = 0.0, seconds: float = 300,
         rates: dict[str, Rate] = RATES) -> RegionsRun:  # fmt: skip
    chosen = {name: patterns.parse(spec) for name, spec in specs.items()}
    return run_regions(rates, GLOBAL, chosen, sync_interval=sync, replication_lag=lag,
                       duration_s=seconds)  # fmt: skip


def test_every_window_stays_within_the_stated_bound() -> None:
    """Every region offering the whole limit (Poisson, its own seed), a round a second and
    0.1 s of lag: no window goes over by more than the bound, the windows hold every
    admission, and the bound is the budgets' own."""
    run = _run({"us": "poisson:load=1,seed=1", "eu": "poisson:load=1,seed=2",
                "ap": "poisson:load=1,seed=3"}, sync=1.0, lag=0.1, seconds=600)  # fmt: skip
    assert run.bound == overshoot_bound(RATES, 1.0, 0.1) == 190
    assert len(run.windows) == 10
    assert all(run.over(window) <= run.bound for window in run.windows)
    assert sum(w.total for w in run.windows) == sum(r.admitted for r in run.regions)
    for index, row in enumerate(run.regions):
        assert row.admitted == sum(w.admitted[index] for w in run.windows)
        assert row.offered == row.admitted + row.denied
    # the regions together use most of the limit: the budgets give it out, not just hold it
    assert all(window.total > 0.95 * GLOBAL.limit for window in run.windows)


def test_rounds_hand_a_busy_region_what_the_quiet_ones_leave() -> None:
    """One busy region, two nearly idle: with a round a second it takes nearly all of the
    limit; with no round in the run it keeps its static share (200/270 of 6,000), and no
    window goes over."""
    rates = {**RATES, "us": Rate.parse("200/second", burst=1)}
    traffic = {"us": "steady:load=1.5", "eu": "steady:load=0.01", "ap": "steady:load=0.01"}
    synced = _run(traffic, sync=1.0, lag=0.5, rates=rates)
    static = _run(traffic, sync=1_000.0, rates=rates)
    assert synced.rounds == 299 and static.rounds == 0
    share = 6_000 * 200 // 270
    for window in static.windows:
        assert window.admitted[0] == share
        assert static.over(window) == 0
    for window in synced.windows[1:]:  # the first window starts at the static share
        assert window.admitted[0] > 5_700
        assert synced.over(window) <= synced.bound


def test_the_same_flags_give_the_same_run() -> None:
    """Seeded traffic and simulated time: two runs are equal, window by window."""
    specs = {"us": "poisson:load=2", "eu": "onoff:load=3,on=5,off=10", "ap": "steady"}
    assert _run(specs, sync=0.5, lag=0.2) == _run(specs, sync=0.5, lag=0.2)


def test_traffic_must_name_every_region() -> None:
    """A region with no pattern, or a pattern for an unknown region, is refused."""
    with pytest.raises(ConfigurationError, match="give every region a pattern"):
        _run({"us": "steady", "eu": "steady"}, sync=1.0)


def test_the_command_prints_regions_windows_and_the_verdict(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three regions from the flags: a row per region, a row per window, the verdict line
    with the stated bound, and the figure written."""
    figure = tmp_path / "regions.png"
    code = main(["simulate", "--region", "us=100/s:1", "--region", "eu=50/s:1", "--region",
                 "ap=20/s:1", "--replication-lag", "0.1", "--duration", "180",
                 "--pattern", "us=onoff:load=4,on=10,off=20", "--pattern", "poisson:load=1",
                 "--plot", str(figure)])  # fmt: skip
    captured = capsys.readouterr()
    assert code == 0, captured.err
    out = captured.out.splitlines()
    assert [line.split()[0] for line in out[1:4]] == ["us", "eu", "ap"]
    assert out[1].split()[1:3] == ["onoff", "x4"]
    assert "windows of 6000/minute (limit 6000):" in captured.out
    assert sum(1 for line in out if line.split()[:1] in (["0s"], ["60s"], ["120s"])) == 3
    assert "the stated bound is +190 a window (sync every 1s, replication lag 0.1s" in out[-2]
    assert out[-1].startswith("strategy reconciled: ")
    assert out[-1].endswith("% of the limit over 3 windows")
    assert figure.stat().st_size > 1_000
    assert f"wrote {figure}" in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--region", "us=1/s"], "give two or more --region NAME=RATE"),
        (["--region", "us=1/s", "--region", "us=2/s"], "each --region NAME may be given once"),
        (["--region", "us", "--region", "eu=1/s"], "--region 'us' must be NAME=RATE"),
        (["--region", "us=ten/s", "--region", "eu=1/s"], "--region 'us=ten/s': "),
        (["--region", "u:s=1/s", "--region", "eu=1/s"], "region name 'u:s'"),
        (
            ["--region", "us=1/s", "--region", "eu=1/s", "--rate", "1/s", "--rate", "2/s"],
            "--region takes one global --rate",
        ),
        (
            [
                "--region",
                "us=1/s",
                "--region",
                "eu=1/s",
                "--pattern",
                "steady",
                "--pattern",
                "onoff",
            ],
            "give one pattern for every region, or NAME=SPEC",
        ),
        (
            ["--region", "us=1/s", "--region", "eu=1/s", "--pattern", "us=steady"],
            "region 'eu' has no --pattern",
        ),
        (["--region", "us=1/s", "--region", "eu=1/s", "--pattern", "us=nope"], "nope"),
        (
            ["--region", "us=1/s", "--region", "eu=1/s", "--algorithm", "gcra"],
            "--algorithm cannot be used with --region",
        ),
        (["--sync-interval", "1"], "--sync-interval cannot be used without --region"),
        (["--region", "us=1/s", "--region", "eu=1/s", "--sync-interval", "0.0000001"], "rounds in"),
        (["--region", "us=1/s", "--region", "eu=1/s", "--plot", "x.gif"], "must end in"),
    ],
)
def test_bad_flags_exit_2_naming_them(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad flag: exit 2, one line that names it, no table."""
    assert main(["simulate", *argv]) == 2
    captured = capsys.readouterr()
    assert message in captured.err
    assert captured.err.count("\n") == 1
    assert captured.out == ""


@pytest.mark.parametrize("flag", ["--sync-interval", "--replication-lag"])
def test_bad_seconds_are_refused_by_the_parser(
    flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A negative or non-numeric number of seconds: argparse's exit 2, naming the flag."""
    for value in ("-1", "soon"):
        with pytest.raises(SystemExit) as exit_info:
            main(["simulate", "--region", "us=1/s", "--region", "eu=1/s", flag, value])
        assert exit_info.value.code == 2
        assert f"{flag} {value!r}" in capsys.readouterr().err


def test_a_long_run_lists_its_windows_furthest_over() -> None:
    """Sixty one-second windows: the table lists the 12 furthest over the limit, in time
    order, and says so; the verdict names the worst of all sixty."""
    run = run_regions(
        {"us": Rate.parse("100/s", burst=1), "eu": Rate.parse("100/s", burst=1)},
        Rate.parse("100/second"),
        {"us": patterns.parse("steady:load=2"), "eu": patterns.parse("steady:load=2")},
        sync_interval=0.25,
        replication_lag=0.2,
        duration_s=60,
    )
    text = format_regions(run)
    assert "windows of 100/second (limit 100), the 12 furthest over the limit of 60:" in text
    listed = [line.split() for line in text.splitlines() if line[:1].isdigit()]
    assert len(listed) == 12
    starts = [float(row[0].rstrip("s")) for row in listed]
    assert starts == sorted(starts)
    overs = sorted((run.over(window) for window in run.windows), reverse=True)
    assert sorted((int(row[-1]) for row in listed), reverse=True) == overs[:12]
    worst = run.worst
    assert worst is not None and f"worst window +{run.over(worst)} over the limit" in text
