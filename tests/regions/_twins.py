"""Both twins of a reconciled budget on equal setups, stepped together, and their answers
made comparable (an error as its type and message, the class names made one)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from ratewarden.rate import Rate
from ratewarden.regions import PeerView
from ratewarden.testing import ManualClock
from tests.faults._proxy import Fault
from tests.regions._traffic import AsyncFleet, Fleet, build_async_fleet, build_fleet
from tests.regions.conftest import Region

#: One step of a sequence: ("hit", region, key, rate, cost), ("advance", seconds),
#: ("sync" | "fetch" | "apply", region), ("fault" | "heal", region).
Step = tuple[Any, ...]


def answer(call: Callable[[], Any]) -> tuple[str, Any]:
    """``("ok", what call returned)``, or ``failure`` of what it raised."""
    try:
        return ("ok", call())
    except Exception as exc:
        return failure(exc)


async def aanswer(call: Callable[[], Awaitable[Any]]) -> tuple[str, Any]:
    """``answer`` for a coroutine function."""
    try:
        return ("ok", await call())
    except Exception as exc:
        return failure(exc)


def failure(exc: Exception) -> tuple[str, Any]:
    """An error as compared across twins: its type and message, the class names made one."""
    return (type(exc).__name__, str(exc).replace("AsyncReconciledBudget", "ReconciledBudget"))


class Twins:
    """Both fleets, stepped together; ``pending`` holds each twin's fetched, unapplied views."""

    def __init__(
        self, regions: dict[str, Region], clock: ManualClock, sync: Fleet, awaited: AsyncFleet
    ) -> None:
        self.regions = regions
        self.clock = clock
        self.sync = sync
        self.awaited = awaited
        self.pending: dict[str, tuple[PeerView, PeerView]] = {}

    async def step(self, step: Step) -> tuple[tuple[str, Any], tuple[str, Any]]:
        """Run ``step`` on the blocking twin, then on the asyncio twin: both answers."""
        kind = step[0]
        if kind in ("advance", "fault", "heal"):
            self._world(step)
            return ("ok", None), ("ok", None)
        region = step[1]
        blocking, awaited = self.sync.budgets[region], self.awaited.budgets[region]
        if kind == "hit":
            _, _, key, rate, cost = step
            return (
                answer(lambda: blocking.hit(key, rate, cost)),
                await aanswer(lambda: awaited.hit(key, rate, cost)),
            )
        if kind == "sync":
            return answer(blocking.sync), await aanswer(awaited.sync)
        if kind == "fetch":
            got = answer(blocking.fetch), await aanswer(awaited.fetch)
            if got[0][0] == got[1][0] == "ok":
                self.pending[region] = (got[0][1], got[1][1])
            return got
        views = self.pending.pop(region, None)
        if views is None:  # the fetch failed (alike in both, or the test has failed already)
            return ("no view", None), ("no view", None)
        return (
            answer(lambda: blocking.apply(views[0])),
            await aanswer(lambda: awaited.apply(views[1])),
        )

    def _world(self, step: Step) -> None:
        if step[0] == "advance":
            self.clock.advance(step[1])
        else:
            fault = Fault.RESET if step[0] == "fault" else Fault.NONE
            self.regions[step[1]].link.set_fault(fault)


def build_twins(
    regions: dict[str, Region], rates: Mapping[str, Rate], clock: ManualClock, **options: Any
) -> Twins:
    """Both fleets on ``regions``: the blocking one under the prefix ``s``, the asyncio one
    under ``a``, peers' clients failing at once (no retries, which would differ in time)."""
    sync = build_fleet(regions, rates, clock=clock, prefix="s", retries=0, **options)
    awaited = build_async_fleet(regions, rates, clock=clock, prefix="a", retries=0, **options)
    return Twins(regions, clock, sync, awaited)
