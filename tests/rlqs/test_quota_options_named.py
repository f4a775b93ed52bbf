"""QuotaService names the one option that is wrong, with its rule, as a ConfigurationError
(a ValueError too), rather than every rule with the values filled in."""

from __future__ import annotations

import pytest

from ratewarden import ConfigurationError
from ratewarden.server.config import loads
from ratewarden.server.rlqs.quota import QuotaService
from ratewarden.testing import ManualClock

RULES = """
domain: d
descriptors:
  - key: k
    rate_limit: {unit: second, requests_per_unit: 1}
"""


@pytest.mark.parametrize(
    ("options", "said"),
    [
        ({"idle_s": 0}, "idle_s 0 must be seconds above 0"),
        ({"interval": float("nan")}, "interval nan must be seconds above 0"),
        ({"interval": "1"}, "interval '1' must be seconds above 0"),
        ({"ttl_s": 5.5}, "ttl_s 5.5 must be a whole number >= 1"),
        ({"history": 0}, "history 0 must be a whole number >= 1"),
        ({"change_rounds": True}, "change_rounds True must be a whole number >= 1"),
        ({"chunk": 0}, "chunk 0 must be a whole number >= 1"),
        ({"ttl_s": 2, "interval": 2.0}, "ttl_s 2 must be above interval 2.0"),
    ],
)
def test_the_wrong_option_is_named_alone(options: dict[str, object], said: str) -> None:
    """Each message names one option, its value and its rule, and nothing else."""
    with pytest.raises(ConfigurationError) as raised:
        QuotaService(loads(RULES), clock=ManualClock(), **options)  # type: ignore[arg-type]
    assert str(raised.value) == f"QuotaService: {said}"
    assert isinstance(raised.value, ValueError)


def test_the_defaults_are_taken() -> None:
    """No option given: a service, with the documented defaults."""
    quota = QuotaService(loads(RULES), clock=ManualClock())
    assert (quota.interval, quota.ttl_s, quota.idle_s, quota.chunk) == (1.0, 5, 60.0, 200)
