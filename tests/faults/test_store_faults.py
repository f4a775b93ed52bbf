"""The Redis stores under network faults: bounded, never a silent allow, and self-healing.

Each test runs steady load through a ``Limiter`` on a store built by
``from_url`` at the FaultProxy's port, in three phases: healthy, faulty, healthy
again. Every call returns a Decision or raises StorageUnavailableError within
``BOUND_S`` (checked per call in ``_load``). Afterwards the counter is read
directly from Redis: every hit a caller was told about is in it, and the
difference (hits Redis applied while the caller got an error) is measured.
"""

from __future__ import annotations

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


@pytest.mark.parametrize(("fault", "latency", "decides"), FAULTS)
def test_sync_store_under_a_fault_is_bounded_and_recovers_by_itself(
    proxied_redis: tuple[RedisServer, FaultProxy],
    fault: Fault,
    latency: float,
    decides: bool,
    request: pytest.FixtureRequest,
) -> None:
    """RedisStore through the proxy: bounded calls, no Decision without Redis, then normal."""
    server, proxy = proxied_redis
    name = f"RedisStore {request.node.callspec.id}"
    clock = ManualClock()
    store = RedisStore.from_url(proxy.url, clock=clock, timeout=TIMEOUT)
    limiter = Limiter(store)

    def hit() -> object:
        return limiter.hit("steady", RATE)

    before = run(name, "before", hit, 40)  # type: ignore[arg-type]
    proxy.set_fault(fault, latency)
    during = run(name, "during", hit, 30)  # type: ignore[arg-type]
    proxy.set_fault(Fault.NONE)
    recovery = run(name, "recovery", hit, 1)  # type: ignore[arg-type]
    after = run(name, "after", hit, 39)  # type: ignore[arg-type]
    store.close()
    check_phases(before, during, recovery, after, decides)
    measure_lost(server, clock, [before, during, recovery, after], during)


@pytest.mark.parametrize(("fault", "latency", "decides"), FAULTS)
async def test_async_store_under_a_fault_is_bounded_and_recovers_by_itself(
    proxied_redis: tuple[RedisServer, FaultProxy],
    fault: Fault,
    latency: float,
    decides: bool,
    request: pytest.FixtureRequest,
) -> None:
    """AsyncRedisStore through the proxy, 8 hits in flight: the same guarantees."""
    server, proxy = proxied_redis
    name = f"AsyncRedisStore {request.node.callspec.id}"
    clock = ManualClock()
    store = AsyncRedisStore.from_url(proxy.url, clock=clock, timeout=TIMEOUT)
    limiter = AsyncLimiter(store)

    def hit() -> object:
        return limiter.hit("steady", RATE)

    before = await arun(name, "before", hit, 80, 8)  # type: ignore[arg-type]
    proxy.set_fault(fault, latency)
    during = await arun(name, "during", hit, 64, 8)  # type: ignore[arg-type]
    proxy.set_fault(Fault.NONE)
    recovery = await arun(name, "recovery", hit, 8, 8)  # type: ignore[arg-type]
    after = await arun(name, "after", hit, 72, 8)  # type: ignore[arg-type]
    await store.aclose()
    check_phases(before, during, recovery, after, decides)
    measure_lost(server, clock, [before, during, recovery, after], during)
