"""Two fleets of reconciled budgets on equal setups (the blocking and the asyncio twin, or the
same twin on Redis and in this process), stepped together; their answers made comparable (an
error as its type and message, the class names made one); and the random sequences they run."""

from __future__ import annotations

import inspect
import random
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from typing import Any

from ratewarden.decision import Decision
from ratewarden.rate import Rate
from ratewarden.regions import PeerView, SyncReport
from ratewarden.testing import ManualClock
from tests.faults._proxy import Fault
from tests.regions._traffic import AsyncFleet, Fleet, build_async_fleet, build_fleet
from tests.regions.conftest import Region

#: One step of a sequence: ("hit", region, key, rate, cost), ("advance", seconds),
#: ("sync" | "fetch" | "apply", region), ("fault" | "heal", region).
Step = tuple[Any, ...]
#: Any fleet: ``Fleet`` or ``AsyncFleet``.
AnyFleet = Fleet | AsyncFleet


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


async def call(method: Callable[..., Any], *args: Any) -> tuple[str, Any]:
    """``answer`` of ``method(*args)``, awaited when it returns an awaitable (an asyncio twin)."""
    try:
        result = method(*args)
        if inspect.isawaitable(result):
            result = await result
        return ("ok", result)
    except Exception as exc:
        return failure(exc)


def failure(exc: Exception) -> tuple[str, Any]:
    """An error as compared across twins: its type and message, the class names made one."""
    return (type(exc).__name__, str(exc).replace("AsyncReconciledBudget", "ReconciledBudget"))


class Twins:
    """Two fleets, stepped together; ``pending`` holds each one's fetched, unapplied views."""

    def __init__(
        self, regions: dict[str, Region], clock: ManualClock, first: AnyFleet, second: AnyFleet
    ) -> None:
        self.regions = regions
        self.clock = clock
        self.first = first
        self.second = second
        self.pending: dict[str, tuple[PeerView, PeerView]] = {}

    async def step(self, step: Step) -> tuple[tuple[str, Any], tuple[str, Any]]:
        """Run ``step`` on the first fleet, then on the second: both answers."""
        kind = step[0]
        if kind in ("advance", "fault", "heal"):
            self._world(step)
            return ("ok", None), ("ok", None)
        region = step[1]
        one: Any = self.first.budgets[region]
        two: Any = self.second.budgets[region]
        if kind == "hit":
            _, _, key, rate, cost = step
            return await call(one.hit, key, rate, cost), await call(two.hit, key, rate, cost)
        if kind == "sync":
            return await call(one.sync), await call(two.sync)
        if kind == "fetch":
            got = await call(one.fetch), await call(two.fetch)
            if got[0][0] == got[1][0] == "ok":
                self.pending[region] = (got[0][1], got[1][1])
            return got
        views = self.pending.pop(region, None)
        if views is None:  # the fetch failed (alike in both, or the test has failed already)
            return ("no view", None), ("no view", None)
        return await call(one.apply, views[0]), await call(two.apply, views[1])

    def _world(self, step: Step) -> None:
        if step[0] == "advance":
            self.clock.advance(step[1])
        else:
            fault = Fault.RESET if step[0] == "fault" else Fault.NONE
            link = self.regions[step[1]].link
            assert link is not None, f"region {step[1]} has no link to fault"
            link.set_fault(fault)


def build_twins(
    regions: dict[str, Region], rates: Mapping[str, Rate], clock: ManualClock, **options: Any
) -> Twins:
    """Both fleets on ``regions``: the blocking one under the prefix ``s``, the asyncio one
    under ``a``, peers' clients failing at once (no retries, which would differ in time)."""
    sync = build_fleet(regions, rates, clock=clock, prefix="s", retries=0, **options)
    awaited = build_async_fleet(regions, rates, clock=clock, prefix="a", retries=0, **options)
    return Twins(regions, clock, sync, awaited)


def random_steps(
    seed: int, count: int, rates: Sequence[Rate | Sequence[Rate]], *, faults: bool = True
) -> Iterator[Step]:
    """A random mix of hits on global ``rates`` (each a Rate, or a layered limit's Rates;
    some over a cap or a budget, some of cost 0
    or past the limit), clock steps, rounds (whole, or fetched now and applied later) and,
    with ``faults``, links cut and healed."""
    rng = random.Random(seed)
    fetched: set[str] = set()
    cut: set[str] = set()
    for _ in range(count):
        region = rng.choice(("us", "eu", "ap"))
        roll = rng.random()
        if cut and roll < 0.08:  # a cut link heals within a dozen steps or so
            healed = rng.choice(sorted(cut))
            cut.discard(healed)
            yield ("heal", healed)
        elif roll < 0.55:
            cost = rng.choice((0, 1, 1, 1, 2, 3, 50))
            yield ("hit", region, rng.choice(("t1", "t2", "t3")), rng.choice(rates), cost)
        elif roll < 0.75:
            yield ("advance", rng.choice((0.01, 0.05, 0.2, 0.5, 1.0, 1.5, 7.0)))
        elif roll < 0.86:
            yield ("sync", region)
        elif roll < 0.97:
            yield ("apply" if region in fetched else "fetch", region)
            fetched ^= {region}
        elif faults and region not in cut:
            cut.add(region)
            yield ("fault", region)
    for region in sorted(fetched):
        yield ("apply", region)
    for region in sorted(cut):
        yield ("heal", region)


def labels(step: Step, answer: tuple[str, Any]) -> Iterator[str]:
    """What a step's answer shows, to count: an error's type, a denial, a round's kind."""
    status, outcome = answer
    if status != "ok":
        yield status
    elif isinstance(outcome, Decision):
        yield "allowed" if outcome.allowed else "denied"
    elif isinstance(outcome, SyncReport):
        yield "complete" if outcome.complete else "incomplete"
        if outcome.failed:
            yield "failed peer"
        if outcome.stale:
            yield "stale"
    else:
        yield step[0]
