"""``on_failure`` is None or a callable: anything else is a ConfigurationError raised by the
call, not a hook that fails, in a log line, only when the store is down."""

from __future__ import annotations

import asyncio
import socket

import pytest

from ratewarden import (
    AsyncLimiter,
    ConfigurationError,
    Limiter,
    MemoryStore,
    Rate,
    TwoTier,
)
from ratewarden.hotkeys import CellLimiter
from ratewarden.storage.memory import AsyncMemoryStore
from ratewarden.storage.redis import RedisStore
from ratewarden.testing import ManualClock

RATE = Rate.parse("10/minute")
REFUSED = r"on_failure 3 must be callable \(it is told the store's exception"


def _shut_port() -> int:
    """A loopback port nothing listens on (bound, then closed): every connection is refused."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port


@pytest.mark.parametrize(
    "build",
    [
        lambda: Limiter(MemoryStore(), failure_mode="open"),
        lambda: TwoTier(MemoryStore()),
        lambda: Limiter(MemoryStore(), negative_cache=10),
    ],
    ids=["failure-mode", "two-tier", "negative-cache"],
)
def test_a_limiter_with_an_in_process_part_refuses_it_on_every_call(build: object) -> None:
    """The store is up: the call is refused all the same, and nothing is consumed."""
    limiter = build()  # type: ignore[operator]
    with pytest.raises(ConfigurationError, match=REFUSED):
        limiter.hit("k", RATE, on_failure=3)
    assert limiter.peek("k", RATE).remaining == 10


def test_the_asyncio_twin_refuses_it_the_same_way() -> None:
    """AsyncLimiter's hit is the same flow: the same refusal."""

    async def scenario() -> None:
        limiter = AsyncLimiter(AsyncMemoryStore(), failure_mode="closed")
        with pytest.raises(ConfigurationError, match=r"on_failure 'x' must be callable"):
            await limiter.hit("k", RATE, on_failure="x")  # type: ignore[arg-type]

    asyncio.run(scenario())


def test_an_adapter_passing_a_calls_failure_mode_refuses_it() -> None:
    """CellLimiter hands hit's failure_mode and on_failure to its plain limiter's flow."""
    cells = CellLimiter(MemoryStore(), 3)
    with pytest.raises(ConfigurationError, match=REFUSED):
        cells.hit("k", RATE, failure_mode="open", on_failure=3)  # type: ignore[arg-type]


def test_a_plain_limiter_in_an_outage_answers_and_logs_the_refusal(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A plain limiter's hit is the store's one call and reads on_failure only when that call
    fails (its hot path does not look at it). An outage must not turn into an exception for
    every request: the failure mode answers, and the refusal is logged as the failing hook."""
    store = RedisStore.from_url(f"redis://127.0.0.1:{_shut_port()}/0", timeout=0.05)
    limiter = Limiter(store, clock=ManualClock())
    try:
        for _ in range(2):
            decision = limiter.hit("k", RATE, failure_mode="open", on_failure=3)  # type: ignore[arg-type]
            assert decision.allowed and decision.degraded == "open"
    finally:
        store.close()
    refusals = [r for r in caplog.records if "on_failure hook failed" in r.getMessage()]
    assert len(refusals) == 2
    assert refusals[0].exc_info is not None
    assert "on_failure 3 must be callable" in str(refusals[0].exc_info[1])


def test_a_callable_hook_is_still_told_each_failure() -> None:
    """The check leaves a real hook alone: in an outage it is told the error, and the failure
    mode answers."""
    told: list[Exception] = []
    store = RedisStore.from_url(f"redis://127.0.0.1:{_shut_port()}/0", timeout=0.05)
    limiter = Limiter(store, failure_mode="open", clock=ManualClock())
    try:
        decision = limiter.hit("k", RATE, on_failure=told.append)
    finally:
        store.close()
    assert decision.allowed and decision.degraded == "open"
    assert len(told) == 1
