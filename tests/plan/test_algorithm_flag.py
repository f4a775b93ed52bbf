"""``ratewarden plan --algorithm``: a bad value is named by its flag, as every plan flag's is."""

from __future__ import annotations

import pytest

from ratewarden.cli import main


def test_an_unknown_algorithm_is_named_by_its_flag(capsys: pytest.CaptureFixture[str]) -> None:
    """Exit 2, one line: ``--algorithm 'foo': unknown algorithm; choose one of: ...``."""
    assert main(["plan", "--rps", "100", "--algorithm", "foo"]) == 2
    assert capsys.readouterr().err == (
        "ratewarden plan: error: --algorithm 'foo': unknown algorithm; choose one of: "
        "fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket\n"
    )


def test_concurrency_is_told_it_is_not_a_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """``--algorithm concurrency``: not a rate; slots are held with limiter.slot()."""
    assert main(["plan", "--rps", "100", "--algorithm", "concurrency"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "ratewarden plan: error: --algorithm 'concurrency': concurrency is not a rate"
    )
    assert "limiter.slot(key, limit, ttl=...)" in err
