"""``simulate --bursts`` at a limit the sliding log's attack cannot take (1,001 to 10,000)
runs the other algorithms when none was named, with a note; naming the sliding log says how
to leave it out (finding 5 of the operator3 walk: ``--bursts --rate 5000/minute`` exited 2
for every algorithm because of the default set's sliding_log)."""

from __future__ import annotations

import pytest

from ratewarden.cli import main

RATE = "1200/minute"


def test_without_algorithm_the_sliding_log_is_left_out_with_a_note(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Exit 0, five rows, one note naming the sliding log's cap and the others'."""
    assert main(["simulate", "--bursts", "--rate", RATE, "--algorithm", "gcra"]) == 0
    capsys.readouterr()
    assert main(["simulate", "--bursts", "--rate", RATE]) == 0
    captured = capsys.readouterr()
    assert captured.err == (
        f"ratewarden simulate: note: sliding_log left out at {RATE}: the burst table takes it "
        "up to a limit and burst of 1,000, the others up to 10,000\n"
    )
    names = [line.split()[0] for line in captured.out.splitlines()[1:]]
    assert names == ["fixed_window", "gcra", "leaky_bucket", "sliding_window", "token_bucket"]


def test_a_rate_the_log_takes_keeps_it(capsys: pytest.CaptureFixture[str]) -> None:
    """At 1,000 the sliding log runs as before, with no note."""
    assert main(["simulate", "--bursts", "--rate", "1000/minute"]) == 0
    captured = capsys.readouterr()
    assert captured.err == ""
    assert "\nsliding_log " in captured.out


def test_naming_the_sliding_log_says_how_to_leave_it_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Asked for by name, it is refused (nothing runs), saying to leave it out."""
    argv = ["simulate", "--bursts", "--rate", RATE, "--algorithm", "gcra",
            "--algorithm", "sliding_log"]  # fmt: skip
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err == (
        f"ratewarden simulate: error: --algorithm sliding_log at {RATE}: the burst table takes "
        "the sliding log up to a limit and burst of 1,000 (its attack is quadratic); leave it "
        "out to run the others, which go up to 10,000\n"
    )
