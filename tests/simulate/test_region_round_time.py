"""`ratewarden simulate --region ... --round-time`: rounds slower than the replication lag."""

from __future__ import annotations

import pytest

from ratewarden.cli import main
from ratewarden.rate import Rate
from ratewarden.simulate import patterns
from ratewarden.simulate.regions import RegionsRun, format_regions, run_regions

RATES = {name: Rate.parse("100/second", burst=1) for name in ("us", "eu", "ap")}
GLOBAL = Rate.parse("6000/minute")
TRAFFIC = {"us": "onoff:load=6,on=10,off=65", "eu": "steady:load=2", "ap": "steady:load=2"}


def _run(round_time: float | None) -> RegionsRun:
    return run_regions(
        RATES,
        GLOBAL,
        {name: patterns.parse(spec) for name, spec in TRAFFIC.items()},
        sync_interval=1.0,
        replication_lag=0.1,
        duration_s=240,
        round_time=round_time,
    )


def test_rounds_slower_than_the_lag_are_stale_and_keep_the_static_shares() -> None:
    """A round of 0.3 s against a lag of 0.1 s: every round is stale, so no cap moves from
    its static share (2,000 of 6,000 each): eu and ap, always hungry, take exactly that in
    every window, where with rounds in time they take what us leaves."""
    run = _run(0.3)
    assert {row.region: row.stale_rounds for row in run.regions} == {
        "us": 240,
        "eu": 240,
        "ap": 239,  # its first round starts at 1 s: its last one's apply falls past the end
    }
    assert all(row.failed_rounds == 0 for row in run.regions)
    eu, ap = 1, 2
    assert {(window.admitted[eu], window.admitted[ap]) for window in run.windows} == {(2000, 2000)}
    in_time = _run(None)
    assert all(row.stale_rounds == 0 for row in in_time.regions)
    assert max(window.admitted[eu] for window in in_time.windows) > 2900


def test_a_round_within_the_lag_is_the_default_run() -> None:
    """--round-time equal to the lag is the run without it, window for window."""
    assert _run(0.1).windows == _run(None).windows


def test_the_command_shows_stale_rounds_and_what_to_do(capsys: pytest.CaptureFixture[str]) -> None:
    """A column of stale rounds per region and a closing line naming the fix; neither when
    every round is in time."""
    argv = ["simulate", "--duration", "120", "--replication-lag", "0.1"]
    for name, spec in TRAFFIC.items():
        argv += ["--region", f"{name}=100/s:1", "--pattern", f"{name}={spec}"]
    assert main([*argv, "--round-time", "0.3"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[-2:] == ["rounds", "stale"]
    assert out[1].split()[0] == "us" and out[1].split()[-1] == "120"
    assert out[-1] == (
        "rounds: each takes 0.3s, more than the replication lag of 0.1s: a stale round merges "
        "counts but leaves the cap, so budgets stay at their static shares (give "
        "--replication-lag at least the round time)"
    )
    assert main([*argv, "--round-time", "0.05"]) == 0
    text = capsys.readouterr().out
    assert "stale" not in text
    assert "stale" not in format_regions(_run(None))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--round-time", "-1"], "--round-time"),
        (["--round-time", "soon"], "--round-time"),
        (["--round-time", "nan"], "--round-time"),
    ],
)
def test_bad_round_times_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad value: exit 2 with the usage and one line naming the flag, and no table."""
    regions = ["--region", "us=100/s:1", "--region", "eu=100/s:1"]
    with pytest.raises(SystemExit) as exited:
        main(["simulate", *regions, *argv])
    assert exited.value.code == 2
    captured = capsys.readouterr()
    last = captured.err.splitlines()[-1]
    assert last.startswith("ratewarden simulate: error:") and message in last
    assert captured.out == ""


def test_a_round_time_needs_regions(capsys: pytest.CaptureFixture[str]) -> None:
    """--round-time without --region is refused as a flag of the regions mode."""
    assert main(["simulate", "--round-time", "0.3"]) == 2
    assert "--round-time cannot be used without --region" in capsys.readouterr().err
