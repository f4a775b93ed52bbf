"""What every algorithm module provides, and how layers combine.

An algorithm module (``gcra``, ``token_bucket``, ...) is pure: it maps
``(params, state, now_us, cost)`` to an ``Outcome``, the state to store if the
decision commits, and that state's time to live. It never reads a clock and
never does I/O. Its Lua twin in ``storage/lua/`` computes the same numbers.

``params`` are whole numbers derived once from a ``Rate`` (``params(rate)``),
so that the Python function and the Lua script receive identical inputs: the
bucket algorithms' from ``_bucket.params``, the counting ones' (windows, log)
from ``counted_params``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate

__all__ = ["NEVER", "Algorithm", "Outcome", "Step", "layered", "layered_each", "new_outcome"]

#: ``retry_after_us`` of a request that can never be admitted (cost above capacity).
NEVER = -1


class Outcome(NamedTuple):
    """One layer's verdict, in whole microseconds (rounded up, never early).

    ``refill_after_us`` is the effective window of the IETF RateLimit field's
    ``t``: how long the key can give no more than ``remaining``. If the caller
    used all of ``remaining`` now, one more unit could be used after exactly this
    long (and not a microsecond sooner). Each algorithm module says what that
    is for it; it is at least 1 whenever it is known.

    A named tuple rather than a frozen dataclass: one is built per layer per
    decision, and a tuple costs a fraction to build.
    """

    allowed: bool
    remaining: int
    reset_after_us: int
    retry_after_us: int
    delay_us: int = 0
    refill_after_us: int = 0


#: ``new_outcome(Outcome, (allowed, remaining, reset_after_us, retry_after_us, delay_us,
#: refill_after_us))`` builds an Outcome in half the time of ``Outcome(...)``: the named
#: tuple's own ``__new__`` is a Python function that makes the same call. For hot paths
#: only, and with all six values: the defaults do not apply.
new_outcome = tuple.__new__

#: ``(outcome, state to store if every layer allows, time to live of that state in us)``.
Step = tuple[Outcome, Any, int]


class Algorithm(Protocol):
    """The shape of an algorithm module, for type checkers."""

    NAME: str

    def params(self, rate: Any) -> tuple[int, ...]: ...

    def check(self, params: tuple[int, ...], state: Any, now_us: int, cost: int) -> Step: ...


def counted_params(name: str, rate: Rate, per: str) -> tuple[int, ...]:
    """``(limit, period_us)`` of algorithm ``name``, which counts ``limit`` per ``per`` (its
    window, or period) and so has no separate burst: a rate with one is refused."""
    if rate.burst is not None and rate.burst != rate.limit:
        raise ConfigurationError(
            f"rate {rate}: the {name} algorithm counts {rate.limit} per {per} and has no "
            "separate burst; drop the burst or use a bucket algorithm (gcra, token_bucket, "
            "leaky_bucket)"
        )
    return (rate.limit, rate.period_us)


def ceil_div(a: int, b: int) -> int:
    """``ceil(a / b)`` for integers, ``b > 0``."""
    return -(-a // b)


def layered(
    check: Callable[[tuple[int, ...], Any, int, int], Step],
    params: Sequence[tuple[int, ...]],
    states: Sequence[Any],
    now_us: int,
    cost: int,
) -> tuple[list[Outcome], list[tuple[Any, int]] | None]:
    """Check every layer; commit all or nothing.

    Returns the outcomes and, when every layer allowed and ``cost > 0``, the
    ``(state, ttl_us)`` pairs to write. When any layer denies, the layers that
    would have allowed are re-evaluated with cost 0, so their outcomes show the
    state that was actually kept (nothing was consumed). Each Lua script
    implements exactly this loop (``layered_each``, every layer at one cost).
    """
    outcomes, writes = layered_each(check, params, states, now_us, [cost] * len(params))
    if writes is None or cost == 0:
        return outcomes, None
    return outcomes, [write for write in writes if write is not None]  # all of them: cost > 0


def layered_each(
    check: Callable[[tuple[int, ...], Any, int, int], Step],
    params: Sequence[tuple[int, ...]],
    states: Sequence[Any],
    now_us: int,
    costs: Sequence[int],
) -> tuple[list[Outcome], list[tuple[Any, int] | None] | None]:
    """``layered`` with a cost per layer: several decisions of one algorithm decided together.

    Returns the outcomes and, when every layer allowed, per layer the
    ``(state, ttl_us)`` to write, or None for a layer of cost 0 (a check writes
    nothing). When any layer denies, nothing is written and the layers that
    would have allowed are re-evaluated with cost 0.
    """
    steps = [check(p, s, now_us, c) for p, s, c in zip(params, states, costs, strict=True)]
    if all(step[0].allowed for step in steps):
        writes = [
            (step[1], step[2]) if c > 0 else None for step, c in zip(steps, costs, strict=True)
        ]
        return [step[0] for step in steps], writes
    outcomes = [
        step[0] if not step[0].allowed else check(p, s, now_us, 0)[0]
        for step, p, s in zip(steps, params, states, strict=True)
    ]
    return outcomes, None
