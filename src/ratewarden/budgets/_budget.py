"""TokenBudget / AsyncTokenBudget: several axes per key, reserved and settled atomically.

A budget names its axes and their rates, ``{"requests": "500/minute",
"tokens": "100000/minute"}``; each axis is a GCRA. ``reserve`` charges every
axis its own estimate in one store step, all or nothing; ``settle`` gives back
what was not used (or charges an overrun), once per reservation id. The two
classes share everything but the store call.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field

from ratewarden.algorithms import _gcra_multi, gcra
from ratewarden.algorithms._base import NEVER
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store
from ratewarden.storage._ops import Op, arun, axis_key, check_id, check_name, record_key, run

__all__ = [
    "AsyncTokenBudget",
    "AxisState",
    "BudgetDecision",
    "Charge",
    "Reservation",
    "Settlement",
    "TokenBudget",
    "Usage",
]

#: Axes whose usage is derived from the request itself; any other name is a custom unit.
BUILTIN_AXES = ("requests", "tokens", "input_tokens", "output_tokens")

#: At most this many axes per budget (each is one key in the one store step).
MAX_AXES = 16

#: Budget keys whose axis keys a budget remembers before it starts again from empty.
_KEY_CACHE_SIZE = 4096

_AXIS_KIND = "budget"
_RECORD_KIND = "budget-reservation"


def _count(what: str, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{what} {value!r} must be a whole number >= 0")
    return value


def _seconds_us(what: str, seconds: object) -> int:
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds < math.inf
    ):
        raise ConfigurationError(f"{what} {seconds!r} must be a positive number of seconds")
    return max(1, math.ceil(seconds * 1_000_000))


@dataclass(frozen=True, slots=True)
class Usage:
    """What one request uses (or is estimated to use) on each axis.

    ``tokens`` is ``input_tokens + output_tokens``; ``requests`` is 1 per call
    (0 for a request that was never sent); ``units`` counts custom axes.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 1
    units: tuple[tuple[str, int], ...] = ()

    @classmethod
    def of(
        cls,
        input_tokens: int = 0,
        output_tokens: int = 0,
        requests: int = 1,
        units: Mapping[str, int] | None = None,
    ) -> Usage:
        """A checked ``Usage``; ``units`` maps custom axis names to counts."""
        if units is not None and not isinstance(units, Mapping):
            raise ConfigurationError(f"units {units!r} must be a mapping of axis name to count")
        found = tuple(
            sorted(
                (check_name("unit", name), _count(f"units[{name!r}]", count))
                for name, count in (units or {}).items()
            )
        )
        return cls(
            _count("input_tokens", input_tokens),
            _count("output_tokens", output_tokens),
            _count("requests", requests),
            found,
        )

    def amount(self, axis: str) -> int:
        """Units this usage costs on ``axis``; a custom axis must be named in ``units``."""
        if axis == "requests":
            return self.requests
        if axis == "tokens":
            return self.input_tokens + self.output_tokens
        if axis == "input_tokens":
            return self.input_tokens
        if axis == "output_tokens":
            return self.output_tokens
        for name, count in self.units:
            if name == axis:
                return count
        raise ConfigurationError(
            f"the budget has a custom axis {axis!r}: pass its count in units={{{axis!r}: N}}"
        )


@dataclass(frozen=True, slots=True)
class AxisState:
    """One axis after a decision: its limit, what is left, and times in seconds.

    ``refill_after`` is the axis' effective window (``Decision.refill_after``):
    were all of ``remaining`` used now, one more unit fits after that long.
    """

    name: str
    rate: Rate
    remaining: int
    reset_after: float
    retry_after: float
    cost: int
    refill_after: float = 0.0

    @property
    def limit(self) -> int:
        return self.rate.limit

    @property
    def allowed(self) -> bool:
        return self.retry_after == 0


@dataclass(frozen=True, slots=True)
class BudgetDecision:
    """All axes of one budget decision; ``retry_after`` is the longest wait of a denying axis."""

    allowed: bool
    retry_after: float
    axes: tuple[AxisState, ...]

    def axis(self, name: str) -> AxisState:
        """The state of axis ``name``."""
        for state in self.axes:
            if state.name == name:
                return state
        raise KeyError(name)

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reserve: held when ``allowed``; settle it with the actual usage when done.

    ``replayed`` is True when this id had been reserved before (nothing was
    charged again).
    """

    key: str
    reservation_id: str
    estimate: Usage
    costs: tuple[int, ...]
    decision: BudgetDecision
    replayed: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def __bool__(self) -> bool:
        return self.decision.allowed


@dataclass(frozen=True, slots=True)
class Settlement:
    """The result of ``settle``.

    ``status`` is ``"settled"`` (the difference was applied), ``"already-settled"``
    (an earlier settle of this id applied it; nothing changed) or ``"unknown"``
    (no such reservation: never granted, or its record expired; nothing changed).
    ``refunded`` maps each axis to the units given back (negative: an overrun charged).
    """

    status: str
    refunded: Mapping[str, int] = field(default_factory=dict)
    decision: BudgetDecision | None = None

    @property
    def applied(self) -> bool:
        return self.status == "settled"


@dataclass(frozen=True, slots=True)
class Charge:
    """The result of ``charge``: units charged per axis (up to an empty budget) and the state."""

    charged: Mapping[str, int]
    decision: BudgetDecision


def _check_reservation(reservation: object) -> None:
    if not isinstance(reservation, Reservation):
        raise ConfigurationError(
            f"settle needs the Reservation that reserve returned, not {reservation!r}"
        )


def _us_to_s(us: int) -> float:
    return math.inf if us == NEVER else us / 1_000_000


class _BudgetBase:
    """Configuration, planning and parsing; no I/O."""

    def __init__(
        self,
        limits: Mapping[str, Rate | str],
        *,
        max_output_tokens: int,
        reservation_ttl: float = 600.0,
        prefix: str,
    ) -> None:
        if not isinstance(limits, Mapping) or not limits:
            raise ConfigurationError(
                f"limits {limits!r} must map axis names to rates, e.g. "
                "{'requests': '500/minute', 'tokens': '100000/minute'}"
            )
        if len(limits) > MAX_AXES:
            raise ConfigurationError(f"a budget has at most {MAX_AXES} axes, not {len(limits)}")
        axes: list[tuple[str, Rate]] = []
        for name, given in limits.items():
            check_name("axis", name)
            rate = Rate.parse(given) if isinstance(given, str) else given
            if not isinstance(rate, Rate):
                raise ConfigurationError(f"axis {name!r}: {rate!r} is not a Rate or '100/minute'")
            axes.append((name, rate))
        self.axes: tuple[tuple[str, Rate], ...] = tuple(axes)
        self.max_output_tokens = _count("max_output_tokens", max_output_tokens)
        self.reservation_ttl = reservation_ttl
        self._ttl_us = _seconds_us("reservation_ttl", reservation_ttl)
        self._params = tuple(gcra.params(rate) for _, rate in self.axes)
        self._prefix = prefix
        # Axis keys of recent budget keys (escaping and formatting cost more than the check).
        self._axis_keys: dict[str, tuple[str, ...]] = {}

    # --- planning ------------------------------------------------------------------------

    def estimate(
        self,
        input_tokens: int,
        max_output_tokens: int | None = None,
        units: Mapping[str, int] | None = None,
    ) -> Usage:
        """Input tokens plus the requested output, capped at the budget's ``max_output_tokens``."""
        cap = self.max_output_tokens
        wanted = (
            cap if max_output_tokens is None else _count("max_output_tokens", max_output_tokens)
        )
        return Usage.of(input_tokens, min(wanted, cap), 1, units)

    def _costs(self, usage: Usage) -> tuple[int, ...]:
        known = {name for name, _ in self.axes}
        for name, _ in usage.units:
            if name not in known:
                raise ConfigurationError(
                    f"units names {name!r}, which is not an axis of this budget ({sorted(known)})"
                )
        return tuple(usage.amount(name) for name, _ in self.axes)

    def _keys(self, key: str, record: str | None) -> tuple[str, ...]:
        if type(key) is not str or not key:
            raise ConfigurationError(f"key {key!r} must be a non-empty string")
        keys = self._axis_keys.get(key)
        if keys is None:
            keys = tuple(axis_key(self._prefix, key, _AXIS_KIND, n, r) for n, r in self.axes)
            if len(self._axis_keys) >= _KEY_CACHE_SIZE:
                self._axis_keys.clear()
            self._axis_keys[key] = keys
        if record is None:
            return keys
        return (*keys, record_key(self._prefix, key, _RECORD_KIND, record))

    def _op(self, op: str, keys: tuple[str, ...], amounts: tuple[int, ...]) -> Op:
        args: list[int | str] = ["", op, len(self.axes), self._ttl_us]
        for params, amount in zip(self._params, amounts, strict=True):
            args.extend((*params, amount))
        return Op("gcra_multi", keys, tuple(args), _gcra_multi.run)

    def _reserve_op(
        self, key: str, usage: Usage, reservation_id: str | None
    ) -> tuple[Op, str, tuple[int, ...]]:
        rid = (
            uuid.uuid4().hex
            if reservation_id is None
            else check_id("reservation id", reservation_id)
        )
        costs = self._costs(usage)
        return self._op("reserve", self._keys(key, rid), costs), rid, costs

    def _settle_op(self, reservation: Reservation, actual: Usage) -> Op:
        _check_reservation(reservation)
        return self._settle_id_op(reservation.key, reservation.reservation_id, actual)

    def _settle_id_op(self, key: str, reservation_id: str, actual: Usage) -> Op:
        if not isinstance(actual, Usage):
            raise ConfigurationError(f"settle needs the actual Usage, not {actual!r}")
        keys = self._keys(key, check_id("reservation id", reservation_id))
        return self._op("settle", keys, self._costs(actual))

    def _charge_op(self, key: str, usage: Usage) -> Op:
        if not isinstance(usage, Usage):
            raise ConfigurationError(f"charge needs a Usage, not {usage!r}")
        return self._op("charge", self._keys(key, None), self._costs(usage))

    def _charged(self, reply: list[int]) -> Charge:
        m = len(self.axes)
        charged = {name: reply[2 + i] for i, (name, _) in enumerate(self.axes)}
        return Charge(charged, self._decision(reply, 2 + m, (0,) * m))

    def _peek_op(self, key: str) -> Op:
        return self._op("reserve", self._keys(key, None), (0,) * len(self.axes))

    def _actual(
        self,
        reservation: Reservation,
        input_tokens: int | None,
        output_tokens: int,
        units: Mapping[str, int] | None,
    ) -> Usage:
        _check_reservation(reservation)
        used_input = reservation.estimate.input_tokens if input_tokens is None else input_tokens
        if units is None:
            units = dict(reservation.estimate.units)
        return Usage.of(used_input, output_tokens, 1, units)

    # --- parsing -------------------------------------------------------------------------

    def _decision(self, reply: list[int], start: int, costs: tuple[int, ...]) -> BudgetDecision:
        states = []
        for i, ((name, rate), cost) in enumerate(zip(self.axes, costs, strict=True)):
            at = start + 6 * i
            allowed, remaining, reset_us, retry_us, _, refill_us = reply[at : at + 6]
            retry = 0.0 if allowed else _us_to_s(retry_us)
            reset, refill = _us_to_s(reset_us), _us_to_s(refill_us)
            states.append(AxisState(name, rate, remaining, reset, retry, cost, refill))
        retry_after = max((s.retry_after for s in states), default=0.0)
        return BudgetDecision(all(s.retry_after == 0 for s in states), retry_after, tuple(states))

    def _reservation(
        self, key: str, rid: str, usage: Usage, costs: tuple[int, ...], reply: list[int]
    ) -> Reservation:
        decision = self._decision(reply, 3, costs)
        if not reply[1]:
            decision = BudgetDecision(False, decision.retry_after, decision.axes)
        return Reservation(key, rid, usage, costs, decision, replayed=reply[2] == 2)

    def _settlement(self, reply: list[int]) -> Settlement:
        m = len(self.axes)
        status = {0: "unknown", 1: "settled", 2: "already-settled"}[reply[1]]
        refunded = {name: reply[2 + i] for i, (name, _) in enumerate(self.axes)}
        return Settlement(status, refunded, self._decision(reply, 2 + m, (0,) * m))

    def _describe(self, store: object) -> str:
        limits = ", ".join(f"{name}={rate}" for name, rate in self.axes)
        name = type(self).__name__
        return f"{name}({store!r}, {limits}, max_output_tokens={self.max_output_tokens})"


class TokenBudget(_BudgetBase):
    """Token budgets on a synchronous store (``MemoryStore`` or ``RedisStore``).

    ::

        budget = TokenBudget(store, {"requests": "500/minute", "tokens": "100000/minute"},
                             max_output_tokens=4096)
        reservation = budget.reserve("tenant:acme", input_tokens=1200)
        if reservation:
            ...  # call the model
            budget.settle(reservation, output_tokens=350)
    """

    def __init__(
        self,
        store: Store,
        limits: Mapping[str, Rate | str],
        *,
        max_output_tokens: int,
        reservation_ttl: float = 600.0,
    ) -> None:
        super().__init__(
            limits,
            max_output_tokens=max_output_tokens,
            reservation_ttl=reservation_ttl,
            prefix=getattr(store, "prefix", "rw"),
        )
        self.store = store

    def reserve(
        self,
        key: str,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
    ) -> Reservation:
        """Charge the estimate (input + capped output, one request) on every axis, or nothing.

        Reserving again under the same ``reservation_id`` charges nothing
        (``replayed``). Raises ``StorageUnavailableError`` when the store fails.
        """
        usage = self.estimate(input_tokens, max_output_tokens, units)
        op, rid, costs = self._reserve_op(key, usage, reservation_id)
        return self._reservation(key, rid, usage, costs, run(self.store, op))

    def reserve_usage(
        self, key: str, usage: Usage, *, reservation_id: str | None = None
    ) -> Reservation:
        """``reserve`` with an explicit ``Usage`` (no output cap applied)."""
        op, rid, costs = self._reserve_op(key, usage, reservation_id)
        return self._reservation(key, rid, usage, costs, run(self.store, op))

    def settle(
        self,
        reservation: Reservation,
        *,
        output_tokens: int,
        input_tokens: int | None = None,
        units: Mapping[str, int] | None = None,
    ) -> Settlement:
        """Apply the actual usage: refund what was reserved and not used, once per id.

        ``input_tokens`` defaults to the estimate's. A denied reservation has
        nothing to settle (``"unknown"``).
        """
        actual = self._actual(reservation, input_tokens, output_tokens, units)
        return self.settle_usage(reservation, actual)

    def settle_usage(self, reservation: Reservation, actual: Usage) -> Settlement:
        """``settle`` with an explicit ``Usage``."""
        return self._settlement(run(self.store, self._settle_op(reservation, actual)))

    def settle_id(self, key: str, reservation_id: str, actual: Usage) -> Settlement:
        """Settle by key and id alone: from another process, or after a restart.

        The store's record holds what was charged, so nothing else is needed.
        """
        return self._settlement(run(self.store, self._settle_id_op(key, reservation_id, actual)))

    def cancel(self, reservation: Reservation) -> Settlement:
        """Give the whole reservation back (the request was never sent)."""
        return self.settle_usage(
            reservation, Usage(0, 0, 0, tuple((n, 0) for n, _ in reservation.estimate.units))
        )

    def charge(self, key: str, usage: Usage) -> Charge:
        """Record usage that already happened, with no reservation, up to an empty budget.

        For callers that learn the cost only afterwards (Envoy's charge on stream done).
        """
        return self._charged(run(self.store, self._charge_op(key, usage)))

    def peek(self, key: str) -> BudgetDecision:
        """Every axis of ``key`` now, charging nothing."""
        reply = run(self.store, self._peek_op(key))
        return self._decision(reply, 3, (0,) * len(self.axes))

    def __repr__(self) -> str:
        return self._describe(self.store)


class AsyncTokenBudget(_BudgetBase):
    """The asyncio twin of ``TokenBudget`` over ``AsyncMemoryStore`` or ``AsyncRedisStore``."""

    def __init__(
        self,
        store: AsyncStore,
        limits: Mapping[str, Rate | str],
        *,
        max_output_tokens: int,
        reservation_ttl: float = 600.0,
    ) -> None:
        super().__init__(
            limits,
            max_output_tokens=max_output_tokens,
            reservation_ttl=reservation_ttl,
            prefix=getattr(store, "prefix", "rw"),
        )
        self.store = store

    async def reserve(
        self,
        key: str,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
    ) -> Reservation:
        """See ``TokenBudget.reserve``."""
        usage = self.estimate(input_tokens, max_output_tokens, units)
        op, rid, costs = self._reserve_op(key, usage, reservation_id)
        return self._reservation(key, rid, usage, costs, await arun(self.store, op))

    async def reserve_usage(
        self, key: str, usage: Usage, *, reservation_id: str | None = None
    ) -> Reservation:
        """See ``TokenBudget.reserve_usage``."""
        op, rid, costs = self._reserve_op(key, usage, reservation_id)
        return self._reservation(key, rid, usage, costs, await arun(self.store, op))

    async def settle(
        self,
        reservation: Reservation,
        *,
        output_tokens: int,
        input_tokens: int | None = None,
        units: Mapping[str, int] | None = None,
    ) -> Settlement:
        """See ``TokenBudget.settle``."""
        actual = self._actual(reservation, input_tokens, output_tokens, units)
        return await self.settle_usage(reservation, actual)

    async def settle_usage(self, reservation: Reservation, actual: Usage) -> Settlement:
        """See ``TokenBudget.settle_usage``."""
        return self._settlement(await arun(self.store, self._settle_op(reservation, actual)))

    async def settle_id(self, key: str, reservation_id: str, actual: Usage) -> Settlement:
        """See ``TokenBudget.settle_id``."""
        op = self._settle_id_op(key, reservation_id, actual)
        return self._settlement(await arun(self.store, op))

    async def cancel(self, reservation: Reservation) -> Settlement:
        """See ``TokenBudget.cancel``."""
        return await self.settle_usage(
            reservation, Usage(0, 0, 0, tuple((n, 0) for n, _ in reservation.estimate.units))
        )

    async def charge(self, key: str, usage: Usage) -> Charge:
        """See ``TokenBudget.charge``."""
        return self._charged(await arun(self.store, self._charge_op(key, usage)))

    async def peek(self, key: str) -> BudgetDecision:
        """See ``TokenBudget.peek``."""
        reply = await arun(self.store, self._peek_op(key))
        return self._decision(reply, 3, (0,) * len(self.axes))

    def __repr__(self) -> str:
        return self._describe(self.store)
