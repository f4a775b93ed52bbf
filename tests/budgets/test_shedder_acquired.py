"""A fleet shedder's acquire is true only when admitted, and still unpacks as (decision, lease).

Before, it gave a plain ``(ShedDecision, Lease)`` tuple, true even when denied, so
``if shedder.acquire("batch"):`` always passed. And a one-class ShedPolicy's error says
which classes it was given, as given.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import AsyncLimiter, ConfigurationError, Limiter
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, ShedPolicy
from tests.budgets.conftest import Harness, settle


async def test_acquire_is_false_when_shed_and_unpacks_as_the_pair(
    stores: Callable[..., Harness],
) -> None:
    """Capacity 10: six batch slots are true, the seventh false; each unpacks as
    (decision, lease) with the decision's allowed, and the lease releases."""
    h = stores()
    limiter: Any = AsyncLimiter(h.store) if h.is_async else Limiter(h.store)
    shedder = (AsyncFleetShedder if h.is_async else FleetShedder)(limiter, "api", 10)
    acquired = [await settle(shedder.acquire("batch")) for _ in range(7)]
    assert [bool(found) for found in acquired] == [True] * 6 + [False]
    assert [found.allowed for found in acquired] == [True] * 6 + [False]
    denied = acquired[-1]
    if denied:
        pytest.fail("a shed request's acquire is true")
    decision, lease = denied
    assert (decision.allowed, decision.traffic_class, lease.allowed) == (False, "batch", False)
    assert (denied.decision, denied.lease) == (decision, lease)
    assert denied == (decision, lease)  # still a tuple
    assert await settle(shedder.release(acquired[0].lease))
    assert await settle(shedder.acquire("batch"))  # the freed slot


@pytest.mark.parametrize(
    ("classes", "shown"),
    [({"critical": 1.0}, "{'critical': 1.0}"), ((("critical", 1.0),), "(('critical', 1.0),)")],
)
def test_a_one_class_policy_names_itself_and_the_classes_as_given(classes: Any, shown: str) -> None:
    """ShedPolicy({'critical': 1.0}): the error starts with ShedPolicy, shows the mapping as a
    mapping, and says what a policy needs."""
    with pytest.raises(ConfigurationError) as caught:
        ShedPolicy(classes)
    message = str(caught.value)
    assert message.startswith(
        f"ShedPolicy: classes {shown}: a shed policy needs at least two classes ("
    )
    assert "e.g. {'critical': 1.0, 'batch': 0.5}" in message
