"""``simulate --accuracy``'s --requests and --sources say a value out of range as
``FLAG 'value': ...``, as every other flag does (they said ``sources 5 must be ...``, the
library's parameter names), and nothing runs. --load's range is its flag's own check
(tests/simulate/test_operator_number_flags.py)."""

from __future__ import annotations

import pytest

from ratewarden.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--requests", "200000000"], "--requests '200000000': must be from 1 to 100,000,000"),
        (
            ["--requests", "3", "--sources", "5"],
            "--sources '5': must be at most the number of requests (--requests 3)",
        ),
        (
            ["--sources", "5000000"],
            "--sources '5000000': must be at most the number of requests "
            "(--requests 4,000,000, the default)",
        ),
        (
            ["--requests", "30000000", "--sources", "20000000"],
            "--sources '20000000': must be from 1 to 10,000,000",
        ),
    ],
)
def test_an_accuracy_size_out_of_range_is_named_by_its_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2 and one line on stderr, the flag and the value first; nothing on stdout."""
    assert main(["simulate", "--accuracy", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"ratewarden simulate: error: {message}\n"
    assert captured.out == ""
