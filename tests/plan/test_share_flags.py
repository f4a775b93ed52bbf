"""``ratewarden plan``'s share flags refuse a share out of range themselves, naming the flag.

``--local-reject 100%`` passed the flag's own check (0 to 1) and was then refused by the plan
as ``local_reject 1.0 must be a share from 0 to below 1``: the Python name, and no usage
line. Now the flag's check knows its range (0 to below 1, or 0% to below 100%). A value
starting with '-' other than a plain number (``-5%``) is read by argparse as a flag; given as
``--local-reject=-5%`` it reaches the range check.
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main


def refused(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """What ``ratewarden plan --rps 10 ARGV`` writes to stderr; it must exit 2."""
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--rps", "10", *argv])
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


@pytest.mark.parametrize(
    "argv",
    [["--local-reject", "100%"], ["--local-reject", "1"], ["--local-reject=-5%"],
     ["--local-reject", "-0.05"], ["--local-reject", "150%"]],
    ids=["100%", "1", "=-5%", "-0.05", "150%"],
)  # fmt: skip
def test_a_local_reject_out_of_range_names_the_flag_and_its_range(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """The flag, the value as given and its range, under plan's usage line."""
    err = refused(capsys, *argv)
    value = argv[-1].split("=", 1)[-1]
    assert err.startswith("usage: ratewarden plan ")
    assert (
        f"ratewarden plan: error: argument --local-reject: --local-reject {value!r} must be "
        "from 0 to below 1 (or 0% to below 100%)"
    ) in err
    assert "local_reject" not in err


def test_the_help_says_the_range_and_how_to_give_a_value_starting_with_a_dash(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--help gives --local-reject's range and the '=' form."""
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "from 0 to below 1 (or 0% to below 100%)" in out
    assert "--local-reject=-5%" in out


def test_a_local_reject_just_below_everything_is_still_planned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """99.9% is in range: the plan runs, a thousandth of the traffic left."""
    assert main(["plan", "--rps", "10000", "--local-reject", "99.9%"]) == 0
    assert "10,000 x (1 - 0.999)" in capsys.readouterr().out
