"""Slot ttls and renewal intervals below what can work are refused, saying the floor."""

from __future__ import annotations

from typing import Any

import pytest

from ratewarden import AsyncLimiter, ConfigurationError, Limiter, MemoryStore
from ratewarden.budgets import AsyncFleetShedder, FleetShedder, aheld_slot, held_slot


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ({"ttl": 1e-9}, r"held_slot: lease ttl 1e-09 is too short: at least 0\.001 s \(1 ms\)"),
        ({"ttl": 0.0009}, r"held_slot: lease ttl 0\.0009 is too short"),
        (
            {"ttl": 5, "renew_every": 1e-4},
            r"held_slot: renew_every 0\.0001 renews every 0\.0001 s, under the least of 0\.01 s",
        ),
        ({"ttl": 0.02}, r"held_slot: ttl 0\.02 renews every 0\.00667 s, under the least of"),
    ],
    ids=["ttl-1ns", "ttl-under-1ms", "renew-every-100us", "default-renewal-too-fast"],
)
def test_held_slot_refuses_a_lease_that_lapses_or_a_renewal_that_busy_loops(
    options: dict[str, Any], expected: str
) -> None:
    """ttl=1e-9 lapsed at once and renewed every 3e-10 s; renew_every=1e-4 renewed 10,000
    times a second: both were taken before. Nothing is acquired when refused."""
    limiter = Limiter(MemoryStore())
    with pytest.raises(ConfigurationError, match=expected), held_slot(limiter, "k", 1, **options):
        pass
    assert limiter.acquire_slot("k", 1, ttl=1)  # nothing was taken


async def test_aheld_slot_refuses_the_same() -> None:
    """The asyncio twin has the same floors, named as itself."""
    with pytest.raises(ConfigurationError, match=r"aheld_slot: renew_every 0\.001 renews"):
        async with aheld_slot(AsyncLimiter(), "k", 1, ttl=1, renew_every=0.001):
            pass


def test_the_floors_leave_the_shortest_sensible_options() -> None:
    """1 ms is a lease (not renewed), and 0.03 s renews every 0.01 s by default."""
    limiter = Limiter(MemoryStore())
    assert limiter.acquire_slot("a", 1, ttl=0.001)
    with held_slot(limiter, "b", 1, ttl=0.03) as held:
        assert held


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        (
            lambda: Limiter().acquire_slot("k", 1, ttl=1e-6),
            r"^Limiter\.acquire_slot: lease ttl 1e-06 is too short",
        ),
        (
            lambda: FleetShedder(Limiter(), "api", 10, ttl=0.0005),
            r"^FleetShedder ttl: lease ttl 0\.0005 is too short: at least 0\.001 s",
        ),
        (
            lambda: AsyncFleetShedder(AsyncLimiter(), "api", 10, ttl=1e13),
            r"^AsyncFleetShedder ttl: lease ttl 10000000000000\.0 is too long",
        ),
    ],
    ids=["acquire-slot", "fleet-shedder-short", "fleet-shedder-long"],
)
def test_a_slot_lease_under_1_ms_is_refused_everywhere(build: Any, expected: str) -> None:
    """The limiter's acquire_slot and a fleet shedder (when built) share the 1 ms floor; the
    shedder also refuses a ttl past a year when built, not at its first acquire."""
    with pytest.raises(ConfigurationError, match=expected):
        build()
