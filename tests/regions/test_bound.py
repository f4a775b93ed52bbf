"""Allowance splits never exceed the limit; the bound is the documented arithmetic."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.regions import overshoot_bound, split_allowances, traffic_weights
from ratewarden.regions.__main__ import main

weights = st.dictionaries(
    st.sampled_from(["us", "eu", "ap", "sa"]),
    st.one_of(st.integers(0, 10**6), st.floats(0, 1e6, allow_nan=False)),
    min_size=1,
).filter(lambda w: sum(w.values()) > 0)


@given(st.integers(0, 10**9), weights)
def test_split_sums_to_the_limit_and_stays_within_one_of_each_share(
    limit: int, shares: dict[str, float]
) -> None:
    """The allowances add up to exactly the limit (never more), each within 1 of its exact share."""
    allowances = split_allowances(limit, shares)
    assert sum(allowances.values()) == limit
    total = sum(shares.values())
    for region, allowance in allowances.items():
        assert allowance >= 0
        assert abs(allowance - limit * shares[region] / total) < 1 + 1e-6


def test_split_of_the_article_example() -> None:
    """60/30/10 percent of 1,000 requests is 600/300/100; of 7 it is 4/2/1 (largest remainder)."""
    assert split_allowances(1000, {"us": 60, "eu": 30, "ap": 10}) == {
        "us": 600,
        "eu": 300,
        "ap": 100,
    }
    assert split_allowances(7, {"us": 60, "eu": 30, "ap": 10}) == {"us": 4, "eu": 2, "ap": 1}


@pytest.mark.parametrize(
    ("limit", "shares"),
    [(-1, {"us": 1}), (10, {}), (10, {"us": 0}), (10, {"us": -1}), (10, {"us": math.nan})],
)
def test_bad_splits_are_refused(limit: int, shares: dict[str, float]) -> None:
    """A negative limit, no regions, all-zero, negative or NaN weights raise ConfigurationError."""
    with pytest.raises(ConfigurationError):
        split_allowances(limit, shares)


def test_traffic_weights_follow_demand_with_a_floor() -> None:
    """Weights are demand plus a tenth of the mean (at least 1): a quiet region keeps a sliver."""
    assert traffic_weights({"us": 900, "eu": 90, "ap": 0}, ("us", "eu", "ap")) == {
        "us": 933,
        "eu": 123,
        "ap": 33,
    }
    assert traffic_weights({}, ("us", "eu")) == {"us": 1, "eu": 1}
    with pytest.raises(ConfigurationError):
        traffic_weights({"mars": 1}, ("us",))


def test_bound_worked_example() -> None:
    """us 100/s, eu 50/s, ap 20/s (burst 1), 1 s sync + 0.1 s lag: 111 + 56 + 23 = 190."""
    rates = {
        "us": Rate.parse("100/s", burst=1),
        "eu": Rate.parse("50/s", burst=1),
        "ap": Rate.parse("20/s", burst=1),
    }
    assert overshoot_bound(rates, 1.0, 0.1) == 190


def test_bound_counts_each_burst_and_rounds_up() -> None:
    """A burst is admitted at once, so it is in the bound; 1/3 request rounds up to 1."""
    assert overshoot_bound({"us": Rate.parse("10/s")}, 1.0, 0.0) == 10 + 10
    assert overshoot_bound({"us": Rate.parse("1/3s", burst=1)}, 1.0, 0.0) == 1 + 1


@pytest.mark.parametrize(
    ("interval", "lag"), [(0, 0.1), (-1, 0.1), (1, -0.1), (math.inf, 0), (1, math.nan)]
)
def test_bad_bound_inputs_are_refused(interval: float, lag: float) -> None:
    """A sync interval must be > 0 and the lag >= 0, both finite."""
    with pytest.raises(ConfigurationError):
        overshoot_bound({"us": Rate.parse("1/s")}, interval, lag)


def test_cli_prints_the_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """``python -m ratewarden.regions bound`` prints each region's part and the total."""
    code = main(
        [
            "bound",
            "--region",
            "us=100/s:1",
            "--region",
            "eu=50/s:1",
            "--region",
            "ap=20/s:1",
            "--sync-interval",
            "1",
            "--replication-lag",
            "0.1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "us" in out and "-> 111" in out
    assert "bound: at most 190 requests over the global limit per window" in out


@pytest.mark.parametrize(
    "args",
    [
        ["bound", "--region", "us", "--sync-interval", "1"],
        ["bound", "--region", "us=ten/s", "--sync-interval", "1"],
        ["bound", "--region", "us=1/s", "--region", "us=2/s", "--sync-interval", "1"],
        ["bound", "--region", "us=1/s", "--sync-interval", "0"],
    ],
)
def test_cli_refuses_bad_input(args: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    """Bad regions, rates, duplicates or intervals exit 2 with the reason on stderr."""
    assert main(args) == 2
    assert capsys.readouterr().err.startswith("error: ")


@pytest.mark.parametrize(
    ("region", "words"),
    [
        ("us=100/s:0", "--region 'us=100/s:0': burst '0' must be a whole number >= 1"),
        ("us=100/s:-1", "--region 'us=100/s:-1': burst '-1' must be a whole number >= 1"),
        ("us=100/s:x", "--region 'us=100/s:x': burst 'x' must be a whole number >= 1"),
        ("us=ten/s", "--region 'us=ten/s': "),
        ("u:s=1/s", "--region 'u:s=1/s': region name 'u:s'"),
    ],
)
def test_cli_names_the_region_flag_and_text(
    region: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Every refused --region names the flag and the text it was given, on one line."""
    assert main(["bound", "--region", region, "--sync-interval", "1"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {words}") and err.count("\n") == 1


def test_cli_an_unknown_flag_is_bounds_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    """``bound ... --bogus`` is bound's error, exit 2: one line naming the flag and bound's
    help (not the top-level usage argparse prints for a subcommand's unknown flags)."""
    with pytest.raises(SystemExit) as exited:
        main(["bound", "--region", "us=1/s", "--sync-interval", "1", "--bogus"])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines() == [
        "python -m ratewarden.regions bound: error: unknown flag --bogus; "
        "see python -m ratewarden.regions bound --help"
    ]


def test_cli_help_explains_every_option_of_bound(capsys: pytest.CaptureFixture[str]) -> None:
    """``bound --help`` gives each option a help text: what it is, its unit or syntax."""
    with pytest.raises(SystemExit) as exited:
        main(["bound", "--help"])
    assert exited.value.code == 0
    shown = " ".join(capsys.readouterr().out.split())
    for flag, words in (
        ("--region NAME=RATE[:BURST]", "a region and its rate cap, such as us=100/s"),
        ("--sync-interval SECONDS", "seconds between two reconciliation rounds"),
        ("--replication-lag SECONDS", "the oldest a round may be when it is applied"),
    ):
        assert f"{flag} {words}" in shown
