"""``PlanInput.limit`` is checked on construction, as ``Region.rate`` is, and a burst is refused
where the algorithm has none.

``PlanInput(limit="100/minute")`` was built without complaint, then ``plan()`` raised
``AttributeError: 'str' object has no attribute 'limit'``. And ``--algorithm fixed_window
--burst 50`` (or ``PlanInput(algorithm="fixed_window", limit=Rate.parse("600/minute",
burst=50))``) was accepted with a failover bound of 51, where a fixed window may admit all 600 at
once; only ``--measure`` refused it, with the library's message. Now the plan asks the
algorithm's own check (the one ``hit`` runs), from code and from the command line alike.
"""

from __future__ import annotations

import re

import pytest

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.plan import PlanInput, plan
from ratewarden.rate import Rate

NO_BURST = ("fixed_window", "sliding_window", "sliding_log")
LIBRARY_SAYS = (
    "has no separate burst; drop the burst or use a bucket algorithm "
    "(gcra, token_bucket, leaky_bucket)"
)


@pytest.mark.parametrize("limit", ["100/minute", 100, None])
def test_a_limit_that_is_not_a_rate_is_refused_on_construction(limit: object) -> None:
    """A ConfigurationError naming the field and the value, and saying what a Rate is."""
    with pytest.raises(ConfigurationError) as refused:
        PlanInput(rps=10, limit=limit)  # type: ignore[arg-type]
    assert str(refused.value) == (
        f"limit {limit!r} must be a Rate, such as Rate.parse('100/minute', burst=10)"
    )


@pytest.mark.parametrize("algorithm", NO_BURST)
def test_a_burst_is_refused_where_the_algorithm_has_none(algorithm: str) -> None:
    """The library's own message (the one ``hit`` raises), on construction."""
    with pytest.raises(ConfigurationError, match=re.escape(LIBRARY_SAYS)) as refused:
        PlanInput(rps=10, algorithm=algorithm, limit=Rate.parse("600/minute", burst=50),
                  replication_lag_ms=100)  # fmt: skip
    assert f"the {algorithm} algorithm counts 600 per" in str(refused.value)


@pytest.mark.parametrize("algorithm", NO_BURST)
def test_a_burst_equal_to_the_limit_is_no_separate_burst(algorithm: str) -> None:
    """``burst == limit`` is what the window algorithms count anyway: accepted, as ``hit`` does."""
    limit = Rate.parse("600/minute", burst=600)
    result = plan(PlanInput(rps=10, algorithm=algorithm, limit=limit, replication_lag_ms=100))
    assert result.over_admission["failover"] == 601


@pytest.mark.parametrize("algorithm", NO_BURST)
@pytest.mark.parametrize("measure", [[], ["--measure", "redis://127.0.0.1:1"]])
def test_the_command_refuses_a_burst_the_algorithm_has_not(
    capsys: pytest.CaptureFixture[str], algorithm: str, measure: list[str]
) -> None:
    """Exit 2 with the flag and the library's message, before any server is asked (the URL's
    closed port would exit 1)."""
    argv = ["plan", "--rps", "1", "--algorithm", algorithm, "--limit", "600/minute",
            "--burst", "50", "--replication-lag-ms", "100", *measure]  # fmt: skip
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    per = "period" if algorithm == "sliding_log" else "window"
    assert captured.err == (
        f"ratewarden plan: error: --burst 50: rate 600/minute (burst 50): the {algorithm} "
        f"algorithm counts 600 per {per} and {LIBRARY_SAYS}\n"
    )


def test_a_bucket_algorithm_keeps_its_burst(capsys: pytest.CaptureFixture[str]) -> None:
    """gcra takes the burst: the failover bound counts it (50 + 10/s x 0.1 s)."""
    argv = ["plan", "--rps", "1", "--limit", "600/minute", "--burst", "50",
            "--replication-lag-ms", "100"]  # fmt: skip
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "51 requests  50 capacity + 10/s x 0.1 s lag" in out
