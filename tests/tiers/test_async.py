"""AsyncTwoTier is TwoTier with an await: the same decisions for the same inputs; cancel-safe."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ratewarden import AsyncMemoryStore, Decision, MemoryStore, Rate
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, CircuitBreaker, TwoTier

RATES = (Rate.parse("10/minute"), Rate.parse("3/second", burst=2))

#: (key index, cost, microseconds to advance first)
Step = tuple[int, int, int]


@settings(max_examples=150, deadline=None)
@given(
    steps=st.lists(
        st.tuples(st.integers(0, 2), st.integers(0, 4), st.integers(0, 3_000_000)), max_size=60
    ),
    lease=st.one_of(st.none(), st.integers(1, 6)),
    local=st.one_of(st.none(), st.sampled_from([0.5, 1.0])),
    layered=st.booleans(),
)
def test_sync_and_async_twins_decide_alike(
    steps: list[Step], lease: int | None, local: float | None, layered: bool
) -> None:
    """Any sequence of keys, costs and time steps gives identical Decisions from both twins."""
    rates: Rate | tuple[Rate, ...] = RATES if layered else RATES[0]
    sync_clock, async_clock = ManualClock(), ManualClock()
    sync = TwoTier(MemoryStore(clock=sync_clock), lease=lease, local=local)
    twin = AsyncTwoTier(AsyncMemoryStore(clock=async_clock), lease=lease, local=local)

    async def run() -> list[Decision]:
        out = []
        for key, cost, advance in steps:
            async_clock.advance_us(advance)
            out.append(await twin.hit(f"k{key}", rates, cost))
        return out

    expected = []
    for key, cost, advance in steps:
        sync_clock.advance_us(advance)
        expected.append(sync.hit(f"k{key}", rates, cost))
    assert asyncio.run(run()) == expected
    assert sync.counts.as_dict() == twin.counts.as_dict()


class HangingStore(AsyncMemoryStore):
    """An AsyncMemoryStore whose hits never answer while ``hang`` is set (pure-logic test)."""

    def __init__(self, clock: ManualClock) -> None:
        super().__init__(clock=clock)
        self.hang = False

    async def hit(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision:
        if self.hang:
            await asyncio.Event().wait()
        return await super().hit(algorithm, key, rates, cost)


async def test_a_cancelled_probe_does_not_leave_the_breaker_stuck_half_open() -> None:
    """The half-open probe is cancelled mid-call; its place goes back and the next caller probes."""
    clock = ManualClock()
    store = HangingStore(clock)
    breaker = CircuitBreaker(failures=1, cooldown=1.0, clock=clock)
    tiers = AsyncTwoTier(store, breaker=breaker)
    breaker.allow()
    breaker.failure()  # opened by an earlier outage
    clock.advance(1.0)
    store.hang = True
    probe = asyncio.create_task(tiers.hit("k", RATES[0]))
    await asyncio.sleep(0)
    assert breaker.state == "half_open"
    assert (await tiers.hit("k", RATES[0])).degraded == "open"  # the probe's place is taken
    probe.cancel()
    with pytest.raises(asyncio.CancelledError):
        await probe
    store.hang = False
    decision = await tiers.hit("k", RATES[0])
    assert decision.degraded == "" and breaker.state == "closed"


async def test_many_tasks_on_one_key_stay_within_the_limit_with_leases() -> None:
    """200 concurrent tasks, leases of 8, 100/hour: exactly 100 admitted, none over."""
    clock = ManualClock()
    tiers = AsyncTwoTier(AsyncMemoryStore(clock=clock), lease=8)
    rate = Rate.parse("100/hour")
    decisions = await asyncio.gather(*(tiers.hit("k", rate) for _ in range(200)))
    assert sum(d.allowed for d in decisions) == 100
