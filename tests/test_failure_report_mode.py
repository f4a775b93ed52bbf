"""A ``FailureReport`` takes only a failure mode: anything else is refused as everywhere else."""

from __future__ import annotations

import pytest

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import FailureReport
from ratewarden.testing import ManualClock


@pytest.mark.parametrize("failure_mode", ["bogus", 3, "", "Open", None])
def test_a_value_that_is_no_failure_mode_is_refused(failure_mode: object) -> None:
    """It used to be taken and reported as the metric's ``failure_mode`` label; now the
    message is the one every other failure mode check gives."""
    with pytest.raises(ConfigurationError) as raised:
        FailureReport(failure_mode, name="api", clock=ManualClock())  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"failure_mode {failure_mode!r} must be one of open, closed, local"
    )


@pytest.mark.parametrize("failure_mode", ["open", "closed", "local"])
def test_every_failure_mode_is_taken(failure_mode: str) -> None:
    """The three modes are taken and kept as given."""
    report = FailureReport(failure_mode, name="api", clock=ManualClock())
    assert report.failure_mode == failure_mode
