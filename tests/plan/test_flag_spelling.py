"""``ratewarden plan``: a misspelt --rps is named as misspelt, and whole numbers take 1e15.

``plan --rsp 100`` said ``the following arguments are required: --rps``: argparse reports a
missing required flag before an unknown one, and the nearest-flag guess missed a swap of
two letters in a short name. ``--keys 1e15`` was refused as "must be a whole number ...,
at most 10^15", though 1e15 is 10^15 and the plan's other number flags take e-notation.
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main


def _refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(["plan", *argv])
    assert exited.value.code == 2
    (line,) = capsys.readouterr().err.splitlines()
    return line


def _plan(argv: list[str], capsys: pytest.CaptureFixture[str]) -> str:
    code = main(["plan", *argv])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    return captured.out


def test_a_misspelt_rps_is_named_with_the_flag_it_meant(capsys: pytest.CaptureFixture[str]) -> None:
    """--rsp is an unknown flag, and --rps the guess; not a missing --rps."""
    assert _refused(["--rsp", "100"], capsys) == (
        "ratewarden plan: error: unknown flag --rsp (did you mean --rps?); see ratewarden plan "
        "--help"
    )


def test_a_swap_is_guessed_only_when_one_flag_fits(capsys: pytest.CaptureFixture[str]) -> None:
    """Two swapped letters anywhere in a name are guessed (--kyes: --keys); a name no flag is
    one swap from gets no guess."""
    assert "unknown flag --kyes (did you mean --keys?)" in _refused(
        ["--rps", "1", "--kyes", "5"], capsys
    )
    assert _refused(["--rps", "1", "--zzq", "5"], capsys).startswith(
        "ratewarden plan: error: unknown flag --zzq; see"
    )


def test_without_rps_the_plan_says_it_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2, one line naming --rps, nothing planned."""
    code = main(["plan", "--keys", "5"])
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    assert captured.err == (
        "ratewarden plan: error: the following arguments are required: --rps (peak requests per "
        "second); see ratewarden plan --help\n"
    )


@pytest.mark.parametrize(
    ("given", "keys"),
    [("1e15", "1,000,000,000,000,000"), ("2.5e3", "2,500"), ("1_000", "1,000"), ("7", "7")],
)
def test_whole_numbers_take_e_notation(
    capsys: pytest.CaptureFixture[str], given: str, keys: str
) -> None:
    """1e15 is the ceiling itself and is taken; 2.5e3 is 2,500."""
    out = _plan(["--rps", "1", "--keys", given, "--key-bytes", "1"], capsys)
    assert f"{keys} keys x 1 B" in out


@pytest.mark.parametrize("given", ["1.5", "1.5e15", "1e16", "0", "-5", "nan", "inf", "1e", "0x10"])
def test_what_is_not_a_whole_number_in_range_is_refused(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """A fraction, past 10^15, zero, negative, not a number: refused by the flag."""
    assert _refused(["--rps", "1", "--keys", given], capsys) == (
        f"ratewarden plan: error: argument --keys: --keys {given!r} must be a whole number >= 1, "
        "at most 10^15; see ratewarden plan --help"
    )


def test_the_regions_ceiling_is_the_same_in_e_notation(capsys: pytest.CaptureFixture[str]) -> None:
    """--regions 1e3 is 1,000 regions; 1.001e3 is past the ceiling of 1,000."""
    _plan(["--rps", "1", "--regions", "1e3", "--sync-interval-ms", "1000"], capsys)
    assert "at most 1,000" in _refused(
        ["--rps", "1", "--regions", "1.001e3", "--sync-interval-ms", "1000"], capsys
    )
