"""`ratewarden simulate --region ... --strategy`: regional quotas beside reconciled budgets.

The same traffic through each strategy: a reconciled budget lends a quiet region's share to a
busy one (within its bound), static quotas never move (the busy region is held to its share
while the others' go unused), quotas from traffic follow the demand a round late. Every
quota run stays within the limit: its allowances add up to it, and a key's usage carries
over each rebalance (without the carry, rebalancing every second admitted about three times
the limit).
"""

from __future__ import annotations

import contextlib

import pytest

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.simulate import patterns
from ratewarden.simulate._partitions import parse_partition
from ratewarden.simulate.regions import RegionsRun, format_regions, run_regions

RATES = {name: Rate.parse("100/second", burst=1) for name in ("us", "eu", "ap")}
GLOBAL = Rate.parse("6000/minute")
SKEWED = {"us": "poisson:load=2", "eu": "poisson:load=0.2,seed=2", "ap": "poisson:load=0.2,seed=3"}
EVEN = {name: f"poisson:load=1,seed={seed}" for seed, name in enumerate(RATES, 1)}


def _run(strategy: str, traffic: dict[str, str], **options: object) -> RegionsRun:
    return run_regions(
        RATES,
        GLOBAL,
        {name: patterns.parse(spec) for name, spec in traffic.items()},
        sync_interval=1.0,
        replication_lag=0.0,
        duration_s=180,
        strategy=strategy,
        **options,  # type: ignore[arg-type]
    )


def _admitted(run: RegionsRun) -> dict[str, int]:
    return {row.region: row.admitted for row in run.regions}


def test_static_quotas_hold_each_region_to_its_share_and_waste_the_rest() -> None:
    """Shares by the region rates (a third each): us, offered twice the limit, gets exactly
    2,000 a window; eu and ap, offered a fifth each, get all they ask; a quarter of the
    limit is never used."""
    run = _run("static", SKEWED)
    assert [window.admitted[0] for window in run.windows] == [2_000] * 3
    assert run.worst is None
    admitted = _admitted(run)
    assert admitted["us"] == 6_000
    assert all(row.denied == 0 for row in run.regions if row.region != "us")
    assert sum(admitted.values()) < 0.8 * GLOBAL.limit * 3


def test_quotas_from_traffic_follow_the_demand_and_stay_within_the_limit() -> None:
    """Rebalanced every second, us's allowance grows to most of the limit: more is admitted
    in all than under static shares, and no window goes over."""
    static = sum(_admitted(_run("static", SKEWED)).values())
    run = _run("quota", SKEWED)
    assert run.worst is None
    assert sum(_admitted(run).values()) > static + 0.15 * GLOBAL.limit * 3
    assert run.rounds == 179


def test_quotas_from_traffic_under_even_traffic_admit_about_the_limit() -> None:
    """Three regions each offered the whole limit: every window within the limit and above
    90% of it (each carry rounds the share used up). Without the carry each window admitted
    about three times the limit."""
    run = _run("quota", EVEN)
    assert run.worst is None
    assert all(window.total >= 0.9 * GLOBAL.limit for window in run.windows)


def test_a_cut_link_keeps_traffic_quotas_within_the_limit() -> None:
    """us cannot read its peers for a minute: its rounds fail (shares kept) and the others
    grow no further than the weights it last took, so no window goes over."""
    cut = parse_partition("us->*@60-120", list(RATES), 180_000_000)
    run = _run("quota", SKEWED, partitions=[cut])
    assert run.worst is None
    failed = {row.region: row.failed_rounds for row in run.regions}
    assert 55 <= failed["us"] <= 61 and failed["eu"] == failed["ap"] == 0


def test_the_table_says_what_each_strategy_states() -> None:
    """The closing lines: the reconciled bound, or that a quota's allowances add up to the
    limit; and what was admitted in all against the limit."""
    text = format_regions(_run("static", SKEWED))
    assert "a regional quota's allowances add up to the limit (shares static)" in text
    assert "strategy static: " in text and "% of the limit over 3 windows" in text
    text = format_regions(_run("reconciled", SKEWED))
    assert "the stated bound is +" in text and "strategy reconciled: " in text


def test_a_round_time_is_refused_for_a_quota() -> None:
    """A quota's round is whole when it starts: --round-time has nothing to set."""
    with pytest.raises(ConfigurationError, match="round time is for reconciled budgets"):
        _run("quota", SKEWED, round_time=0.3)


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--strategy", "home"], "--strategy: invalid choice: 'home'"),
        (["--strategy", "static", "--round-time", "0.3"], "round time is for reconciled"),
    ],
)
def test_bad_strategy_flags_exit_2_naming_the_flag(
    extra: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["simulate", "--region", "us=100/s", "--region", "eu=50/s", "--duration", "60"]
    with pytest.raises(SystemExit) if "home" in extra else contextlib.nullcontext():
        code = main([*argv, *extra])
        assert code == 2
    assert message in capsys.readouterr().err


def test_strategy_is_a_region_mode_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """--strategy without --region is refused, as the other region flags are."""
    assert main(["simulate", "--strategy", "quota"]) == 2
    assert "--strategy cannot be used without --region" in capsys.readouterr().err
