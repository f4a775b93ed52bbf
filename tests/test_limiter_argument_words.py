"""A limiter method's refusals say what fits that method: reset(cost=) is not told about
peek's cost 0, and an empty lease id is refused as a lease id of 5 is (it was replaced by a
random one, so the same id could not renew the lease)."""

from __future__ import annotations

import pytest

from ratewarden import Limiter, Rate
from ratewarden.errors import ConfigurationError
from ratewarden.testing import ManualClock

RATE = Rate.parse("1/second")


def test_reset_given_a_cost_says_it_forgets_everything() -> None:
    """reset: 'it forgets all of the key's usage'; peek keeps its own words."""
    limiter = Limiter(clock=ManualClock())
    with pytest.raises(ConfigurationError) as caught:
        limiter.reset("k", RATE, cost=1)  # type: ignore[call-arg]
    assert str(caught.value) == (
        "Limiter.reset: unknown keyword 'cost'; it forgets all of the key's usage, however "
        "much was consumed; it takes key, rates"
    )
    with pytest.raises(ConfigurationError, match="a hit of cost 0"):
        limiter.peek("k", RATE, cost=1)  # type: ignore[call-arg]


@pytest.mark.parametrize("lease_id", ["", 5])
def test_an_empty_lease_id_is_refused_and_takes_no_slot(lease_id: object) -> None:
    """acquire_slot(lease_id="") is 'lease id '' must be a non-empty string', and no slot
    is taken."""
    limiter = Limiter(clock=ManualClock())
    with pytest.raises(ConfigurationError, match="must be a non-empty string"):
        limiter.acquire_slot("k", 1, lease_id=lease_id)  # type: ignore[arg-type]
    assert limiter.acquire_slot("k", 1).allowed
