"""Load shedding: batch goes before normal, critical is never shed inside its reserve."""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import pytest

from ratewarden import AsyncLimiter, ConfigurationError, Limiter
from ratewarden.budgets import (
    DEFAULT_POLICY,
    AsyncFleetShedder,
    FleetShedder,
    LoadShedder,
    ShedPolicy,
)
from tests.budgets.conftest import Harness, settle


def test_reported_utilization_sheds_lowest_classes_first() -> None:
    """As utilization rises, test drops first, then batch, then normal; critical stays below 1."""
    level = [0.0]
    shedder = LoadShedder(lambda: level[0])
    first_drop = {}
    for step in range(0, 121):
        level[0] = step / 100
        for name, _ in DEFAULT_POLICY.classes:
            if name not in first_drop and not shedder.admit(name):
                first_drop[name] = level[0]
    assert first_drop["test"] < first_drop["batch"] < first_drop["normal"] < first_drop["critical"]
    assert first_drop["critical"] == 1.0  # never shed while under capacity
    assert first_drop["normal"] == pytest.approx(1 - DEFAULT_POLICY.reserve)


async def test_fleet_in_flight_fills_by_class_and_keeps_critical_reserve(
    stores: Callable[..., Harness],
) -> None:
    """Capacity 10: batch gets 6 slots, normal 2 more, critical the last 2; all fleet-wide."""
    h = stores()
    limiter: Any = AsyncLimiter(h.store) if h.is_async else Limiter(h.store)
    cls = AsyncFleetShedder if h.is_async else FleetShedder
    shedder = cls(limiter, "api", 10)
    leases = []

    async def take(traffic_class: str) -> bool:
        decision, lease = await settle(shedder.acquire(traffic_class))
        if decision:
            leases.append(lease)
        return bool(decision)

    assert [await take("batch") for _ in range(7)] == [True] * 6 + [False]
    assert not await take("test")  # 6 in flight is above test's 40 %
    assert [await take("normal") for _ in range(3)] == [True, True, False]
    assert not await take("batch")  # batch is dropped while normal is still admitted...
    assert [await take("critical") for _ in range(3)] == [True, True, False]
    await settle(shedder.release(leases.pop()))  # a critical request finishes
    assert not await take("normal")  # ...and the freed reserve slot is critical's alone
    assert await take("critical")
    for lease in leases:
        await settle(shedder.release(lease))
    assert await take("test")


def test_shed_policy_and_shedder_configuration_errors() -> None:
    """Ceilings must start at 1.0 and fall; unknown classes and bad signals are errors."""
    for classes in (
        (("critical", 1.0),),
        (("critical", 0.9), ("normal", 0.5)),
        (("critical", 1.0), ("normal", 1.0)),
        (("critical", 1.0), ("normal", 0.5), ("batch", 0.7)),
        (("critical", 1.0), ("critical", 0.5)),
        (("critical", 1.0), ("normal", 0)),
    ):
        with pytest.raises(ConfigurationError, match="classes"):
            ShedPolicy(classes)
    shedder = LoadShedder(lambda: float("nan"))
    with pytest.raises(ConfigurationError):
        shedder.admit("normal")
    with pytest.raises(ConfigurationError):
        LoadShedder(lambda: 0.1).admit("vip")
    with pytest.raises(ConfigurationError):
        FleetShedder(Limiter(), "api", 2)  # test's 40 % of 2 slots rounds to none
    with pytest.raises(ConfigurationError):
        FleetShedder(Limiter(), "api", 10).acquire("vip")


def test_a_shed_policy_takes_its_classes_as_a_mapping_in_its_order() -> None:
    """``{"critical": 1.0, "batch": 0.5}`` is the pairs ``(("critical", 1.0), ("batch", 0.5))``."""
    policy = ShedPolicy({"critical": 1.0, "batch": 0.5})
    assert policy == ShedPolicy((("critical", 1.0), ("batch", 0.5)))
    assert policy.classes == (("critical", 1.0), ("batch", 0.5))
    assert policy.ceiling("batch") == 0.5 and policy.reserve == 0.5
    assert ShedPolicy(dict(DEFAULT_POLICY.classes)) == DEFAULT_POLICY
    assert ShedPolicy([["critical", 1], ["batch", 0.5]]).classes == (
        ("critical", 1),
        ("batch", 0.5),
    )
    with pytest.raises(ConfigurationError, match=re.escape("classes ceilings [0.5, 1.0]")):
        ShedPolicy({"batch": 0.5, "critical": 1.0})  # the order is the importance


@pytest.mark.parametrize(
    ("classes", "named"),
    [
        (["critical", "batch"], "classes item 'critical'"),
        ("critical", "classes 'critical'"),
        (None, "classes None"),
        (3, "classes 3"),
        ((("critical", 1.0, "x"), ("batch", 0.5)), "classes item ('critical', 1.0, 'x')"),
        ((("critical", 1.0), ("batch",)), "classes item ('batch',)"),
        ((("critical", 1.0), {"batch": 0.5}), "classes item {'batch': 0.5}"),
        ((("critical", 1.0), (2, 0.5)), "classes item (2, 0.5)"),
        ((("critical", 1.0), ("", 0.5)), "classes item ('', 0.5)"),
        ({"critical": 1.0, "batch": "half"}, "classes 'batch': ceiling 'half'"),
        ({"critical": 1.0, "batch": True}, "classes 'batch': ceiling True"),
        ({"critical": 1.0, "batch": 1.5}, "classes 'batch': ceiling 1.5"),
        ({"critical": 1.0}, "ShedPolicy: classes {'critical': 1.0}: a shed policy needs"),
    ],
    ids=repr,
)
def test_a_malformed_shed_policy_names_classes_and_the_item_at_fault(
    classes: Any, named: str
) -> None:
    """Not pairs, not a mapping, a bad name or ceiling: a ConfigurationError, never a ValueError."""
    with pytest.raises(ConfigurationError, match=re.escape(named)):
        ShedPolicy(classes)
