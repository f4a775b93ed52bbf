"""`ratewarden simulate --region`: a run too large is refused before it makes anything.

Each region's pattern used to be checked alone against the 5,000,000-arrival limit, then
every region's arrivals went into one queue, and the decision limit was checked only while
deciding: three regions at 100,000/s for 60 s ran past 60 s at 2.9 GB with nothing
printed. And every round of every region reads each peer's count of every region, so the
rounds' work grows with regions x peers x regions: 100 regions took 31 s for 30 simulated
seconds, 200 never finished. Now the arrivals of every region are added up, and the
rounds counted, before a store or an arrival is made; a run past a limit exits 2 with one
line naming it. The timeouts hold each refusal to seconds (the runs they refuse took
minutes before).
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import patterns
from ratewarden.simulate._pattern import Arrival, Horizon, Pattern
from ratewarden.simulate._region_limits import (
    MAX_COUNTS_READ,
    MAX_REGION_ROUNDS,
    MAX_REGIONS,
    check_run,
)
from ratewarden.simulate.regions import run_regions

GLOBAL = Rate.parse("6000/minute")


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    """The one line ``simulate`` exits 2 with (nothing on stdout)."""
    code = main(["simulate", *argv])
    captured = capsys.readouterr()
    assert code == 2, captured.err
    assert captured.out == ""
    (line,) = captured.err.splitlines()
    assert line.startswith("ratewarden simulate: error: ")
    return line


def _regions(count: int, rate: str = "100/s") -> list[str]:
    return [flag for n in range(count) for flag in ("--region", f"r{n}={rate}")]


class _Sized(Pattern):
    """Traffic that says how large it is, and fails the test if the run makes it."""

    __slots__ = ("size",)
    name = "sized"

    def __init__(self, size: float) -> None:
        self.size = size

    def volume(self, horizon: Horizon) -> float:
        return self.size

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        raise AssertionError("a refused run made its arrivals")


@pytest.mark.timeout(10)
def test_every_regions_arrivals_are_added_up_before_any_is_made(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The audit's run: three regions at 100,000/s, each alone under 5,000,000 arrivals in
    60 s, 13,200,000 together: refused at once, naming the limit and the busiest region."""
    line = _refused([*_regions(3, "100000/s"), "--rate", "4000000/minute", "--duration", "60"],
                    capsys)  # fmt: skip
    assert "about 13,200,000 requests in 60 s over 3 regions (r0 4,400,000)" in line
    assert "more than 5,000,000 in one run" in line


def test_the_sum_is_checked_without_making_a_regions_traffic() -> None:
    """Three regions of 2,000,000 arrivals each (each alone within the limit): refused by
    their volumes, before any region's arrivals are made (the pattern would fail the test)."""
    rates = {name: Rate.parse("100/s") for name in ("us", "eu", "ap")}
    with pytest.raises(ConfigurationError, match="about 6,000,000 requests"):
        run_regions(rates, GLOBAL, dict.fromkeys(rates, _Sized(2_000_000)), sync_interval=1.0,
                    replication_lag=0.0, duration_s=60)  # fmt: skip


@pytest.mark.timeout(10)
def test_many_regions_are_refused_by_the_counts_their_rounds_read(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """100 regions for 30 s (31 s of work before): their rounds would read 29,700,000 counts,
    more than the 20,000,000 a reconciled run may; the line says how to shrink it."""
    line = _refused([*_regions(100), "--duration", "30"], capsys)
    assert "3,000 rounds in 30 s (one every 1 s in each of 100 regions)" in line
    assert "would read 29,700,000 counts: more than 20,000,000 with --strategy reconciled" in line
    assert "simulate fewer regions, lengthen --sync-interval or shorten --duration" in line


@pytest.mark.timeout(10)
def test_more_than_a_hundred_regions_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    """200 regions (which never finished before) are refused by their number."""
    line = _refused([*_regions(200), "--duration", "10"], capsys)
    assert line.endswith(
        f"200 regions is more than {MAX_REGIONS} in one run; simulate fewer regions"
    )


@pytest.mark.timeout(10)
def test_rounds_over_every_region_are_bounded(capsys: pytest.CaptureFixture[str]) -> None:
    """Two regions, a round every millisecond for 600 s: 1,200,000 rounds, each region's
    under the old 1,000,000 a region (minutes of work); refused by the run's 200,000."""
    line = _refused([*_regions(2), "--sync-interval", "0.001"], capsys)
    assert "1,200,000 rounds in 600 s (one every 0.001 s in each of 2 regions)" in line
    assert "more than 200,000 in one run" in line


@pytest.mark.timeout(10)
def test_a_quotas_rounds_have_their_own_smaller_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """20 regions for 600 s: a quota's rounds read every region's store, 4,800,000 counts,
    past its 2,000,000; a static quota reads none, and runs."""
    line = _refused([*_regions(20), "--strategy", "quota"], capsys)
    assert "would read 4,800,000 counts: more than 2,000,000 with --strategy quota" in line
    code = main(["simulate", *_regions(20), "--strategy", "static",
                 "--pattern", "steady:load=0.001"])  # fmt: skip
    assert code == 0, capsys.readouterr().err


def _horizon(seconds: int) -> Horizon:
    return Horizon(0, seconds * 1_000_000, GLOBAL.limit, GLOBAL.period_us)


@pytest.mark.parametrize("strategy", ["reconciled", "quota", "static"])
def test_the_limits_admit_a_run_at_them(strategy: str) -> None:
    """At each limit exactly, a run is let through; one round or arrival more is not."""
    two = dict.fromkeys(("us", "eu"), _Sized(2_500_000))
    check_run(two, _horizon(100), 1_000, strategy)  # 2 x 100,000 rounds, 5,000,000 arrivals
    longer = Horizon(0, 100_001_000, GLOBAL.limit, GLOBAL.period_us)  # a round more each
    with pytest.raises(ConfigurationError, match="200,002 rounds"):
        check_run(two, longer, 1_000, strategy)
    with pytest.raises(ConfigurationError, match="about 5,000,001 requests"):
        check_run({**two, "ap": _Sized(1)}, _horizon(100), 1_000_000, strategy)


def test_the_counts_limit_is_the_product_of_regions_peers_and_rounds() -> None:
    """Twenty regions read 20 x 19 x 20 (reconciled) or 20 x 20 x 20 (quota) counts a round."""
    twenty = {f"r{n}": _Sized(1) for n in range(20)}
    for strategy, each in (("reconciled", 7_600), ("quota", 8_000)):
        most = MAX_COUNTS_READ[strategy]
        rounds = most // each  # each region's
        check_run(twenty, _horizon(rounds), 1_000_000, strategy)
        with pytest.raises(ConfigurationError, match=f"more than {most:,} with"):
            check_run(twenty, _horizon(rounds + 1), 1_000_000, strategy)
        assert 20 * (rounds + 1) <= MAX_REGION_ROUNDS  # the counts limit refused it, not that


def test_a_storms_volume_is_what_its_clients_offer_when_admitted() -> None:
    """A retry storm's retries depend on decisions, so they are counted as the run makes
    them; up front it counts what its clients offer when every call is admitted (the
    load), or its clients' first calls when more."""
    horizon = _horizon(60)
    assert patterns.parse("retry-storm:load=2").volume(horizon) == pytest.approx(12_000)
    assert patterns.parse("retry-storm:clients=50000,load=0.1").volume(horizon) == 50_000
