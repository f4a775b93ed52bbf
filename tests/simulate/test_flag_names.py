"""Every bad value of a simulate flag is said as ``FLAG 'value': ...``, the prefix the other
flags' messages start with; ``--algorithm concurrency`` says where concurrency slots are."""

from __future__ import annotations

import pytest

from ratewarden.cli import main


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["--algorithm", "foo"],
            "--algorithm 'foo': unknown algorithm; choose one of: fixed_window, gcra, "
            "leaky_bucket, sliding_log, sliding_window, token_bucket",
        ),
        (["--bursts", "--algorithm", "foo"], "--algorithm 'foo': unknown algorithm;"),
        (["--layers", "10/second", "--algorithm", "foo"], "--algorithm 'foo': unknown algorithm;"),
        (
            ["--accuracy", "--model", "foo"],
            "--model 'foo': unknown traffic model; choose one of: poisson, onoff, pareto",
        ),
        (["--pattern", "foo"], "--pattern 'foo': unknown pattern 'foo'"),
        (["--pattern", "steady:load=x"], "--pattern 'steady:load=x': pattern steady: load="),
        (["--layers", "10/second", "--pattern", "foo"], "--pattern 'foo': unknown pattern"),
        (
            ["--region", "eu=10/second", "--region", "us=10/second", "--pattern", "eu=foo"],
            "--pattern 'eu=foo': unknown pattern 'foo'",
        ),
        (
            ["--region", "eu=10/second", "--region", "us=10/second", "--pattern", "foo"],
            "--pattern 'foo': unknown pattern 'foo'",
        ),
    ],
)
def test_a_bad_value_is_named_by_its_flag(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Exit 2, one line on stderr, starting with the flag and the value given."""
    assert main(["simulate", *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"ratewarden simulate: error: {message}")
    assert len(err.splitlines()) == 1


def test_concurrency_is_not_a_rate_algorithm_and_the_error_points_to_slots(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """``--algorithm concurrency`` (algorithms.md lists it beside the rates) is told, in the
    Limiter's words, that it is not a rate and that slot() holds concurrency slots."""
    assert main(["simulate", "--algorithm", "concurrency"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(
        "ratewarden simulate: error: --algorithm 'concurrency': concurrency is not a rate, "
        "so it is not an --algorithm: every limiter holds concurrency slots itself, with "
        "limiter.slot(key, limit, ttl=...)"
    )
    assert "(docs/algorithms.md#concurrency); --algorithm is one of: fixed_window, gcra" in err
