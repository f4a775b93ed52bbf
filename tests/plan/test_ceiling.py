"""Every number the plan takes or prints is at most 10^15; past it, a clear error naming the flags.

``--rps 1e200 --calls-per-primary 1e-200`` ended in a traceback (``OverflowError: cannot convert
float infinity to integer``, exit 1); ``--rps 1e308 --descriptors 10`` printed ``inf/s`` and
``inf GB/s`` next to 300-digit figures. Now an input past 10^15 is refused by its flag's own
check, and a figure the inputs would carry past 10^15 (or to infinity) is refused naming the
flags it grows with: exit 2, one line, nothing printed on stdout.
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.plan import PlanInput, plan


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What ``ratewarden plan ARGV`` writes to stderr; it must exit 2 with nothing on stdout."""
    try:
        code = main(["plan", *argv])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    captured = capsys.readouterr()
    assert (code, captured.out) == (2, "")
    assert "Traceback" not in captured.err
    return captured.err.splitlines()[-1]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (
            ["--rps", "1e200"],
            "argument --rps: --rps '1e200' must be a number above 0, at most 10^15",
        ),
        (["--rps", "1", "--key-bytes", "1e308"], "--key-bytes '1e308' must be a number above 0"),
        (["--rps", "1", "--rtt-ms", "inf"], "--rtt-ms 'inf' must be a number 0 or more, at most"),
        (
            ["--rps", "1", "--keys", "10000000000000000"],
            "--keys '10000000000000000' must be a whole number >= 1, at most 10^15",
        ),
        (["--rps", "1", "--replicas", "1" + "0" * 400], "--replicas '1000"),
    ],
)
def test_an_input_past_the_ceiling_is_refused_by_its_flag(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """The flag's own check, before anything is computed."""
    assert said in refused(capsys, *argv)


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        (["--rps", "1e15", "--calls-per-primary", "1e-200"],
         "bandwidth would be more than 10^15, the plan's ceiling: check --rps, --descriptors, "
         "--bytes-per-call"),
        (["--rps", "1e12", "--calls-per-primary", "1e-200"],
         "primaries needed would be more than 10^15, the plan's ceiling: check --rps, "
         "--descriptors, --calls-per-primary, --max-utilization"),
        (["--rps", "1e15", "--descriptors", "10"],
         "script calls/s would be more than 10^15, the plan's ceiling: check --rps, --descriptors"),
        (["--rps", "1", "--keys", "1000000000", "--key-bytes", "1e9"],
         "memory would be more than 10^15, the plan's ceiling: check --keys, --key-bytes"),
        (["--rps", "1", "--keys", "1000000", "--key-bytes", "1e8", "--replicas", "20"],
         "memory would be more than 10^15, the plan's ceiling: check --keys, --key-bytes, "
         "--replicas"),
        (["--rps", "1e-300", "--primaries", "1", "--calls-per-primary", "1e-200", "--rtt-ms", "1"],
         "latency would be more than 10^15, the plan's ceiling: check --rtt-ms, "
         "--calls-per-primary"),
        (["--rps", "1e-9", "--calls-per-primary", "1e15", "--rtt-ms", "0", "--timeout-ms", "1e9"],
         "headroom would be more than 10^15, the plan's ceiling: check --timeout-ms, "
         "--calls-per-primary"),
        (["--rps", "1", "--limit", "10000/second", "--burst", "20", "--replication-lag-ms", "1e15"],
         "the failover bound would be more than 10^15, the plan's ceiling: check --limit, "
         "--burst, --replication-lag-ms"),
        (["--rps", "1", "--instances", "100000000", "--lease", "100000000"],
         "the leases bound would be more than 10^15, the plan's ceiling: check --instances, "
         "--lease"),
    ],
)  # fmt: skip
def test_a_figure_past_the_ceiling_names_the_flags_it_grows_with(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """No traceback, no ``inf``, no 300-digit figure: one line, exit 2."""
    assert refused(capsys, *argv) == f"ratewarden plan: error: {said}"


def test_the_regions_flag_makes_at_most_a_thousand() -> None:
    """``--regions N`` builds N regions: past 1,000 it is refused instead of filling memory."""
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--rps", "1", "--regions", "1000000000000", "--sync-interval-ms", "1"])
    assert exited.value.code == 2


def test_the_library_refuses_alike_with_the_field_names() -> None:
    """``PlanInput`` refuses an input past 10^15; ``plan`` a figure past it, naming fields; a
    figure at 10^15 itself is computed."""
    with pytest.raises(ConfigurationError, match=r"^rps 1e\+200 must be a finite number above 0, "):
        PlanInput(rps=1e200)
    with pytest.raises(ConfigurationError) as refused:
        plan(PlanInput(rps=1e12, calls_per_primary=1e-200, max_utilization=1e-200))
    assert str(refused.value) == (
        "primaries needed would be more than 10^15, the plan's ceiling: check rps, descriptors, "
        "calls_per_primary, max_utilization"
    )
    at_the_ceiling = PlanInput(rps=1e15, keys=10**6, key_bytes=1e9, bytes_per_call=1)
    assert plan(at_the_ceiling).memory_bytes == 1e15
