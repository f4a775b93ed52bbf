"""HotKeyLimiter.hit takes Limiter.hit's keywords (shadow, failure_mode, on_failure) and hands
them to whichever limiter decides: the plain limiter for an ordinary key, the cells or the
TwoTier's leases for a hot one; blocking and asyncio alike."""

from __future__ import annotations

import inspect
from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest
import redis
import redis.asyncio as aredis

from ratewarden import Rate
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.hotkeys import (
    AsyncCellLimiter,
    AsyncHotKeyLimiter,
    CellLimiter,
    HotKeyDetector,
    HotKeyLimiter,
)
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.testing import ManualClock
from ratewarden.tiers import AsyncTwoTier, TwoTier
from tests._servers import HOST, RedisServer

pytestmark = [pytest.mark.redis, pytest.mark.cluster]

#: Three a minute: one unit per cell on 3 cells; frozen time never refills it.
RATE = Rate(3, 60)
PATHS = ["ordinary", "cells", "leases"]
TWINS = ["blocking", "asyncio"]


def hot_limiter(store: Any, twin: str, path: str, **options: Any) -> Any:
    """A (Async)HotKeyLimiter on ``store`` whose key ``tenant:big`` goes by ``path``: ordinary
    (no hot key), cells (3), or leases (a TwoTier with lease=2)."""
    asyncio = twin == "asyncio"
    if path == "leases":
        mitigation: Any = (AsyncTwoTier if asyncio else TwoTier)(store, lease=2)
    else:
        mitigation = (AsyncCellLimiter if asyncio else CellLimiter)(store, 3, **options)
    hot = [] if path == "ordinary" else ["tenant:big"]
    return (AsyncHotKeyLimiter if asyncio else HotKeyLimiter)(store, mitigation, hot_keys=hot)


async def answer(call: Callable[[], Any]) -> Any:
    """What ``call()`` gives, awaited when it is the asyncio twin's coroutine."""
    found = call()
    return await found if inspect.isawaitable(found) else found


@pytest.fixture(params=TWINS)
async def cluster_store(
    request: pytest.FixtureRequest,
    cluster_client: redis.RedisCluster,
    async_client: aredis.RedisCluster,
) -> AsyncIterator[tuple[str, Any]]:
    """(twin, a store of that twin on the emptied 3-primary Cluster, in frozen time)."""
    if request.param == "blocking":
        yield "blocking", RedisStore(cluster_client, clock=ManualClock(), timeout=1.0)
        return
    store = AsyncRedisStore(async_client, clock=ManualClock(), timeout=1.0)
    yield "asyncio", store
    await store.aclose()


@pytest.fixture(params=TWINS)
async def down_store(
    request: pytest.FixtureRequest, make_redis: Callable[..., RedisServer]
) -> AsyncIterator[tuple[str, Any]]:
    """(twin, a store of that twin on a redis-server that has been stopped): every call fails."""
    server = make_redis()
    url = server.url
    server.stop()
    if request.param == "blocking":
        store: Any = RedisStore.from_url(url, clock=ManualClock(), timeout=1.0)
        yield "blocking", store
        store.close()
        return
    store = AsyncRedisStore.from_url(url, clock=ManualClock(), timeout=1.0)
    yield "asyncio", store
    await store.aclose()


@pytest.mark.parametrize("path", PATHS)
async def test_shadow_reports_the_denials_enforcement_would_make(
    cluster_store: tuple[str, Any], path: str
) -> None:
    """shadow=True on every path: the three units are admitted as usual, then each request
    is allowed and shadowed; without shadow the same key is denied."""
    twin, store = cluster_store
    limiter = hot_limiter(store, twin, path)
    seen = [await answer(lambda: limiter.hit("tenant:big", RATE, shadow=True)) for _ in range(6)]
    assert [d.allowed for d in seen] == [True] * 6
    assert [d.shadowed for d in seen] == [False] * 3 + [True] * 3
    assert not (await answer(lambda: limiter.hit("tenant:big", RATE))).allowed


async def test_shadowed_cells_still_retry_the_next_cell(cluster_store: tuple[str, Any]) -> None:
    """On cells, a shadow request is decided as an enforced one would be: a cell's denial goes
    to the next cell (admitted there, not shadowed), and only the denial of both is shadowed.
    One key enforced and one in shadow, a picker that always picks cell 0: the shadowed ones
    are exactly the enforced key's denials."""
    twin, store = cluster_store
    limiter = hot_limiter(store, twin, "cells", picker=lambda cells: 0)
    limiter.hot_keys = frozenset({"tenant:big", "tenant:shadow"})
    enforced = [await answer(lambda: limiter.hit("tenant:big", RATE)) for _ in range(4)]
    shadowed = [
        await answer(lambda: limiter.hit("tenant:shadow", RATE, shadow=True)) for _ in range(4)
    ]
    assert [d.allowed for d in enforced] == [True, True, False, False]
    assert [d.shadowed for d in shadowed] == [not d.allowed for d in enforced]
    assert all(d.allowed for d in shadowed)


@pytest.mark.parametrize("path", PATHS)
async def test_failure_mode_and_on_failure_reach_the_deciding_limiter(
    down_store: tuple[str, Any], path: str
) -> None:
    """With the store down, failure_mode answers on every path ('closed' denies, 'open' admits,
    each marked degraded) and on_failure is told each failure; the TwoTier's own mode (open)
    is overridden by the call's. Without one, the plain limiter and the cells raise."""
    twin, store = down_store
    limiter = hot_limiter(store, twin, path)
    failures: list[Exception] = []
    closed = await answer(
        lambda: limiter.hit("tenant:big", RATE, failure_mode="closed", on_failure=failures.append)
    )
    assert (closed.allowed, closed.degraded) == (False, "closed")
    assert failures and all(isinstance(error, Exception) for error in failures)
    reported = len(failures)
    opened = await answer(
        lambda: limiter.hit("tenant:big", RATE, failure_mode="open", on_failure=failures.append)
    )
    assert (opened.allowed, opened.degraded) == (True, "open")
    assert len(failures) > reported
    if path == "leases":
        assert (await answer(lambda: limiter.hit("tenant:big", RATE))).degraded == "open"
    else:
        with pytest.raises(StorageUnavailableError):
            await answer(lambda: limiter.hit("tenant:big", RATE))


@pytest.mark.parametrize("twin", TWINS)
async def test_a_bad_failure_mode_is_refused_before_the_detector_counts(twin: str) -> None:
    """failure_mode='sideways' is a ConfigurationError naming it, and the detector has not
    counted the request (bad input changes nothing)."""
    store: Any = (AsyncRedisStore if twin == "asyncio" else RedisStore).from_url(
        f"redis://{HOST}:1/0"
    )
    detector = HotKeyDetector(1, clock=ManualClock())
    mitigation: Any = (AsyncCellLimiter if twin == "asyncio" else CellLimiter)(store, 3)
    kind: Any = AsyncHotKeyLimiter if twin == "asyncio" else HotKeyLimiter
    limiter = kind(store, mitigation, detector=detector)
    with pytest.raises(ConfigurationError, match="failure_mode 'sideways' must be one of"):
        await answer(lambda: limiter.hit("tenant:big", RATE, failure_mode="sideways"))
    assert detector.rate("tenant:big").rate == 0


@pytest.mark.parametrize("twin", TWINS)
async def test_cells_do_not_cache_a_denial_the_failure_mode_made(
    twin: str, make_redis: Callable[..., RedisServer]
) -> None:
    """With the store down and failure_mode='local', the in-process buckets deny the hot key's
    fourth request; that denial says nothing of the cells' state on the store, so once the
    store is back (the same port) the next request is the store's to decide: admitted."""
    server = make_redis()
    port = server.port
    server.stop()
    asyncio = twin == "asyncio"
    kind: Any = AsyncRedisStore if asyncio else RedisStore
    store = kind.from_url(f"redis://{HOST}:{port}/0", clock=ManualClock(), timeout=1.0)
    limiter = hot_limiter(store, twin, "cells")
    failures: list[Exception] = []
    local = [
        await answer(
            lambda: limiter.hit(
                "tenant:big", RATE, failure_mode="local", on_failure=failures.append
            )
        )
        for _ in range(4)
    ]
    assert [(d.allowed, d.degraded) for d in local] == [(True, "local")] * 3 + [(False, "local")]
    assert len(failures) == 5  # one per cell asked: the fourth request asked two
    make_redis(port=port)
    back = await answer(lambda: limiter.hit("tenant:big", RATE, failure_mode="local"))
    assert (back.allowed, back.degraded) == (True, "")
    await answer(store.aclose if asyncio else store.close)
