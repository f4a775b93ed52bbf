"""Every public constructor that takes a store refuses a store class (``Limiter(RedisStore)``:
the ``()`` or the ``.from_url(url)`` forgotten) when it is built, saying so.

A class has its instances' methods, so the checks for ``hit`` (or ``begin``, ``budget_hit``)
took it: ``Limiter(RedisStore)`` then raised a bare AttributeError on ``clock``,
``Limiter(MemoryStore)`` blamed a clock the caller never gave (on the class, ``clock`` is a
property object), and ``AsyncSplitStore``, the idempotency middleware and ``DemandExchange``
took it and failed at their first call.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from ratewarden import AsyncLimiter, Limiter
from ratewarden.budgets import AsyncFairShare, AsyncTokenBudget, FairShare, TokenBudget
from ratewarden.errors import ConfigurationError
from ratewarden.hotkeys import AsyncCellLimiter, AsyncHotKeyLimiter, CellLimiter, HotKeyLimiter
from ratewarden.middleware.idempotency import IdempotencyMiddleware, WSGIIdempotencyMiddleware
from ratewarden.regions import DemandExchange
from ratewarden.server import config
from ratewarden.server.app import RateLimitServer
from ratewarden.server.budget_service import BudgetRateLimitService
from ratewarden.server.service import AsyncRateLimitService, RateLimitService
from ratewarden.server.settings import resolve
from ratewarden.storage.idempotency import (
    AsyncMemoryIdempotencyStore,
    AsyncRedisIdempotencyStore,
    MemoryIdempotencyStore,
    RedisIdempotencyStore,
)
from ratewarden.storage.memcache import AsyncMemcacheStore, MemcacheStore
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore
from ratewarden.storage.memory_regions import MemoryRegionStore
from ratewarden.storage.redis import AsyncRedisStore, RedisStore
from ratewarden.storage.split import AsyncSplitStore
from ratewarden.tiers import AsyncTwoTier, TwoTier

RULES = (
    "domain: edge\ndescriptors:\n  - key: k\n    rate_limit: {unit: second, requests_per_unit: 1}\n"
)
RATES = {"tokens": "1000/minute"}


def _app(*_: Any) -> None:
    """An app the middleware wraps; never called here."""


#: (public name, builder over a store) of the blocking constructors ...
BLOCKING: list[tuple[str, Callable[[Any], object]]] = [
    ("Limiter", Limiter),
    ("TwoTier", TwoTier),
    ("TokenBudget", lambda store: TokenBudget(store, RATES, max_output_tokens=0)),
    ("FairShare", lambda store: FairShare(store, "100/s", {"a": 1})),
    ("CellLimiter", lambda store: CellLimiter(store, 3)),
    ("HotKeyLimiter", lambda store: HotKeyLimiter(store, CellLimiter(MemoryStore(), 3))),
    ("RateLimitService", lambda store: RateLimitService(config.loads(RULES), store)),
]
#: ... and of the asyncio ones.
ASYNCIO: list[tuple[str, Callable[[Any], object]]] = [
    ("AsyncLimiter", AsyncLimiter),
    ("AsyncTwoTier", AsyncTwoTier),
    ("AsyncTokenBudget", lambda store: AsyncTokenBudget(store, RATES, max_output_tokens=0)),
    ("AsyncFairShare", lambda store: AsyncFairShare(store, "100/s", {"a": 1})),
    ("AsyncCellLimiter", lambda store: AsyncCellLimiter(store, 3)),
    (
        "AsyncHotKeyLimiter",
        lambda store: AsyncHotKeyLimiter(store, AsyncCellLimiter(AsyncMemoryStore(), 3)),
    ),
    ("AsyncRateLimitService", lambda store: AsyncRateLimitService(config.loads(RULES), store)),
    (
        "BudgetRateLimitService",
        lambda store: BudgetRateLimitService(store, domain="d", descriptor_key="k", rate="5/s"),
    ),
    ("AsyncSplitStore", lambda store: AsyncSplitStore(store, AsyncMemoryStore())),
    ("AsyncSplitStore", lambda store: AsyncSplitStore(AsyncMemoryStore(), store)),
]
#: The store classes of each kind, and how an instance of each is made.
BLOCKING_STORES = [
    (MemoryStore, "MemoryStore()"),
    (RedisStore, "RedisStore.from_url(url)"),
    (MemcacheStore, "MemcacheStore.from_url(url)"),
]
ASYNCIO_STORES = [
    (AsyncMemoryStore, "AsyncMemoryStore()"),
    (AsyncRedisStore, "AsyncRedisStore.from_url(url)"),
    (AsyncMemcacheStore, "AsyncMemcacheStore.from_url(url)"),
]


def _cases() -> list[Any]:
    cases = []
    for builders, stores in ((BLOCKING, BLOCKING_STORES), (ASYNCIO, ASYNCIO_STORES)):
        for owner, build in builders:
            for store, made in stores:
                cases.append(
                    pytest.param(owner, build, store, made, id=f"{owner}-{store.__name__}")
                )
    return cases


@pytest.mark.parametrize(("owner", "build", "store", "made"), _cases())
def test_a_store_class_is_refused_saying_to_pass_an_instance(
    owner: str, build: Callable[[Any], object], store: type, made: str
) -> None:
    """The constructor names itself, the class given, and how to make the instance."""
    with pytest.raises(ConfigurationError) as raised:
        build(store)
    said = str(raised.value)
    assert f"{owner}: " in said
    assert (
        f"is the class {store.__name__}, not a store; pass {made}, an instance, not the class"
        in said
    )


@pytest.mark.parametrize(("store", "made"), ASYNCIO_STORES)
def test_the_server_refuses_a_store_class(tmp_path: Path, store: type, made: str) -> None:
    """``RateLimitServer(settings, store=AsyncRedisStore)``: its service says so."""
    (tmp_path / "rules.yaml").write_text(RULES)
    settings = resolve({"config_paths": [str(tmp_path)], "reload_interval": "0"}, {})
    with pytest.raises(ConfigurationError) as raised:
        RateLimitServer(settings, store=store)  # type: ignore[arg-type]
    assert str(raised.value) == (
        f"AsyncRateLimitService: store is the class {store.__name__}, not a store; "
        f"pass {made}, an instance, not the class"
    )


def test_a_store_class_of_the_other_twin_is_refused_as_a_class_first() -> None:
    """``Limiter(AsyncMemoryStore)``: the missing ``()`` is the first thing to fix."""
    with pytest.raises(ConfigurationError) as raised:
        Limiter(AsyncMemoryStore)
    assert str(raised.value) == (
        "Limiter: store is the class AsyncMemoryStore, not a store; pass AsyncMemoryStore(), "
        "an instance, not the class"
    )


def test_a_limiter_class_given_as_the_store_is_refused_as_a_limiter() -> None:
    """``TwoTier(Limiter)``: limiters do not nest, class or instance; not "pass Limiter()"."""
    with pytest.raises(ConfigurationError) as raised:
        TwoTier(Limiter)
    assert str(raised.value).startswith(
        "TwoTier: store is the class Limiter, not a store; give TwoTier the store itself"
    )


def test_a_class_that_is_no_store_at_all_is_named_as_a_class() -> None:
    """``Limiter(dict)``: the class is named, not its type (``a type``)."""
    with pytest.raises(ConfigurationError) as raised:
        Limiter(dict)
    assert (
        str(raised.value)
        == "Limiter: store is the class dict, not a store (it has no hit); pass a store"
    )


@pytest.mark.parametrize(
    ("build", "store", "owner"),
    [
        (IdempotencyMiddleware, AsyncMemoryIdempotencyStore, "IdempotencyMiddleware"),
        (IdempotencyMiddleware, AsyncRedisIdempotencyStore, "IdempotencyMiddleware"),
        (WSGIIdempotencyMiddleware, MemoryIdempotencyStore, "WSGIIdempotencyMiddleware"),
        (WSGIIdempotencyMiddleware, RedisIdempotencyStore, "WSGIIdempotencyMiddleware"),
    ],
)
def test_the_idempotency_middleware_refuses_an_idempotency_store_class(
    build: Callable[[Any, Any], object], store: type, owner: str
) -> None:
    """It was taken (the class has ``begin``) and failed at the first request."""
    with pytest.raises(ConfigurationError) as raised:
        build(_app, store)
    assert str(raised.value).startswith(
        f"{owner}: store is the class {store.__name__}, not an idempotency store; pass "
        f"{store.__name__}"
    )
    assert str(raised.value).endswith(", an instance, not the class")


def test_a_demand_exchange_refuses_a_region_store_class() -> None:
    """It raised an AttributeError on the class's ``prefix``."""
    with pytest.raises(ConfigurationError) as raised:
        DemandExchange("us", {"us": MemoryRegionStore(), "eu": MemoryRegionStore})  # type: ignore[dict-item]
    assert str(raised.value) == (
        "DemandExchange: the store of region 'eu' is the class MemoryRegionStore, not a store; "
        "pass MemoryRegionStore(), an instance, not the class"
    )
