"""Sans-I/O planning shared by every store, sync and async.

``build`` validates a call and names its state keys; ``argv`` and ``parse`` turn
a plan into a Lua call and its reply into a ``Decision``; ``to_decision``
combines per-layer outcomes the same way for the memory store and for Redis.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

from ratewarden import algorithms
from ratewarden.algorithms import NEVER, Outcome, Step
from ratewarden.checks import check_cost, check_key, check_rates
from ratewarden.decision import Decision, make_decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage._keys import escape

__all__ = [
    "Batch",
    "BatchCall",
    "Plan",
    "Shape",
    "Shapes",
    "argv",
    "batch",
    "batch_argv",
    "batch_decisions",
    "build",
    "check_cost",
    "check_key",
    "decode",
    "decode_batch",
    "parse",
    "single",
    "to_decision",
]

#: Values per layer in a script reply: allowed, remaining, reset_after_us, retry_after_us, delay_us,
#: refill_after_us.
REPLY_WIDTH = 6

#: Shapes a ``Shapes`` cache keeps before it starts again from empty (a miss costs one ``shape``).
SHAPE_CACHE_SIZE = 1024


class Plan(NamedTuple):
    """One validated decision: which algorithm, which state keys, which parameters."""

    algorithm: ModuleType
    rates: tuple[Rate, ...]
    keys: tuple[str, ...]
    params: tuple[tuple[int, ...], ...]
    cost: int


@dataclass(frozen=True, slots=True)
class Shape:
    """Everything about a call but the key, validated once and reused by every key.

    ``suffixes`` name each layer's state after the key: a Redis key is
    ``<prefix>:{<escaped key>}<suffix>``; the memory store uses ``(key, suffix)``.
    ``source`` is the rates argument as given, kept so that its ``id`` stays its own
    while the shape is cached under it.
    """

    algorithm: ModuleType
    check: Callable[[tuple[int, ...], Any, int, int], Step]
    rates: tuple[Rate, ...]
    params: tuple[tuple[int, ...], ...]
    suffixes: tuple[str, ...]
    cost: int
    source: object
    single: bool
    name: str

    def keys(self, prefix: str, key: str) -> tuple[str, ...]:
        """The Redis keys of ``key``'s layers (``key`` already checked)."""
        head = f"{prefix}:{{{escape(key)}}}"
        return tuple(head + suffix for suffix in self.suffixes)


def shape(algorithm: str, rates: Rate | Sequence[Rate], cost: int) -> Shape:
    """Validate everything but the key; raises ``ConfigurationError`` on bad input."""
    module = algorithms.get(algorithm)
    cost = check_cost(cost)
    found = check_rates(rates)
    return Shape(
        algorithm=module,
        check=module.check,
        rates=found,
        params=tuple(module.params(rate) for rate in found),
        suffixes=tuple(
            f":{module.NAME}:{rate.limit}:{rate.period_us}:{rate.capacity}" for rate in found
        ),
        cost=cost,
        source=rates,
        single=len(found) == 1,
        name=module.NAME,
    )


class Shapes:
    """A store's cache of recent shapes.

    A well-behaved caller passes the same ``Rate`` (or tuple of them) again and
    again, so a shape is found by the argument's identity: no hashing of rates,
    no validation. The last shape made for each argument is found by its ``id``
    alone and then checked (same object, algorithm and cost); other costs or
    algorithms for the same argument are kept under ``(algorithm, id, cost)``.
    Lists are mutable, so they are looked up by value instead. Only valid calls
    are cached; anything else is built, and so rejected, anew.
    """

    __slots__ = ("_by_id", "_by_value", "_last")

    def __init__(self) -> None:
        self._last: dict[int, Shape] = {}
        self._by_id: dict[tuple[str, int, int], Shape] = {}
        self._by_value: dict[tuple[str, tuple[Rate, ...], int], Shape] = {}

    def get(self, algorithm: str, rates: Rate | Sequence[Rate], cost: int) -> Shape:
        found = self._last.get(id(rates))
        if (
            found is not None
            and found.source is rates
            and found.cost == cost
            and type(cost) is int
            and found.name == algorithm
        ):
            return found
        return self._lookup(algorithm, rates, cost)

    def _lookup(self, algorithm: str, rates: Rate | Sequence[Rate], cost: int) -> Shape:
        if type(cost) is not int or type(algorithm) is not str:
            return shape(algorithm, rates, cost)
        kind = type(rates)
        if kind is Rate or kind is tuple:
            id_key = (algorithm, id(rates), cost)
            found = self._by_id.get(id_key)
            if found is None or found.source is not rates:
                found = shape(algorithm, rates, cost)
                self._keep(self._by_id, id_key, found)
            self._keep(self._last, id(rates), found)
            return found
        try:
            value_key = (algorithm, tuple(rates), cost)  # type: ignore[arg-type]
            found = self._by_value.get(value_key)
        except TypeError:  # not iterable, or unhashable: shape() says what is wrong
            return shape(algorithm, rates, cost)
        if found is None:
            found = shape(algorithm, rates, cost)
            self._keep(self._by_value, value_key, found)
        return found

    def plan(
        self, algorithm: str, prefix: str, key: str, rates: Rate | Sequence[Rate], cost: int
    ) -> Plan:
        """``build``, with the key-independent part from the cache."""
        found = self.get(algorithm, rates, cost)
        if type(key) is not str or not key or not key.isascii():
            check_key(key)
        return Plan(found.algorithm, found.rates, found.keys(prefix, key), found.params, found.cost)

    @staticmethod
    def _keep(cache: dict[Any, Shape], cache_key: Any, found: Shape) -> None:
        if len(cache) >= SHAPE_CACHE_SIZE:
            cache.clear()
        cache[cache_key] = found


# --- several decisions at once (hit_all) ------------------------------------------------------

#: One decision of ``hit_all``: ``(key, rates, cost)``.
BatchCall = tuple[str, Rate | Sequence[Rate], int]

#: A validated ``hit_all``: each call's checked key and shape, in call order.
Batch = list[tuple[str, Shape]]


def batch(shapes: Shapes, algorithm: str, calls: object) -> Batch:
    """Validate the calls of one ``hit_all``; raises ``ConfigurationError`` on bad input.

    Two calls may not name the same state (same key and rate): each would be
    checked against the state as it was before either, so their sum could pass a
    limit that neither may pass with the other. Give such a call its summed cost.
    """
    if not isinstance(calls, list | tuple):
        raise ConfigurationError(
            f"calls {calls!r} must be a list of (key, rates, cost) tuples, one per decision"
        )
    found: Batch = []
    seen: dict[tuple[str, str], int] = {}
    for index, call in enumerate(calls):
        if not isinstance(call, tuple) or len(call) != 3:
            raise ConfigurationError(f"call {index} {call!r} must be a (key, rates, cost) tuple")
        key, rates, cost = call
        shape = shapes.get(algorithm, rates, cost)
        key = check_key(key)
        for suffix, rate in zip(shape.suffixes, shape.rates, strict=True):
            earlier = seen.setdefault((key, suffix), index)
            if earlier != index:
                raise ConfigurationError(
                    f"calls {earlier} and {index} both count key {key!r} on rate {rate}: "
                    "they would each be checked against the state before the other; "
                    "make them one call with the sum of their costs"
                )
        found.append((key, shape))
    return found


def batch_argv(found: Batch, now_us: int | None) -> list[int | str]:
    """Script arguments of a ``hit_all``: now, "all", the count, then each call."""
    args: list[int | str] = ["" if now_us is None else now_us, "all", len(found)]
    for _, shape in found:
        args += (shape.cost, len(shape.params))
        for layer in shape.params:
            args.extend(layer)
    return args


def batch_decisions(found: Batch, outcomes: Sequence[Outcome], admitted: bool) -> list[Decision]:
    """One Decision per call from every layer's outcome, in call order.

    When the batch was not admitted, nothing was consumed: a call that would
    have passed on its own is reported as the check it became (allowed, cost 0).
    """
    decisions = []
    at = 0
    for _, shape in found:
        mine = outcomes[at : at + len(shape.rates)]
        at += len(shape.rates)
        charged = admitted or not all(outcome.allowed for outcome in mine)
        decisions.append(to_decision(shape.rates, mine, shape.cost if charged else 0))
    return decisions


def decode_batch(found: Batch, reply: Sequence[int]) -> list[Decision]:
    """``batch_decisions`` from a script's reply ``{now_us, admitted, per layer: 6 numbers}``."""
    values = [int(value) for value in reply]
    outcomes = [_outcome(values, i) for i in range(2, len(values), REPLY_WIDTH)]
    return batch_decisions(found, outcomes, values[1] == 1)


def build(algorithm: str, prefix: str, key: str, rates: Rate | Sequence[Rate], cost: int) -> Plan:
    found = shape(algorithm, rates, cost)
    key = check_key(key)
    return Plan(found.algorithm, found.rates, found.keys(prefix, key), found.params, found.cost)


def argv(plan: Plan, now_us: int | None) -> list[int | str]:
    """Script arguments: now (or "" to read Redis TIME), cost, then each layer's params."""
    args: list[int | str] = ["" if now_us is None else now_us, plan.cost]
    for layer in plan.params:
        args.extend(layer)
    return args


def parse(plan: Plan, reply: Sequence[int]) -> Decision:
    """Turn ``{now_us, allowed, per layer: 6 numbers}`` into a Decision."""
    return decode(plan.rates, plan.cost, reply)


def decode(rates: Sequence[Rate], cost: int, reply: Sequence[int]) -> Decision:
    """``parse`` for the rates and cost of a call (a ``Plan``'s or a ``Shape``'s)."""
    if len(rates) == 1:
        # The script's numbers are integers already (hiredis makes them ints).
        outcome = (reply[2] != 0, reply[3], reply[4], reply[5], reply[6], reply[7])
        return single(rates[0], outcome, cost)
    values = [int(v) for v in reply]
    outcomes = [_outcome(values, i) for i in range(2, 2 + REPLY_WIDTH * len(rates), REPLY_WIDTH)]
    return to_decision(rates, outcomes, cost)


def _outcome(values: list[int], i: int) -> Outcome:
    """The layer whose six numbers start at ``values[i]``."""
    return Outcome(bool(values[i]), *values[i + 1 : i + REPLY_WIDTH])


def _seconds(us: int) -> float:
    return math.inf if us == NEVER else us / 1_000_000


def _layer(rate: Rate, outcome: Outcome, cost: int) -> Decision:
    allowed, remaining, reset_after_us, retry_after_us, delay_us, refill_after_us = outcome
    return make_decision(
        allowed,
        rate.limit,
        remaining,
        _seconds(reset_after_us),
        _seconds(retry_after_us),
        _seconds(delay_us),
        rate,
        cost,
        (),
        False,
        "",
        refill_after_us / 1_000_000,
    )


def single(rate: Rate, outcome: tuple[bool, int, int, int, int, int], cost: int) -> Decision:
    """The decision of a one-rate call: its only layer binds, and lists itself in ``layers``."""
    allowed, remaining, reset_after_us, retry_after_us, delay_us, refill_after_us = outcome
    reset_after = math.inf if reset_after_us == NEVER else reset_after_us / 1_000_000
    retry_after = math.inf if retry_after_us == NEVER else retry_after_us / 1_000_000
    delay = 0.0 if not delay_us else math.inf if delay_us == NEVER else delay_us / 1_000_000
    refill_after = refill_after_us / 1_000_000
    limit = rate.limit
    layer = make_decision(
        allowed,
        limit,
        remaining,
        reset_after,
        retry_after,
        delay,
        rate,
        cost,
        (),
        False,
        "",
        refill_after,
    )
    return make_decision(
        allowed,
        limit,
        remaining,
        reset_after,
        retry_after,
        delay,
        rate,
        cost,
        (layer,),
        False,
        "",
        refill_after,
    )


def to_decision(rates: Sequence[Rate], outcomes: Sequence[Outcome], cost: int) -> Decision:
    """Combine layers: the binding layer speaks for the decision (see ``Decision``)."""
    if len(rates) == 1:
        return single(rates[0], outcomes[0], cost)
    layers = tuple(_layer(r, o, cost) for r, o in zip(rates, outcomes, strict=True))
    denied = [layer for layer in layers if not layer.allowed]
    if denied:
        binding = max(denied, key=lambda layer: layer.retry_after)
    else:
        binding = min(layers, key=lambda layer: layer.remaining)
    return make_decision(
        not denied,
        binding.limit,
        binding.remaining,
        max(layer.reset_after for layer in layers),
        binding.retry_after,
        max(layer.delay for layer in layers),
        binding.rate,
        cost,
        layers,
        False,
        "",
        # The binding layer's window: the one its remaining (reported above) belongs to.
        binding.refill_after,
    )


# --- concurrency slots -------------------------------------------------------------------------


def slot_key(prefix: str, key: str) -> str:
    """State key of the in-flight slots of ``key`` (independent of the limit, which may change)."""
    return f"{prefix}:{{{escape(check_key(key))}}}:concurrency"


def slot_argv(
    now_us: int | None, op: str, lease_id: str, limit: int = 0, slots: int = 0, ttl_us: int = 0
) -> list[int | str]:
    return ["" if now_us is None else now_us, op, lease_id, limit, slots, ttl_us]


def slot_decision(limit: int, slots: int, outcome: Outcome) -> Decision:
    """A Decision for a slot acquisition (no Rate: concurrency has no period)."""
    return Decision(
        allowed=outcome.allowed,
        limit=limit,
        remaining=outcome.remaining,
        reset_after=_seconds(outcome.reset_after_us),
        retry_after=_seconds(outcome.retry_after_us),
        cost=slots,
        refill_after=_seconds(outcome.refill_after_us),
    )


def parse_acquire(limit: int, slots: int, reply: Sequence[int]) -> Decision:
    """``{now_us, allowed, remaining, reset_after_us, retry_after_us, refill_after_us}`` ->
    Decision."""
    values = [int(v) for v in reply]
    outcome = Outcome(bool(values[1]), values[2], values[3], values[4], 0, values[5])
    return slot_decision(limit, slots, outcome)
