"""`ratewarden simulate --region ... --partition`: links cut between regions for a while."""

from __future__ import annotations

import pytest

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import patterns
from ratewarden.simulate._partitions import parse_partition
from ratewarden.simulate.regions import RegionsRun, format_regions, run_regions

#: Three equal regions: two always hungry, and ``us`` bursting for 10 s every 75 s, so that
#: in some windows it is silent while the others spend, and spends late.
RATES = {name: Rate.parse("100/second", burst=1) for name in ("us", "eu", "ap")}
GLOBAL = Rate.parse("6000/minute")
TRAFFIC = {"us": "onoff:load=6,on=10,off=65", "eu": "steady:load=2", "ap": "steady:load=2"}
NAMES = ("us", "eu", "ap")


def _run(*cuts: str) -> RegionsRun:
    return run_regions(
        RATES,
        GLOBAL,
        {name: patterns.parse(spec) for name, spec in TRAFFIC.items()},
        sync_interval=1.0,
        replication_lag=0.1,
        duration_s=300,
        partitions=[parse_partition(cut, NAMES, 300_000_000) for cut in cuts],
    )


def test_with_every_link_up_no_window_passes_the_bound() -> None:
    """The traffic below with no partition: within the bound (+333), and far within."""
    run = _run()
    assert run.bound == 333
    assert max(run.over(window) for window in run.windows) <= 20
    assert all(row.failed_rounds == 0 for row in run.regions)


def test_a_symmetric_partition_stays_within_the_limit() -> None:
    """``us`` cut off both ways from 60 s to the end: no region completes a round, so in
    each new window every one keeps to its static share, and the shares add up to the
    limit: no cut window goes over at all."""
    run = _run("us@60-300")
    cut = [window for window in run.windows if window.cut]
    assert [window.start_us for window in cut] == [s * 1_000_000 for s in range(60, 300, 60)]
    assert all(run.over(window) == 0 for window in cut)
    failed = {row.region: row.failed_rounds for row in run.regions}
    assert failed["us"] >= 239 and failed["eu"] >= 239 and failed["ap"] >= 239


def test_a_region_that_cannot_read_its_peers_is_held_within_the_bound() -> None:
    """``us`` reads no peer while they still read it (the asymmetric partition): its rounds
    fail and it keeps its static share for every new window, spent late. The others see
    that it completes no round and hold that share for it, instead of splitting it between
    them round after round: no window goes over (before, windows 120 and 180 went ~+1,000
    over, past the bound of +333)."""
    run = _run("us->*@60-300")
    assert max(run.over(window) for window in run.windows) <= 0
    failed = {row.region: row.failed_rounds for row in run.regions}
    assert failed["us"] >= 239 and failed["eu"] == failed["ap"] == 0
    admitted = {row.region: row.admitted for row in run.regions}
    assert admitted["us"] >= 3_000, "us still spends its static share in every cut window"


@pytest.mark.parametrize(
    ("cut", "failing"),
    [("us->*@60-300", {"us"}), ("*->us@60-300", {"eu", "ap"}), ("eu->us@60-300", {"eu"}),
     ("us@60-300", {"us", "eu", "ap"})],
)  # fmt: skip
def test_only_the_readers_of_a_cut_link_fail_their_rounds(cut: str, failing: set[str]) -> None:
    """A round fails in the regions that cannot read a peer, and only there."""
    run = _run(cut)
    assert {row.region for row in run.regions if row.failed_rounds} == failing


def test_a_short_partition_fails_only_its_own_rounds() -> None:
    """Cut from 60 s to 62.5 s: three of ``us``'s rounds fall in it (its rounds are at
    1/3 s past each second), and the windows after it are up."""
    run = _run("us->*@60-62.5")
    assert {row.region: row.failed_rounds for row in run.regions} == {"us": 3, "eu": 0, "ap": 0}
    assert [window.cut for window in run.windows] == [False, True] + [False] * 3


def test_the_command_counts_failed_rounds_and_warns_of_no_simulated_peer(
    capsys: pytest.CaptureFixture[str], caplog: pytest.LogCaptureFixture
) -> None:
    """The flags: a column of failed rounds, the cut windows marked, a closing line naming
    the partition and the windows past the bound; the regions' own warnings about the
    simulated cuts are left out of stderr."""
    argv = ["simulate", "--duration", "240", "--partition", "us->*@60-240"]
    for name in NAMES:
        argv += ["--region", f"{name}=100/s:1", "--pattern", f"{name}={TRAFFIC[name]}"]
    assert main([*argv, "--replication-lag", "0.1"]) == 0
    captured = capsys.readouterr()
    out = captured.out.splitlines()
    assert out[0].split()[-2:] == ["rounds", "failed"]
    assert out[1].split()[0] == "us" and int(out[1].split()[-1]) >= 179
    assert [line.split()[-1] for line in out if line.split()[:1] in (["0s"], ["60s"])] == [
        "up",
        "cut",
    ]
    assert out[-1] == "partitions: us->*@60-240; no window went past the stated bound"
    assert captured.err == ""
    assert not [r for r in caplog.records if r.name == "ratewarden.regions"]


def test_the_text_without_partitions_is_unchanged() -> None:
    """No --partition: no failed-rounds column, no links column, no closing line."""
    text = format_regions(_run())
    assert "rounds failed" not in text and "links" not in text and "partitions" not in text


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("us", "give NAME@START-END, NAME->PEER@START-END"),
        ("us@60", "give NAME@START-END"),
        ("@0-10", "give NAME@START-END"),
        ("us@soon-10", "its start 'soon' is not a number of seconds"),
        ("us@-1-10", "its start is missing or negative"),
        ("us@10-nan", "its end must be a number >= 0"),
        ("us@60-60", "its end must come after its start"),
        ("us@0-700", "it ends after the run's --duration (600 s)"),
        ("xx@0-10", "'xx' is not a region (the regions are us, eu, ap)"),
        ("us->xx@0-10", "'xx' is not a region"),
        ("us->@0-10", "'' is not a region"),
        ("*->*@0-10", "name a region on one side of '->' at least"),
        ("*@0-10", "cut one region off, not '*'"),
    ],
)
def test_bad_partitions_exit_2_naming_the_flag(
    value: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each bad --partition: exit 2, one line naming the flag and the value, no table."""
    argv = ["simulate", "--partition", value]
    for name in NAMES:
        argv += ["--region", f"{name}=100/s:1"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert f"--partition {value!r}" in captured.err and message in captured.err
    assert captured.err.count("\n") == 1 and captured.out == ""
    with pytest.raises(ConfigurationError, match="--partition"):
        parse_partition(value, NAMES, 600_000_000)


def test_a_partition_needs_regions(capsys: pytest.CaptureFixture[str]) -> None:
    """--partition without --region is refused as a flag of the regions mode."""
    assert main(["simulate", "--partition", "us@0-10"]) == 2
    assert "--partition cannot be used without --region" in capsys.readouterr().err
