"""``--max-utilization`` is below 100%: the primaries the plan says are needed can always
serve the calls, so the latency row under them is a figure, never "unbounded".

At 100% ``ceil(calls / (calls_per_primary x 1))`` sized the fleet to exactly rho = 1, where
the M/M/1 row printed "unbounded: 2 primaries cannot serve 20,000 calls/s" under "needed 2"
(finding 2 of the operator3 walk).
"""

from __future__ import annotations

import pytest

from ratewarden.cli import main
from ratewarden.errors import ConfigurationError
from ratewarden.plan import PlanInput, plan


@pytest.mark.parametrize("given", ["100%", "1", "1.0", "101%"])
def test_a_full_primary_is_refused_naming_the_flag_and_why(
    capsys: pytest.CaptureFixture[str], given: str
) -> None:
    """Exit 2, one line: the flag, the value as written, the range, and the queue's reason."""
    argv = ["plan", "--rps", "20000", "--calls-per-primary", "10000", "--max-utilization", given]
    with pytest.raises(SystemExit) as exited:
        main(argv)
    assert exited.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(
        f"ratewarden plan: error: argument --max-utilization: --max-utilization {given!r} must "
        "be above 0 and below 1 (or above 0% and below 100%): at 100% a primary's queue grows "
        "without bound"
    )


def test_plan_input_refuses_a_full_primary_alike() -> None:
    """The library's PlanInput refuses what the flag refuses."""
    with pytest.raises(
        ConfigurationError, match=r"max_utilization 1\.0 must be a share above 0 to below 1"
    ):
        PlanInput(rps=20_000, calls_per_primary=10_000, max_utilization=1.0)


@pytest.mark.parametrize("utilization", [0.5, 0.9, 0.9999, 0.999999])
def test_the_primaries_needed_always_give_a_latency(utilization: float) -> None:
    """Sized by the plan (no --primaries), rho stays at most the utilization asked for."""
    result = plan(
        PlanInput(rps=20_000, calls_per_primary=10_000, max_utilization=utilization, rtt_ms=0.5)
    )
    assert result.latency_ms is not None and result.latency_ms < float("inf")
    assert result.primaries_needed is not None
    assert 20_000 / (result.primaries_needed * 10_000) <= utilization
