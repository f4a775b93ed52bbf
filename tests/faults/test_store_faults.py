"""The Redis stores under network faults: bounded, never a silent allow, and self-healing.

Each test runs steady load through a ``Limiter`` on a store built by
``from_url`` at the FaultProxy's port, in three phases: healthy, faulty, healthy
again. Every call returns a Decision or raises StorageUnavailableError within
``BOUND_S`` (checked per call in ``_load``). Afterwards the counter is read
directly from Redis: every hit a caller was told about is in it, and the
difference (hits Redis applied while the caller got an error) is measured.
"""

from __future__ import annotations

from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter, Rate
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from tests._servers import RedisServer
from tests.faults._load import TIMEOUT, Phase, arun, run
from tests.faults._proxy import Fault, FaultProxy

pytestmark = [pytest.mark.faults, pytest.mark.redis]

LIMIT = 1000
# Large enough that nothing is denied: every hit the store applies is visible.
RATE = Rate.parse(f"{LIMIT}/hour")

# (id, fault, latency, whether calls still decide during the fault)
FAULTS = [
    pytest.param(Fault.LATENCY, 0.005, True, id="latency-5ms"),
    pytest.param(Fault.LATENCY, 0.2, False, id="latency-200ms"),
    pytest.param(Fault.DROP, 0.0, False, id="drop"),
    pytest.param(Fault.RESET, 0.0, False, id="reset"),
    pytest.param(Fault.BLACKHOLE, 0.0, False, id="blackhole"),
]


def check_phases(
    before: Phase, during: Phase, recovery: Phase, after: Phase, decides: bool
) -> None:
    assert before.decided == before.calls, "the healthy phase must decide every call"
    if decides:
        # Small added latency stays inside the timeout; allow a scheduling hiccup or two
        # on a busy machine, but most calls must decide.
        assert during.decided >= during.calls * 0.9
    else:
        # No reply can come back in time, so no Decision may appear: no silent allow.
        assert during.decided == 0
        assert during.unavailable == during.calls
    # Normal service resumes by itself. The calls made right after the fault ends may
    # still ride on a connection attempt begun during it (``recovery``: one call, or
    # one batch in flight); every call after those decides.
    assert recovery.decided + recovery.unavailable == recovery.calls
    assert after.decided == after.calls


def measure_lost(
    server: RedisServer, clock: ManualClock, phases: list[Phase], during: Phase
) -> None:
    """Compare the counter in Redis (read directly) with what callers were told."""
    direct = Limiter(RedisStore.from_url(server.url, clock=clock, timeout=1.0))
    consumed = LIMIT - direct.peek("steady", RATE).remaining
    told = sum(phase.allowed for phase in phases)
    unanswered = sum(phase.unavailable for phase in phases)
    lost = consumed - told
    # Every answered hit is counted; only hits whose reply was lost may be extra.
    assert 0 <= lost <= unanswered
    during.charged_unanswered = lost


#: Per twin: the store, its limiter, how many calls each phase makes (before, during,
#: recovery, after) and how many of them are in flight at once. ``recovery`` is one call,
#: or one batch in flight: what may still ride on a connection begun during the fault.
TWINS = {
    "sync": (RedisStore, Limiter, (40, 30, 1, 39), 1),
    "async": (AsyncRedisStore, AsyncLimiter, (80, 64, 8, 72), 8),
}


@pytest.mark.parametrize(("fault", "latency", "decides"), FAULTS)
@pytest.mark.parametrize("twin", ["sync", "async"])
async def test_store_under_a_fault_is_bounded_and_recovers_by_itself(
    proxied_redis: tuple[RedisServer, FaultProxy],
    fault: Fault,
    latency: float,
    decides: bool,
    twin: str,
    request: pytest.FixtureRequest,
) -> None:
    """RedisStore (one call at a time) and AsyncRedisStore (8 hits in flight) through the
    proxy: bounded calls, no Decision without Redis, then normal service by itself."""
    server, proxy = proxied_redis
    store_class, limiter_class, counts, in_flight = TWINS[twin]
    # The fault's own id (the twin's comes first): "RedisStore latency-5ms" in the figures.
    name = f"{store_class.__name__} {request.node.callspec.id.removeprefix(twin + '-')}"
    clock = ManualClock()
    store: Any = store_class.from_url(proxy.url, clock=clock, timeout=TIMEOUT)
    limiter: Any = limiter_class(store)

    def hit() -> Any:
        return limiter.hit("steady", RATE)

    async def load(phase: str, calls: int) -> Phase:
        # The blocking store's calls run one after another on this thread, as in a program
        # without an event loop: nothing else is scheduled while one waits.
        if twin == "sync":
            return run(name, phase, hit, calls)
        return await arun(name, phase, hit, calls, in_flight)

    before_n, during_n, recovery_n, after_n = counts
    before = await load("before", before_n)
    proxy.set_fault(fault, latency)
    during = await load("during", during_n)
    proxy.set_fault(Fault.NONE)
    recovery = await load("recovery", recovery_n)
    after = await load("after", after_n)
    if twin == "sync":
        store.close()
    else:
        await store.aclose()
    check_phases(before, during, recovery, after, decides)
    measure_lost(server, clock, [before, during, recovery, after], during)
