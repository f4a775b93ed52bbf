"""``ratewarden plan``'s share flags refuse a share out of range themselves, naming the flag.

``--local-reject 100%`` passed the flag's own check (0 to 1) and was then refused by the plan
as ``local_reject 1.0 must be a share from 0 to below 1``: the Python name, and no usage
line. Now the flag's check knows its range (0 to below 1, or 0% to below 100%). A value
starting with '-' and a digit is the flag's value: ``--local-reject -5%`` (argparse alone read
it as a flag and said 'expected one argument') reaches the range check as ``--local-reject=-5%``
does.
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
     ["--local-reject", "-5%"], ["--local-reject", "-.5%"], ["--local-reject", "-0.05"],
     ["--local-reject", "150%"]],
    ids=["100%", "1", "=-5%", "-5%", "-.5%", "-0.05", "150%"],
)  # fmt: skip
def test_a_local_reject_out_of_range_names_the_flag_and_its_range(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """The flag, the value as given and its range, in one line (no usage before it)."""
    err = refused(capsys, *argv)
    value = argv[-1].split("=", 1)[-1]
    assert err == (
        f"ratewarden plan: error: argument --local-reject: --local-reject {value!r} must be "
        "from 0 to below 1 (or 0% to below 100%); see ratewarden plan --help\n"
    )
    assert "local_reject" not in err


def test_the_help_says_the_range_and_that_a_value_below_zero_is_refused_by_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--help gives --local-reject's range, and says -5% is read as the flag's value."""
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    out = " ".join(capsys.readouterr().out.split())
    assert "from 0 to below 1 (or 0% to below 100%)" in out
    assert "A value starting with '-' and a digit (-5%, -0.05) is read as the flag's value" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--global-share", "-5%"], "--global-share '-5%' must be from 0 to 1 (or 0% to 100%)"),
     (["--max-utilization", "-1%"], "--max-utilization '-1%' must be above 0 and below 1"),
     (["--descriptors", "-1e3"], "--descriptors '-1e3' must be a number above 0"),
     (["--keys", "-5"], "--keys '-5' must be a whole number >= 1"),
     (["--local-reject", "-x"], "--local-reject: expected one argument")],
    ids=["global-share", "max-utilization", "exponent", "keys", "a-flag-not-a-value"],
)  # fmt: skip
def test_a_value_starting_with_a_dash_and_a_digit_reaches_its_flags_own_check(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    """Every flag's value may start with '-' and a digit and is then checked by the flag; a
    word starting with '-' and a letter is still a flag (the value is missing)."""
    assert message in refused(capsys, *argv)


def test_a_local_reject_just_below_everything_is_still_planned(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """99.9% is in range: the plan runs, a thousandth of the traffic left."""
    assert main(["plan", "--rps", "10000", "--local-reject", "99.9%"]) == 0
    assert "10,000 x (1 - 0.999)" in capsys.readouterr().out
