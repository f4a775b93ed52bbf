"""`ratewarden simulate` says what is wrong in words that match the mistake."""

from __future__ import annotations

import pytest

from ratewarden.cli import main

_REGIONS = ["--region", "us=100/s:1", "--region", "eu=50/s:1"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--plot", ".svg"], "plot file '.svg': give a name before the suffix, such as out.png"),
        (["--plot", "out/.png"], "give a name before the suffix"),
        (["--duration", "1e-7"], "must be from 0.000001 s (1 us, the simulation's tick)"),
        (["--rate", "-5/minute"], "--rate '-5/minute': rate '-5/minute': limit '-5'"),
        (["--layers", "-5/s,1/h"], "--layers '-5/s,1/h': rate '-5/s'"),
        (["--layers", "10/second,,1000/hour"], "a layer is empty"),
        ([*_REGIONS, "--partition", "us->us@10-20"], "cuts a region off from itself"),
        ([*_REGIONS, "--strategy", "quota", "--round-time", "0.3"],
         "for reconciled budgets: a quota round is whole when it starts"),
    ],
)  # fmt: skip
def test_a_mistake_is_named_for_what_it_is(
    argv: list[str], said: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each exits 2 with one line naming the value and what is wrong with it (a flag's own
    check, --duration's, exits through argparse)."""
    try:
        code = main(["simulate", *argv])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    err = capsys.readouterr().err
    assert said in err
    assert len(err.splitlines()) == 1


def test_the_closing_line_counts_rounds_as_the_column_does(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Staggered regions start 600, 600 and 599 rounds: the closing line says 599 to 600."""
    argv = ["simulate", *_REGIONS, "--region", "ap=20/s:1", "--rate", "6000/minute",
            "--replication-lag", "0.1", "--round-time", "0.3"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    stale = [line.split()[-1] for line in out.splitlines()[1:4]]
    assert stale == ["600", "600", "599"]
    assert "599 to 600 rounds a region)" in out


def test_a_region_whose_share_rounds_to_nothing_is_named(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """1/second split two ways: each share floors to 0, every budget admits nothing, and the
    output says why instead of leaving a table of zeros."""
    assert main(["simulate", *_REGIONS, "--rate", "1/s", "--duration", "60"]) == 0
    out = capsys.readouterr().out
    assert "region us: its share of the limit, floor(0.667 x 1), is 0" in out
    assert "region eu: its share of the limit, floor(0.333 x 1), is 0" in out


def test_a_layered_figure_bins_by_its_shortest_layer() -> None:
    """An hour under 10/second and 1000/hour: 3,600 bins of a second, so a burst at twice the
    per-second layer shows above that layer's line (200 bins of 18 s averaged it below)."""
    from ratewarden.rate import Rate
    from ratewarden.simulate import layered, patterns, plots

    rates = (Rate.parse("10/second"), Rate.parse("1000/hour"))
    run = layered.run_layered(patterns.parse("onoff:load=2"), "gcra", rates, 3600)
    assert plots._bins(run, 200) == 3600
    _, offered, _ = plots._binned(run, plots._bins(run, 200))
    assert max(offered) == 20
