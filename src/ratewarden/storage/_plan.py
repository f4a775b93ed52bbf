"""Sans-I/O planning shared by every store, sync and async.

``build`` validates a call and names its state keys; ``argv`` and ``parse`` turn
a plan into a Lua call and its reply into a ``Decision`` (``_decisions`` says
how outcomes and replies become Decisions, the same way for every store).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

from ratewarden import algorithms
from ratewarden.algorithms import Step, layers
from ratewarden.checks import check_cost, check_key, check_rates
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate, format_period
from ratewarden.storage._decisions import decode
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
    "build",
    "check_cost",
    "check_key",
    "parse",
    "slot_argv",
    "slot_key",
]

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
    params, suffixes = layers(module, found)
    return Shape(
        algorithm=module,
        check=module.check,
        rates=found,
        params=params,
        suffixes=suffixes,
        cost=cost,
        source=rates,
        single=len(found) == 1,
        name=module.NAME,
    )


#: How a repeat of one window in ``hit_all`` merges: the window's count is shared by its limits.
_SMALLER = " and the smaller limit"


def _in_words(name: str, rate: Rate) -> str:
    """The state a (``name``, ``rate``) layer counts, in words (for errors)."""
    if name in algorithms.WINDOWS:
        return f"the {name} count per {format_period(rate.period_us, words=True)}"
    return f"the {name} rate {rate}"


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

    Two calls may not name the same state (same key and ``state_suffix``: a bucket's
    rate, a window's period whatever the limits): each would be checked against the
    state as it was before either, so their sum could pass a limit that neither may pass
    with the other. Give such a call its summed cost.
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
                    f"calls {earlier} and {index} both count key {key!r} in "
                    f"{_in_words(shape.name, rate)}: they would each be checked against "
                    "the state before the other; make them one call with the sum of their "
                    f"costs{_SMALLER if shape.name in algorithms.WINDOWS else ''}"
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


# --- concurrency slots -------------------------------------------------------------------------


def slot_key(prefix: str, key: str) -> str:
    """State key of the in-flight slots of ``key`` (independent of the limit, which may change)."""
    return f"{prefix}:{{{escape(check_key(key))}}}:concurrency"


def slot_argv(
    now_us: int | None, op: str, lease_id: str, limit: int = 0, slots: int = 0, ttl_us: int = 0
) -> list[int | str]:
    return ["" if now_us is None else now_us, op, lease_id, limit, slots, ttl_us]
