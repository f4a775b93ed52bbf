"""``--key-length`` is checked by its flag, with its range in ``--help``.

``--key-length 2000 --measure URL`` said ``measure: key_length 2000 must be 1..1024 and calls
2000 1..1,000,000``: the Python parameter, and a ``calls`` value the user never gave; ``--help``
did not state the limit. Now the flag refuses it itself, before any server is asked.
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main


@pytest.mark.parametrize("measure", [[], ["--measure", "redis://127.0.0.1:1"]])
def test_a_key_length_past_1024_is_named_by_its_flag(
    capsys: pytest.CaptureFixture[str], measure: list[str]
) -> None:
    """Exit 2 with the flag's words; the closed port is never tried (that would exit 1)."""
    with pytest.raises(SystemExit) as exited:
        main(["plan", "--rps", "1", "--key-length", "2000", *measure])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        "ratewarden plan: error: argument --key-length: --key-length '2000' must be a whole "
        "number >= 1, at most 1,024; see ratewarden plan --help"
    )


def test_the_help_states_the_range(capsys: pytest.CaptureFixture[str]) -> None:
    """``--help`` says 1 to 1,024."""
    with pytest.raises(SystemExit):
        main(["plan", "--help"])
    assert "characters in a key, 1 to 1,024" in " ".join(capsys.readouterr().out.split())
