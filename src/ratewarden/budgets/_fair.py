"""FairShare / AsyncFairShare: weighted tenants sharing one pooled budget.

The algorithm (``ratewarden.algorithms.fair_share``): the pool is a GCRA at
rate ``P`` (the hard cap); each tenant also has its own GCRA at rate ``P``,
charged ``cost * W / w`` where ``W`` is the total weight of the tenants active
within ``active_window``. Busy tenants split ``P`` by weight; a tenant that
goes quiet leaves ``W`` after ``active_window`` and its share goes to the
others. One store step per decision (an ``Op`` run by the limiter's
``apply_flow``); every key of a pool shares the pool's hash tag, so on a Redis
Cluster a pool is one slot. The decision is a flow written once
(``_FairBase.hit_flow``); ``FairShare`` and ``AsyncFairShare`` are made of it
(``blocking`` / ``awaiting``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ratewarden.algorithms import NEVER, fair_share, gcra
from ratewarden.budgets._twins import L, OverStore, S
from ratewarden.budgets._values import us_to_s
from ratewarden.checks import check_key, keywords_checked
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import AsyncLimiter, Flow, Limiter, Op, awaiting, axis_key, blocking
from ratewarden.rate import Rate

if TYPE_CHECKING:
    # Named as strings in the shells' bases (types only: budgets import no store).
    from ratewarden.storage import AsyncStore, Store  # noqa: F401

__all__ = ["AsyncFairShare", "FairDecision", "FairShare"]

#: Largest weight a tenant may have (keeps ``cost * W`` exact in Lua doubles).
MAX_WEIGHT = 1_000_000

_KIND = "fair"
#: Pools whose keys a FairShare remembers before it starts again from empty.
_KEY_CACHE_SIZE = 4096


@dataclass(frozen=True, slots=True)
class FairDecision:
    """One fair-share decision.

    ``share`` is the tenant's fraction of the pool right now (``weight /
    active_weight``); ``charged`` what its own bucket was charged (``cost / share``,
    rounded up); ``remaining`` the pool's room left; ``retry_after`` seconds
    (``math.inf`` when the cost can never fit the tenant's current share).
    """

    allowed: bool
    tenant: str
    cost: int
    charged: int
    share: float
    active_weight: int
    remaining: int
    retry_after: float

    def __bool__(self) -> bool:
        return self.allowed


def _weight(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
        raise ConfigurationError(f"{what} {value!r} must be a whole number from 1 to {MAX_WEIGHT}")
    return value


class _FairBase(OverStore[S, L]):
    """The pool, the weights, the planning of the one store step and its flow; no I/O."""

    @keywords_checked
    def __init__(
        self,
        store: S,
        pool: Rate | str,
        weights: Mapping[str, int],
        *,
        default_weight: int = 1,
        active_window: float = 10.0,
    ) -> None:
        super().__init__(store)
        rate = Rate.parse(pool) if isinstance(pool, str) else pool
        if not isinstance(rate, Rate):
            raise ConfigurationError(
                f"pool {pool!r} must be a Rate or a string like '60000/minute'"
            )
        if not isinstance(weights, Mapping):
            raise ConfigurationError(f"weights {weights!r} must map tenant names to weights")
        self.pool = rate
        self.weights = {self._tenant(t): _weight(f"weight of {t!r}", w) for t, w in weights.items()}
        self.default_weight = _weight("default_weight", default_weight)
        if (
            isinstance(active_window, bool)
            or not isinstance(active_window, int | float)
            or not 0 < active_window < math.inf
        ):
            raise ConfigurationError(
                f"active_window {active_window!r} must be a positive number of seconds"
            )
        self.active_window = float(active_window)
        self._window_us = max(1, math.ceil(active_window * 1_000_000))
        self._params = gcra.params(rate)
        self._prefix: str = getattr(store, "prefix", "rw")
        # Keys of recent pools: (pool, tenant key without the tenant, active); escaping and
        # formatting them cost more than the store step's Python twin does.
        self._pool_keys: dict[str, tuple[str, str, str]] = {}

    @staticmethod
    def _tenant(tenant: object) -> str:
        if not isinstance(tenant, str) or not tenant:
            raise ConfigurationError(f"tenant {tenant!r} must be a non-empty string")
        return check_key(tenant)  # text every store can encode (no lone surrogates)

    def _op(self, pool_key: str, tenant: str, cost: int) -> Op:
        tenant = self._tenant(tenant)
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise ConfigurationError(f"cost {cost!r} must be a whole number >= 0")
        pool, tenants, active = self._keys(pool_key)
        keys = (pool, tenants + tenant, active)
        weight = self.weights.get(tenant, self.default_weight)
        args: tuple[int | str, ...] = ("", cost, *self._params, tenant, weight, self._window_us)
        return Op("fair_share", keys, args, fair_share.run)

    def _keys(self, pool_key: str) -> tuple[str, str, str]:
        found = self._pool_keys.get(pool_key) if type(pool_key) is str else None
        if found is None:
            prefix, rate = self._prefix, self.pool
            found = (
                axis_key(prefix, pool_key, _KIND, "pool", rate),
                axis_key(prefix, pool_key, _KIND, "tenant", rate) + ":",
                axis_key(prefix, pool_key, _KIND, "active", rate),
            )
            if len(self._pool_keys) >= _KEY_CACHE_SIZE:
                self._pool_keys.clear()
            self._pool_keys[pool_key] = found
        return found

    def hit_flow(self, pool_key: str, tenant: str, cost: int = 1) -> Flow[FairDecision]:
        """Admit ``cost`` units for ``tenant`` from the pool ``pool_key`` if its share allows."""
        reply = yield from self.limiter.apply_flow(self._op(pool_key, tenant, cost))
        allowed, total, charged = bool(reply[1]), reply[2], reply[3]
        pool, mine = reply[4:10], reply[10:16]
        retry = 0.0 if allowed else max(us_to_s(pool[3]), us_to_s(mine[3]))
        if not allowed and (pool[3] == NEVER or mine[3] == NEVER):
            retry = math.inf
        weight = self.weights.get(tenant, self.default_weight)
        return FairDecision(allowed, tenant, cost, charged, weight / total, total, pool[1], retry)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.store!r}, {self.pool}, {self.weights!r})"


class FairShare(_FairBase["Store", Limiter]):
    """Weighted fair shares of a pool on a synchronous store.

    ::

        fair = FairShare(store, "60000/minute", {"interactive": 3, "batch": 1})
        if fair.hit("gpu-pool", "batch", cost=1200):
            ...

    The store step goes through ``limiter``, a ``Limiter(store)`` made here.
    """

    _driver = Limiter
    hit = blocking(_FairBase.hit_flow)


class AsyncFairShare(_FairBase["AsyncStore", AsyncLimiter]):
    """The asyncio twin of ``FairShare``."""

    _driver = AsyncLimiter
    hit = awaiting(_FairBase.hit_flow)
