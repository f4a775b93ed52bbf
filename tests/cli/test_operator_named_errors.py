"""Each refusal names its flag and echoes the value as it was written (finding 7 of the
operator3 walk): the library's parameter (``ReconciledBudget: sync_interval 1000000000.0``),
a reformatted value (``--sync-interval-ms 8.64e+07``), a plot file called ``'.'``, an
unknown region taken for an unknown pattern, and a negative start read as an empty one were
each said otherwise."""

from __future__ import annotations

import pytest

from ratewarden.cli import main

REGIONS = ["simulate", "--region", "us=10/s", "--region", "eu=10/s", "--duration", "60"]


@pytest.mark.parametrize(
    ("argv", "said"),
    [
        ([*REGIONS, "--sync-interval", "1e9"],
         "--sync-interval '1e9' is more than a day (86,400 s), the most a ReconciledBudget "
         "takes; check the unit (seconds)"),
        ([*REGIONS, "--replication-lag", "90000"],
         "--replication-lag '90000' is more than a day (86,400 s)"),
        (["plan", "--rps", "1", "--regions", "3", "--sync-interval-ms", "86400001"],
         "--sync-interval-ms '86400001' is more than a day (86,400,000 ms), the most a "
         "ReconciledBudget takes; check the unit (milliseconds)"),
        (["plan", "--rps", "1", "--regions", "3", "--sync-interval-ms", "1000",
          "--region-lag-ms", "1e8"],
         "--region-lag-ms '1e8' is more than a day (86,400,000 ms)"),
        (["simulate", "--plot", ""], "--plot '': give a file name, such as out.png"),
        ([*REGIONS, "--pattern", "xx=steady"],
         "--pattern 'xx=steady': 'xx' is not a region (the regions are us, eu)"),
        ([*REGIONS, "--partition", "us@-5-20"],
         "--partition 'us@-5-20': its start is missing or negative; give NAME@START-END"),
    ],
)  # fmt: skip
def test_the_refusal_names_the_flag_and_the_value_as_written(
    capsys: pytest.CaptureFixture[str], argv: list[str], said: str
) -> None:
    """Exit 2, one line on stderr holding the flag and value as given; nothing runs."""
    try:
        code = main(argv)
    except SystemExit as exc:  # a flag's own check exits through argparse
        code = exc.code  # type: ignore[assignment]
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert len(captured.err.splitlines()) == 1
    assert said in captured.err


def test_a_region_pattern_and_a_shared_one_still_run(capsys: pytest.CaptureFixture[str]) -> None:
    """NAME=SPEC for a region and a parameterised shared SPEC are not taken for regions."""
    argv = [*REGIONS, "--pattern", "us=steady", "--pattern", "poisson:load=1"]
    assert main(argv) == 0
    assert capsys.readouterr().out.startswith("region")
