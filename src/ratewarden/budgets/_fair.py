"""FairShare / AsyncFairShare: weighted tenants sharing one pooled budget.

The algorithm (``ratewarden.algorithms.fair_share``): the pool is a GCRA at
rate ``P`` (the hard cap); each tenant also has its own GCRA at rate ``P``,
charged ``cost * W / w`` where ``W`` is the total weight of the tenants active
within ``active_window``. Busy tenants split ``P`` by weight; a tenant that
goes quiet leaves ``W`` after ``active_window`` and its share goes to the
others. One store step per decision (an ``Op`` run by the limiter's
``apply_flow``); every key of a pool shares the pool's hash tag, so on a Redis
Cluster a pool is one slot.

``reserve`` is a hit that also writes a reservation record; ``settle`` is
``gcra_multi``'s settle of that record over the pool's and the tenant's states
(the record prices the tenant's bucket at the ``W / w`` of the reserve), so a
fair share refunds exactly as a token budget does. Each operation is a flow
written once (``_FairBase.hit_flow``, ``reserve_flow``, ...); ``FairShare`` and
``AsyncFairShare`` are made of them (``blocking`` / ``awaiting``).
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ratewarden.algorithms import NEVER, fair_share, gcra, gcra_multi
from ratewarden.budgets._twins import L, OverStore, S
from ratewarden.budgets._values import (
    AxisState,
    BudgetDecision,
    Settlement,
    check_count,
    check_seconds_us,
    us_to_s,
)
from ratewarden.checks import check_id, check_key, keywords_checked
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import (
    AsyncLimiter,
    Flow,
    Limiter,
    Op,
    awaiting,
    axis_key,
    blocking,
    record_key,
)
from ratewarden.rate import Rate

if TYPE_CHECKING:
    # Named as strings in the shells' bases (types only: budgets import no store).
    from ratewarden.storage import AsyncStore, Store  # noqa: F401

__all__ = ["AsyncFairShare", "FairDecision", "FairReservation", "FairShare"]

#: Largest weight a tenant may have (keeps ``cost * W`` exact in Lua doubles).
MAX_WEIGHT = 1_000_000
#: Largest cost, estimate or actual: ``cost * W`` stays below 2**53, exact in the script's
#: doubles as in Python, while the active weight ``W`` is at most 9,007,199 (nine tenants of
#: the largest weight). Past it Redis answered another ``charged`` than the memory store
#: (10**17 + 1 at W / w = 4), or a negative one.
MAX_COST = 1_000_000_000

_KIND = "fair"
_RECORD_KIND = "fair-reservation"
_SETTLED = {0: "unknown", 1: "settled", 2: "already-settled"}
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


@dataclass(frozen=True, slots=True)
class FairReservation:
    """A reserve: held when ``allowed``; settle it with the actual cost when done.

    The pool was charged ``estimate`` and the tenant's bucket ``decision.charged``
    (``ceil(estimate * W / w)``, ``W`` being ``decision.active_weight``). ``replayed``
    is True when this id had been reserved before: nothing was charged again, and
    ``estimate`` and ``decision`` (its cost, charge and share) are this call's, of now, not
    what the record holds (a settle uses the record's).
    """

    pool_key: str
    tenant: str
    reservation_id: str
    estimate: int
    decision: FairDecision
    replayed: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def __bool__(self) -> bool:
        return self.decision.allowed


def _weight(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_WEIGHT:
        raise ConfigurationError(f"{what} {value!r} must be a whole number from 1 to {MAX_WEIGHT}")
    return value


def _cost(what: str, value: int) -> int:
    if value > MAX_COST:
        raise ConfigurationError(
            f"{what} {value!r} must be at most {MAX_COST:,}, a fair share's largest (times "
            "the active weight, it must stay exact on every store)"
        )
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
        reservation_ttl: float = 600.0,
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
        self._window_us = check_seconds_us("active_window", active_window)
        self.active_window = float(active_window)
        self.reservation_ttl = reservation_ttl
        self._ttl_us = check_seconds_us("reservation_ttl", reservation_ttl)
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

    def _op(self, pool_key: str, tenant: str, cost: int, record: str | None = None) -> Op:
        """A hit of ``cost``; with a reservation id, a reserve of that estimate recording it."""
        tenant = self._tenant(tenant)
        what = "cost" if record is None else "estimate"
        if isinstance(cost, bool) or not isinstance(cost, int) or cost < 0:
            raise ConfigurationError(f"{what} {cost!r} must be a whole number >= 0")
        _cost(what, cost)
        pool, tenants, active = self._keys(pool_key)
        weight = self.weights.get(tenant, self.default_weight)
        args: tuple[int | str, ...] = ("", cost, *self._params, tenant, weight, self._window_us)
        if record is None:
            return Op("fair_share", (pool, tenants + tenant, active), args, fair_share.run)
        keys = (pool, tenants + tenant, active, self._record(pool_key, tenant, record))
        return Op("fair_share", keys, (*args, self._ttl_us), fair_share.run)

    def _record(self, pool_key: str, tenant: str, reservation_id: str) -> str:
        """The record's key: the pool's rate (as its state keys name it: a pool at another
        rate on the same key is another pool), the tenant's name with its length first, then
        the id, so no two (rate, tenant, id) share one."""
        rid = check_id("reservation id", reservation_id)
        rate = self.pool
        head = f"{rate.limit}/{rate.period_us}/{rate.capacity}:{len(tenant)}:{tenant}"
        return record_key(self._prefix, pool_key, _RECORD_KIND, f"{head}:{rid}")

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
        return self._decision(tenant, cost, reply)

    def reserve_flow(
        self, pool_key: str, tenant: str, estimate: int, *, reservation_id: str | None = None
    ) -> Flow[FairReservation]:
        """Admit ``estimate`` units as ``hit`` does, held under a reservation id until settled.

        Reserving again under the same ``reservation_id`` charges nothing (``replayed``).
        """
        rid = uuid.uuid4().hex if reservation_id is None else reservation_id
        reply = yield from self.limiter.apply_flow(self._op(pool_key, tenant, estimate, rid))
        decision = self._decision(tenant, estimate, reply)
        return FairReservation(pool_key, tenant, rid, estimate, decision, reply[16] == 2)

    def settle_flow(self, reservation: FairReservation, actual: int) -> Flow[Settlement]:
        """Apply the actual cost: refund what was reserved and not used, once per id.

        A denied reservation has nothing to settle (``"unknown"``).
        """
        if not isinstance(reservation, FairReservation):
            raise ConfigurationError(
                f"settle needs the FairReservation that reserve returned, not {reservation!r}"
            )
        r = reservation
        return (yield from self.settle_id_flow(r.pool_key, r.tenant, r.reservation_id, actual))

    def cancel_flow(self, reservation: FairReservation) -> Flow[Settlement]:
        """Give the whole reservation back (the request was never sent)."""
        return (yield from self.settle_flow(reservation, 0))

    def settle_id_flow(
        self, pool_key: str, tenant: str, reservation_id: str, actual: int
    ) -> Flow[Settlement]:
        """Settle by pool, tenant and id alone (another process, a worker after a restart):
        the store's record holds what was charged and the ``W`` it was charged at.

        The pool gets back ``estimate - actual`` and the tenant's bucket ``charged -
        ceil(actual * W / w)``, each only within the busy period it was charged in and
        never below what was charged after; an overrun is charged up to an empty bucket.
        """
        _cost("actual", check_count("actual", actual))
        tenant = self._tenant(tenant)
        pool, tenants, _ = self._keys(pool_key)
        keys = (pool, tenants + tenant, self._record(pool_key, tenant, reservation_id))
        axis = (*self._params, actual)  # the pool's, and the tenant's at the record's price
        args: tuple[int | str, ...] = ("", "settle", 2, self._ttl_us, *axis, *axis)
        op = Op("gcra_multi", keys, args, gcra_multi.run)
        reply = yield from self.limiter.apply_flow(op)
        refunded = {"pool": reply[2], "tenant": reply[3]}
        axes = (self._axis("pool", reply[4:10]), self._axis("tenant", reply[10:16]))
        return Settlement(_SETTLED[reply[1]], refunded, BudgetDecision(True, 0.0, axes))

    def _axis(self, name: str, numbers: list[int]) -> AxisState:
        """An axis as a cost-0 check left it (``numbers``: the GCRA outcome's six)."""
        _, remaining, reset_us, _, _, refill_us = numbers
        return AxisState(name, self.pool, remaining, us_to_s(reset_us), 0.0, 0, us_to_s(refill_us))

    def _decision(self, tenant: str, cost: int, reply: list[int]) -> FairDecision:
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
        reservation = fair.reserve("gpu-pool", "batch", 4096)  # the most it may cost
        if reservation:
            ...  # call the model
            fair.settle(reservation, 1350)  # what it cost: the rest comes back

    The store step goes through ``limiter``, a ``Limiter(store)`` made here.
    """

    _driver = Limiter
    hit = blocking(_FairBase.hit_flow)
    reserve = blocking(_FairBase.reserve_flow)
    settle = blocking(_FairBase.settle_flow)
    settle_id = blocking(_FairBase.settle_id_flow)
    cancel = blocking(_FairBase.cancel_flow)


class AsyncFairShare(_FairBase["AsyncStore", AsyncLimiter]):
    """The asyncio twin of ``FairShare``."""

    _driver = AsyncLimiter
    hit = awaiting(_FairBase.hit_flow)
    reserve = awaiting(_FairBase.reserve_flow)
    settle = awaiting(_FairBase.settle_flow)
    settle_id = awaiting(_FairBase.settle_id_flow)
    cancel = awaiting(_FairBase.cancel_flow)
