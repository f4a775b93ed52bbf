"""checks.is_number: the one test behind every option given in seconds."""

from __future__ import annotations

import math

import pytest

from ratewarden import CircuitBreaker, ConfigurationError
from ratewarden.checks import is_number
from ratewarden.client import RetryPolicy
from ratewarden.headers import HeaderOptions


@pytest.mark.parametrize(
    ("value", "low", "low_ok", "expected"),
    [
        (1, 0.0, True, True),
        (0.5, 0.0, True, True),
        (0, 0.0, True, True),
        (0, 0.0, False, False),
        (-0.001, 0.0, True, False),
        (2, 2.0, False, False),
        (2.5, 2.0, False, True),
        (True, 0.0, True, False),
        (math.nan, 0.0, True, False),
        (math.inf, 0.0, True, False),
        (-math.inf, -1.0, True, False),
        ("1", 0.0, True, False),
        (None, 0.0, True, False),
        (10**400, 0.0, True, False),
        (10**300, 0.0, True, True),
    ],
)
def test_is_number(value: object, low: float, low_ok: bool, expected: bool) -> None:
    assert is_number(value, low, low_ok=low_ok) is expected


@pytest.mark.parametrize("value", [10**400, -(10**400), math.nan, True, "1"])
def test_options_in_seconds_refuse_what_is_no_number_with_their_own_message(
    value: object,
) -> None:
    """A value beyond any float is refused as clearly as NaN, not an OverflowError."""
    with pytest.raises(ConfigurationError, match="CircuitBreaker cooldown"):
        CircuitBreaker(cooldown=value)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match=r"RetryPolicy\.max_wait"):
        RetryPolicy(max_wait=value)  # type: ignore[arg-type]
    with pytest.raises(ConfigurationError, match="HeaderOptions retry_jitter"):
        HeaderOptions(retry_jitter=value)  # type: ignore[arg-type]
