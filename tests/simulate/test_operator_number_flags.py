"""``simulate``'s number flags read a value as ``plan``'s do, and say a bad one as written
with its whole range (finding 6, and --duration of finding 7, of the operator3 walk).

``simulate --burst 1e9`` said "'1e9' must be a whole number above 0" (the rule was digits
only) where ``plan --keys 1e15`` is taken; ``--accuracy --seed 0`` was refused (and would
have run as seed 1) while ``poisson:seed=0`` runs; ``--load inf`` and ``--load 1e308`` were
told apart from the 1,000 cap no help named, the latter echoed as '1e+308'; ``--duration
1e12`` was said as 'duration 1000000000000.0 s', without its flag.
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main

ACCURACY = ["simulate", "--accuracy", "--model", "poisson", "--requests", "40000",
            "--sources", "50"]  # fmt: skip


def _out(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    assert main(argv) == 0
    return capsys.readouterr().out


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    return captured.err


def test_e_notation_names_the_same_whole_number(capsys: pytest.CaptureFixture[str]) -> None:
    """--burst 2e1 is --burst 20; --requests 4e4 --sources 5e1 are 40,000 and 50."""
    bursts = ["simulate", "--bursts", "--algorithm", "gcra", "--burst"]
    assert _out(capsys, [*bursts, "2e1"]) == _out(capsys, [*bursts, "20"])
    written = ["simulate", "--accuracy", "--model", "poisson", "--requests", "4e4",
               "--sources", "5e1"]  # fmt: skip
    assert _out(capsys, written) == _out(capsys, ACCURACY)


@pytest.mark.parametrize("given", ["1.5", "-3", "x", "1e16", "0"])
def test_a_bad_whole_number_is_said_alike_by_both_commands(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """One parser: simulate's --burst and plan's --lease refuse the same values, in the same
    words, each naming its own flag."""
    said = "must be a whole number >= 1, at most 10^15; see ratewarden "
    simulate = _refused(capsys, ["simulate", "--burst", given])
    plan = _refused(capsys, ["plan", "--rps", "1", "--instances", "2", "--lease", given])
    assert f"--burst {given!r} {said}simulate --help" in simulate
    assert f"--lease {given!r} {said}plan --help" in plan


def test_seed_zero_is_a_seed(capsys: pytest.CaptureFixture[str]) -> None:
    """--seed 0 runs, and is not seed 1 in disguise; a negative seed is refused."""
    zero = _out(capsys, [*ACCURACY, "--seed", "0"])
    assert zero != _out(capsys, [*ACCURACY, "--seed", "1"])
    assert _out(capsys, ACCURACY) == _out(capsys, [*ACCURACY, "--seed", "1"])
    err = _refused(capsys, [*ACCURACY, "--seed", "-1"])
    assert "--seed '-1' must be a whole number >= 0, at most 10^15" in err


@pytest.mark.parametrize("given", ["inf", "nan", "1e308", "2000", "0", "-1"])
def test_a_load_out_of_range_names_the_range_and_the_value_as_written(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """Above 0, at most 1,000, said of every value outside it; --help says the cap too."""
    err = _refused(capsys, [*ACCURACY, "--load", given])
    assert f"--load {given!r} must be a number above 0, at most 1,000;" in err
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    assert "above 0 and at most 1,000" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("given", ["1e12", "2592000.5", "1e-7"])
def test_a_duration_out_of_range_names_its_flag(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """The flag, the value as written, and the range: 1 us to 30 days."""
    err = _refused(capsys, ["simulate", "--duration", given])
    assert (
        f"--duration {given!r} must be from 0.000001 s (1 us, the simulation's tick) to "
        "2,592,000 s (30 days)" in err
    )
