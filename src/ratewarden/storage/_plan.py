"""Sans-I/O planning shared by every store, sync and async.

``build`` validates a call and names its state keys; ``argv`` and ``parse`` turn
a plan into a Lua call and its reply into a ``Decision``; ``to_decision``
combines per-layer outcomes the same way for the memory store and for Redis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType

from ratewarden import algorithms
from ratewarden.algorithms._base import NEVER, Outcome
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate
from ratewarden.storage._keys import escape, state_key

__all__ = ["Plan", "argv", "build", "check_cost", "check_key", "parse", "to_decision"]

#: Values per layer in a script reply: allowed, remaining, reset_after_us, retry_after_us, delay_us.
REPLY_WIDTH = 5


@dataclass(frozen=True, slots=True)
class Plan:
    """One validated decision: which algorithm, which state keys, which parameters."""

    algorithm: ModuleType
    rates: tuple[Rate, ...]
    keys: tuple[str, ...]
    params: tuple[tuple[int, ...], ...]
    cost: int


def check_key(key: object) -> str:
    if not isinstance(key, str):
        raise ConfigurationError(f"key {key!r} must be a string")
    if not key:
        raise ConfigurationError("key must not be empty: pass the identity being limited")
    return key


def check_cost(cost: object) -> int:
    if isinstance(cost, bool) or not isinstance(cost, int):
        raise ConfigurationError(
            f"cost {cost!r} must be a whole number (0 checks without consuming)"
        )
    if cost < 0:
        raise ConfigurationError(f"cost {cost!r} must not be negative")
    return cost


def check_rates(rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
    if isinstance(rates, Rate):
        found: tuple[Rate, ...] = (rates,)
    elif isinstance(rates, list | tuple):
        found = tuple(rates)
    else:
        raise ConfigurationError(f"rates {rates!r} must be a Rate or a list of Rates")
    if not found:
        raise ConfigurationError("no rate given: pass a Rate or a list of Rates")
    for rate in found:
        if not isinstance(rate, Rate):
            raise ConfigurationError(f"{rate!r} is not a Rate; use Rate.parse('100/minute')")
    if len(set(found)) != len(found):
        raise ConfigurationError(f"rates {[str(r) for r in found]} list the same rate twice")
    return found


def build(algorithm: str, prefix: str, key: str, rates: Rate | Sequence[Rate], cost: int) -> Plan:
    module = algorithms.get(algorithm)
    key = check_key(key)
    cost = check_cost(cost)
    found = check_rates(rates)
    return Plan(
        algorithm=module,
        rates=found,
        keys=tuple(state_key(prefix, key, module.NAME, rate) for rate in found),
        params=tuple(module.params(rate) for rate in found),
        cost=cost,
    )


def argv(plan: Plan, now_us: int | None) -> list[int | str]:
    """Script arguments: now (or "" to read Redis TIME), cost, then each layer's params."""
    args: list[int | str] = ["" if now_us is None else now_us, plan.cost]
    for layer in plan.params:
        args.extend(layer)
    return args


def parse(plan: Plan, reply: Sequence[int]) -> Decision:
    """Turn ``{now_us, allowed, per layer: 5 numbers}`` into a Decision."""
    values = [int(v) for v in reply]
    outcomes = [
        Outcome(bool(values[i]), values[i + 1], values[i + 2], values[i + 3], values[i + 4])
        for i in range(2, 2 + REPLY_WIDTH * len(plan.rates), REPLY_WIDTH)
    ]
    return to_decision(plan.rates, outcomes, plan.cost)


def _seconds(us: int) -> float:
    return math.inf if us == NEVER else us / 1_000_000


def _layer(rate: Rate, outcome: Outcome, cost: int) -> Decision:
    return Decision(
        allowed=outcome.allowed,
        limit=rate.limit,
        remaining=outcome.remaining,
        reset_after=_seconds(outcome.reset_after_us),
        retry_after=_seconds(outcome.retry_after_us),
        delay=_seconds(outcome.delay_us),
        rate=rate,
        cost=cost,
    )


def to_decision(rates: Sequence[Rate], outcomes: Sequence[Outcome], cost: int) -> Decision:
    """Combine layers: the binding layer speaks for the decision (see ``Decision``)."""
    layers = tuple(_layer(r, o, cost) for r, o in zip(rates, outcomes, strict=True))
    denied = [layer for layer in layers if not layer.allowed]
    if denied:
        binding = max(denied, key=lambda layer: layer.retry_after)
    else:
        binding = min(layers, key=lambda layer: layer.remaining)
    return Decision(
        allowed=not denied,
        limit=binding.limit,
        remaining=binding.remaining,
        reset_after=max(layer.reset_after for layer in layers),
        retry_after=binding.retry_after,
        delay=max(layer.delay for layer in layers),
        rate=binding.rate,
        cost=cost,
        layers=layers,
    )


# --- concurrency slots -------------------------------------------------------------------------


def slot_key(prefix: str, key: str) -> str:
    """State key of the in-flight slots of ``key`` (independent of the limit, which may change)."""
    return f"{prefix}:{{{escape(check_key(key))}}}:concurrency"


def check_slot_request(limit: object, slots: object, ttl_us: object, lease_id: object) -> None:
    for name, value in (("limit", limit), ("slots", slots), ("ttl", ttl_us)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ConfigurationError(f"concurrency {name} {value!r} must be a whole number >= 1")
    check_lease_id(lease_id)


def check_lease_id(lease_id: object) -> str:
    if not isinstance(lease_id, str) or not lease_id:
        raise ConfigurationError(f"lease id {lease_id!r} must be a non-empty string")
    return lease_id


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
    )


def parse_acquire(limit: int, slots: int, reply: Sequence[int]) -> Decision:
    """``{now_us, allowed, remaining, reset_after_us, retry_after_us}`` -> Decision."""
    values = [int(v) for v in reply]
    return slot_decision(limit, slots, Outcome(bool(values[1]), values[2], values[3], values[4]))
