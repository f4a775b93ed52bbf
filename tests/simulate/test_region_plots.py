"""`ratewarden simulate --region ... --plot`: the figure says what ran, and when links were cut.

A quota run's figure was titled "ReconciledBudget" and drew a "stated bound (+0)" line,
hard-coded for reconciled budgets; a run with ``--partition`` looked like an uncut one.
Now the title names what every region ran, only a reconciled run draws its bound, and
each cut span is shaded and named in the legend. Read from the SVG, whose every text is
written beside its glyphs as a comment.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from ratewarden.rate import Rate
from ratewarden.simulate import patterns
from ratewarden.simulate._partitions import parse_partition
from ratewarden.simulate._regions_flags import plot_regions
from ratewarden.simulate.regions import RegionsRun, run_regions

pytest.importorskip("matplotlib")

RATES = {name: Rate.parse("100/second", burst=1) for name in ("us", "eu")}


def _run(strategy: str, cuts: tuple[str, ...] = ()) -> RegionsRun:
    traffic = {name: patterns.parse(f"poisson:seed={n}") for n, name in enumerate(RATES, 1)}
    return run_regions(RATES, Rate.parse("6000/minute"), traffic, sync_interval=1.0,
                       replication_lag=0.1, duration_s=180, strategy=strategy,
                       partitions=[parse_partition(cut, list(RATES), 180_000_000)
                                   for cut in cuts])  # fmt: skip


def _texts(run: RegionsRun, path: Path) -> str:
    return plot_regions(run, path).read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("strategy", "title"),
    [
        ("quota", "RegionalQuota in each region, shares from traffic: admitted per window by "
                  "region (rebalanced every 1 s; allowances add up to the limit)"),
        ("static", "RegionalQuota in each region, static shares: admitted per window by region "
                   "(allowances add up to the limit)"),
    ],
)  # fmt: skip
def test_a_quota_runs_figure_names_the_quota_and_draws_no_bound(
    tmp_path: Path, strategy: str, title: str
) -> None:
    """The title names RegionalQuota and how its shares move; no "stated bound" line."""
    text = _texts(_run(strategy), tmp_path / "quota.svg")
    assert f"<!-- {title} -->" in text
    assert "ReconciledBudget" not in text
    assert "stated bound" not in text


def test_a_reconciled_runs_figure_draws_its_bound_and_the_cut_spans(tmp_path: Path) -> None:
    """The title names ReconciledBudget, its bound is drawn, and each --partition is named."""
    run = _run("reconciled", ("us->*@60-120", "eu@130-150"))
    text = _texts(run, tmp_path / "cut.svg")
    assert "<!-- ReconciledBudget in each region: admitted per window by region" in text
    assert f"<!-- stated bound (+{run.bound}) -->" in text
    assert "<!-- links cut: us-&gt;*@60-120 -->" in text
    assert "<!-- links cut: eu@130-150 -->" in text
    assert "links cut" not in _texts(_run("reconciled"), tmp_path / "uncut.svg")
