"""What a token budget asks of its store, and what it makes of the reply; no I/O.

``_BudgetBase`` holds a budget's axes and plans each operation as one store
step (an ``Op`` of the ``gcra_multi`` script and its pure twin, every key under
the budget key's hash tag), run by the limiter's ``apply_flow``. Each operation
is a flow written once here (``reserve_flow``, ``settle_flow``, ...);
``TokenBudget`` and ``AsyncTokenBudget`` are made of them (``blocking`` /
``awaiting``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping

from ratewarden.algorithms import gcra, gcra_multi
from ratewarden.budgets._backlog import Backlog
from ratewarden.budgets._twins import L, OverStore, S
from ratewarden.budgets._values import (
    BUILTIN_AXES,
    MAX_AXES,
    AxisState,
    BudgetDecision,
    Charge,
    Reservation,
    Settlement,
    Usage,
    check_axis_name,
    check_count,
    check_reservation,
    check_seconds_us,
    us_to_s,
)
from ratewarden.checks import check_id, keywords_checked
from ratewarden.errors import ConfigurationError, StorageUnavailableError
from ratewarden.limiter import Flow, Op, axis_key, record_key
from ratewarden.rate import Rate

__all__ = ["_BudgetBase"]

#: Budget keys whose axis keys a budget remembers before it starts again from empty.
_KEY_CACHE_SIZE = 4096

_AXIS_KIND = "budget"
_RECORD_KIND = "budget-reservation"
_SETTLED = {0: "unknown", 1: "settled", 2: "already-settled"}


class _BudgetBase(OverStore[S, L]):
    """Configuration, the planning of ops, the parsing of replies, and the flows."""

    @keywords_checked
    def __init__(
        self,
        store: S,
        limits: Mapping[str, Rate | str],
        *,
        max_output_tokens: int,
        reservation_ttl: float = 600.0,
        backlog: Backlog | None = None,
    ) -> None:
        super().__init__(store)
        if backlog is not None:
            if not isinstance(backlog, Backlog):
                raise ConfigurationError(f"backlog {backlog!r} must be a Backlog or None")
            backlog.claim(self)
        #: Usage the store could not record, paid before the key's next store step.
        self.backlog = backlog
        if not isinstance(limits, Mapping) or not limits:
            raise ConfigurationError(
                f"limits {limits!r} must map axis names to rates, e.g. "
                "{'requests': '500/minute', 'tokens': '100000/minute'}"
            )
        if len(limits) > MAX_AXES:
            raise ConfigurationError(f"a budget has at most {MAX_AXES} axes, not {len(limits)}")
        axes: list[tuple[str, Rate]] = []
        for name, given in limits.items():
            check_axis_name(type(self).__name__, name)
            rate = Rate.parse(given) if isinstance(given, str) else given
            if not isinstance(rate, Rate):
                raise ConfigurationError(f"axis {name!r}: {rate!r} is not a Rate or '100/minute'")
            axes.append((name, rate))
        self.axes: tuple[tuple[str, Rate], ...] = tuple(axes)
        self.max_output_tokens = check_count("max_output_tokens", max_output_tokens)
        self.reservation_ttl = reservation_ttl
        self._ttl_us = check_seconds_us("reservation_ttl", reservation_ttl)
        self._params = tuple(gcra.params(rate) for _, rate in self.axes)
        self._names = frozenset(name for name, _ in self.axes)
        # The keys name the store's prefix: budgets of one store share nothing with another's.
        self._prefix: str = getattr(store, "prefix", "rw")
        # Axis keys of recent budget keys (escaping and formatting cost more than the check).
        self._axis_keys: dict[str, tuple[str, ...]] = {}
        # A record holds one charge per axis, in this order: it is this budget's, so its key
        # names the axes and their rates as the axis keys do, then the id (which may hold ':'
        # where this never does). Two budgets on one key and id keep a record each.
        self._record_head = ",".join(
            f"{name}={rate.limit}/{rate.period_us}/{rate.capacity}" for name, rate in self.axes
        )

    def estimate(
        self,
        input_tokens: int,
        max_output_tokens: int | None = None,
        units: Mapping[str, int] | None = None,
    ) -> Usage:
        """Input tokens plus the requested output, capped at the budget's ``max_output_tokens``."""
        cap = self.max_output_tokens
        wanted = (
            cap
            if max_output_tokens is None
            else check_count("max_output_tokens", max_output_tokens)
        )
        return Usage.of(input_tokens, min(wanted, cap), 1, units)

    # --- the flows ----------------------------------------------------------------------

    def reserve_flow(
        self,
        key: str,
        input_tokens: int,
        max_output_tokens: int | None = None,
        *,
        units: Mapping[str, int] | None = None,
        reservation_id: str | None = None,
    ) -> Flow[Reservation]:
        """Charge the estimate (input + capped output, one request) on every axis, or nothing.

        Reserving again under the same ``reservation_id`` charges nothing
        (``replayed``). Raises ``StorageUnavailableError`` when the store fails.
        """
        usage = self.estimate(input_tokens, max_output_tokens, units)
        return (yield from self.reserve_usage_flow(key, usage, reservation_id=reservation_id))

    def reserve_usage_flow(
        self, key: str, usage: Usage, *, reservation_id: str | None = None
    ) -> Flow[Reservation]:
        """``reserve`` with an explicit ``Usage`` (no output cap applied)."""
        rid = (
            uuid.uuid4().hex
            if reservation_id is None
            else check_id("reservation id", reservation_id)
        )
        costs = self._costs(usage)
        if self.backlog:
            yield from self._pay_flow(key)
        reply = yield from self.limiter.apply_flow(self._op("reserve", self._keys(key, rid), costs))
        decision = self._decision(reply, 3, costs)
        if not reply[1]:
            decision = BudgetDecision(False, decision.retry_after, decision.axes)
        return Reservation(key, rid, usage, costs, decision, replayed=reply[2] == 2)

    def settle_flow(
        self,
        reservation: Reservation,
        *,
        output_tokens: int,
        input_tokens: int | None = None,
        units: Mapping[str, int] | None = None,
    ) -> Flow[Settlement]:
        """Apply the actual usage: refund what was reserved and not used, once per id.

        ``input_tokens`` defaults to the estimate's. A denied reservation has
        nothing to settle (``"unknown"``).
        """
        actual = self._actual(reservation, input_tokens, output_tokens, units)
        return (yield from self.settle_usage_flow(reservation, actual))

    def settle_usage_flow(self, reservation: Reservation, actual: Usage) -> Flow[Settlement]:
        """``settle`` with an explicit ``Usage``.

        With a backlog, the overrun of a settle the store failed is owed; a later settle
        of the same reservation (a retry) charges none of that overrun again, and one
        that finds the reservation already settled (the failed settle ran after all)
        takes back what is still owed of it.
        """
        check_reservation(reservation)
        if not isinstance(actual, Usage):
            raise ConfigurationError(f"settle needs the actual Usage, not {actual!r}")
        key, rid, backlog = reservation.key, reservation.reservation_id, self.backlog
        costs = self._costs(actual)
        if backlog is not None:
            costs = backlog.less_overrun(key, rid, costs, reservation.costs)
        try:
            settled = yield from self._settle_costs_flow(key, rid, costs)
        except StorageUnavailableError:
            # The reservation stays charged (its charge drains by time, as any does; a later
            # settle can refund it while its record lasts); what was used beyond it (an
            # overrun) is owed, as a charge the store could not take would be.
            if backlog is not None:
                backlog.owe_overrun(key, rid, costs, reservation.costs)
            raise
        if backlog is not None:
            backlog.overrun_done(key, rid, ran=settled.status == "already-settled")
        return settled

    def cancel_flow(self, reservation: Reservation) -> Flow[Settlement]:
        """Give the whole reservation back (the request was never sent)."""
        check_reservation(reservation, "cancel")
        return (yield from self.settle_usage_flow(reservation, self._nothing(reservation)))

    def settle_id_flow(self, key: str, reservation_id: str, actual: Usage) -> Flow[Settlement]:
        """Settle by key and id alone: from another process, or after a restart.

        The store's record holds what was charged, so nothing else is needed.
        """
        if not isinstance(actual, Usage):
            raise ConfigurationError(f"settle needs the actual Usage, not {actual!r}")
        return (yield from self._settle_costs_flow(key, reservation_id, self._costs(actual)))

    def _settle_costs_flow(
        self, key: str, reservation_id: str, costs: tuple[int, ...]
    ) -> Flow[Settlement]:
        keys = self._keys(key, check_id("reservation id", reservation_id))
        reply = yield from self.limiter.apply_flow(self._op("settle", keys, costs))
        m = len(self.axes)
        refunded = {name: reply[2 + i] for i, (name, _) in enumerate(self.axes)}
        return Settlement(_SETTLED[reply[1]], refunded, self._decision(reply, 2 + m, (0,) * m))

    def charge_flow(self, key: str, usage: Usage) -> Flow[Charge]:
        """Record usage that already happened, with no reservation, up to an empty budget.

        For callers that learn the cost only afterwards (Envoy's charge on stream done).
        """
        if not isinstance(usage, Usage):
            raise ConfigurationError(f"charge needs a Usage, not {usage!r}")
        costs = self._costs(usage)
        keys = self._keys(key, None)
        backlog = self.backlog
        owed = None
        if backlog is not None:
            owed = backlog.take(key)  # paid with this charge, in the same store step
            if owed is not None:
                costs = tuple([a + b for a, b in zip(costs, owed, strict=True)])
        try:
            reply = yield from self.limiter.apply_flow(self._op("charge", keys, costs))
        except StorageUnavailableError:
            if backlog is not None:
                backlog.owe(key, costs)
            raise
        except BaseException:  # cancelled, say: what was owed stays owed
            # (When the store ran the script all the same, that is paid twice, as it is
            # when the reply timed out: the store cannot say whether it ran it.)
            if backlog is not None and owed is not None:
                backlog.owe(key, owed)
            raise
        m = len(self.axes)
        charged = {name: reply[2 + i] for i, (name, _) in enumerate(self.axes)}
        return Charge(charged, self._decision(reply, 2 + m, (0,) * m))

    def peek_flow(self, key: str) -> Flow[BudgetDecision]:
        """Every axis of ``key`` now, charging nothing."""
        nothing = (0,) * len(self.axes)
        if self.backlog:
            yield from self._pay_flow(key)
        reply = yield from self.limiter.apply_flow(
            self._op("reserve", self._keys(key, None), nothing)
        )
        return self._decision(reply, 3, nothing)

    def owe(self, key: str, usage: Usage) -> bool:
        """Record ``usage`` of ``key`` that the store could not take, to be charged before
        the key's next store step or by ``replay``; False when the backlog is full.

        For a caller that learnt of the usage while the store was refusing calls (an open
        circuit, say) and so never reached ``charge``. Needs a ``backlog``.
        """
        if self.backlog is None:
            raise ConfigurationError("owe needs a budget made with backlog=Backlog()")
        if not isinstance(usage, Usage):
            raise ConfigurationError(f"owe needs a Usage, not {usage!r}")
        self._keys(key, None)  # a key that could never be charged is refused now, not later
        return self.backlog.owe(key, self._costs(usage))

    def replay_flow(self, max_keys: int | None = None) -> Flow[int]:
        """Pay what the backlog owes, in the order the keys came to owe, one store step a
        key (at most ``max_keys`` keys); how many keys were paid.

        Stops at the first failure: what it paid stays paid, the key that failed is owed
        again, as the newest (the next replay tries the others first), and
        ``StorageUnavailableError`` is raised. Nothing to do without a backlog.
        """
        if max_keys is not None:
            check_count("max_keys", max_keys)
        backlog = self.backlog
        if backlog is None:
            return 0
        keys = backlog.owing()
        if max_keys is not None:
            keys = keys[:max_keys]
        paid = 0
        for key in keys:
            if (yield from self._pay_flow(key)):
                paid += 1
        return paid

    def _pay_flow(self, key: str) -> Flow[bool]:
        """Charge what ``key`` owes (up to an empty budget), before anything else of it;
        owed again if the store fails. False when it owed nothing."""
        backlog = self.backlog
        owed = backlog.take(key) if backlog is not None else None
        if owed is None:
            return False
        assert backlog is not None
        try:
            yield from self.limiter.apply_flow(self._op("charge", self._keys(key, None), owed))
        except BaseException:  # the store failed (or the call was cancelled): still owed
            backlog.owe(key, owed)
            raise
        return True

    def holds_flow(self, key: str, reservation_id: str) -> Flow[bool]:
        """Whether the reservation ``reservation_id`` of ``key`` is open (reserved, not yet
        settled or expired), charging nothing: a reserve one unit over the first axis'
        burst, which can never be admitted (it writes nothing) and answers "already
        reserved" exactly when the record is open."""
        never = (self._params[0][2] + 1,) + (0,) * (len(self.axes) - 1)
        keys = self._keys(key, check_id("reservation id", reservation_id))
        reply = yield from self.limiter.apply_flow(self._op("reserve", keys, never))
        return bool(reply[2] == 2)

    # --- planning -----------------------------------------------------------------------

    def _actual(
        self,
        reservation: Reservation,
        input_tokens: int | None,
        output_tokens: int,
        units: Mapping[str, int] | None,
    ) -> Usage:
        """What ``settle``'s arguments say was used; input and units default to the estimate's."""
        check_reservation(reservation)
        used_input = reservation.estimate.input_tokens if input_tokens is None else input_tokens
        if units is None:
            units = dict(reservation.estimate.units)
        return Usage.of(used_input, output_tokens, 1, units)

    def _unused(self) -> Usage:
        """No usage on any axis: ``settle_id`` with it cancels a reservation by id."""
        return Usage(0, 0, 0, tuple((n, 0) for n, _ in self.axes if n not in BUILTIN_AXES))

    @staticmethod
    def _nothing(reservation: Reservation) -> Usage:
        """The usage of a request never sent: ``cancel`` settles with it."""
        return Usage(0, 0, 0, tuple((n, 0) for n, _ in reservation.estimate.units))

    def _costs(self, usage: Usage) -> tuple[int, ...]:
        known = self._names
        for name, _ in usage.units:
            if name not in known:
                raise ConfigurationError(
                    f"units names {name!r}, which is not an axis of this budget ({sorted(known)})"
                )
        return tuple([usage.amount(name) for name, _ in self.axes])

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
        record = f"{self._record_head}:{record}"
        return (*keys, record_key(self._prefix, key, _RECORD_KIND, record))

    def _op(self, op: str, keys: tuple[str, ...], amounts: tuple[int, ...]) -> Op:
        args: list[int | str] = ["", op, len(self.axes), self._ttl_us]
        for params, amount in zip(self._params, amounts, strict=True):
            args.extend((*params, amount))
        return Op("gcra_multi", keys, tuple(args), gcra_multi.run)

    # --- parsing ------------------------------------------------------------------------

    def _decision(self, reply: list[int], start: int, costs: tuple[int, ...]) -> BudgetDecision:
        """Each axis' six numbers from ``start`` on; the longest wait of a denying axis."""
        states = []
        longest = 0.0
        at = start
        for (name, rate), cost in zip(self.axes, costs, strict=True):
            allowed, remaining, reset_us, retry_us, _, refill_us = reply[at : at + 6]
            at += 6
            retry = 0.0 if allowed else us_to_s(retry_us)
            longest = max(longest, retry)
            reset, refill = us_to_s(reset_us), us_to_s(refill_us)
            states.append(AxisState(name, rate, remaining, reset, retry, cost, refill))
        # Allowed when no axis waits: the longest wait is 0 exactly then (waits are >= 0).
        return BudgetDecision(longest == 0, longest, tuple(states))

    def __repr__(self) -> str:
        limits = ", ".join(f"{name}={rate}" for name, rate in self.axes)
        name = type(self).__name__
        store = self.store
        return f"{name}({store!r}, {limits}, max_output_tokens={self.max_output_tokens})"
