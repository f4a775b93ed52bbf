"""A flag no figure uses is noted, and the over-admission header names a rate only when a row
under it is computed from that rate (finding 3 and 4 of the operator3 walk).

``--burst``/``--limit`` beside ``--region-rate`` only were named in the header
(``over-admission on one key at 100/minute (burst 5)``) though each region takes its own rate
and ``:BURST``, and no note said they were unused; ``--sync-interval-ms`` without regions was
dropped in silence, where ``--region-lag-ms`` in its place was noted.
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main

REGIONS = ["--region-rate", "eu=10/s", "--region-rate", "us=10/s", "--sync-interval-ms", "1000"]
UNUSED = "is used by --measure, --replication-lag-ms and --regions only: give one"
OWN = "; each --region-rate has its own rate and :BURST"


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[str, list[str]]:
    assert main(["plan", "--rps", "100", *argv]) == 0
    captured = capsys.readouterr()
    return captured.out, captured.err.splitlines()


@pytest.mark.parametrize(("flag", "value"), [("--burst", "5"), ("--limit", "50/s")])
def test_a_limit_or_burst_beside_region_rates_only_is_noted_and_not_in_the_header(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    """The note says why (each region's own rate and burst); the header names no rate."""
    out, err = _run(capsys, flag, value, *REGIONS)
    assert err == [f"ratewarden plan: note: {flag} {UNUSED}{OWN}"]
    assert "over-admission on one key\n" in out
    assert " at " not in out.split("over-admission on one key")[1].splitlines()[0]
    assert "regions                40 requests" in out


def test_leases_alone_do_not_name_the_limit(capsys: pytest.CaptureFixture[str]) -> None:
    """instances x (lease - 1) takes no rate: the header names none and --limit is noted."""
    out, err = _run(capsys, "--limit", "600/minute", "--instances", "4", "--lease", "10")
    assert err == [f"ratewarden plan: note: --limit {UNUSED}"]
    assert "over-admission on one key\n  leases" in out


@pytest.mark.parametrize(
    ("argv", "header"),
    [
        (["--regions", "2", "--limit", "600/minute", "--burst", "50", "--sync-interval-ms", "1000"],
         "over-admission on one key at 600/minute (burst 50)\n"),
        (["--limit", "600/minute", "--replication-lag-ms", "100", *REGIONS],
         "over-admission on one key at 600/minute\n"),
    ],
)  # fmt: skip
def test_a_rate_a_row_uses_is_named_and_not_noted(
    capsys: pytest.CaptureFixture[str], argv: list[str], header: str
) -> None:
    """--regions N at --limit with --burst, or the failover bound: the header names the rate."""
    out, err = _run(capsys, *argv)
    assert err == []
    assert header in out


def test_a_sync_interval_without_regions_is_noted(capsys: pytest.CaptureFixture[str]) -> None:
    """As --region-lag-ms is: the plan is printed, one note on stderr."""
    out, err = _run(capsys, "--sync-interval-ms", "1000")
    assert err == [
        "ratewarden plan: note: --sync-interval-ms is used with --regions or --region-rate "
        "only: give one"
    ]
    assert out.startswith("traffic\n")
