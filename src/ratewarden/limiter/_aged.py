"""Decisions this process makes without the store: aged, assumed by a failure mode, or marked.

Built with ``make_decision`` (no frozen-dataclass ``replace``): a request answered
by a lease or by the negative cache costs little more than this.
"""

from __future__ import annotations

import math

from ratewarden.decision import Decision, make_decision
from ratewarden.rate import Rate

__all__ = ["NO_BREAKER_WAIT", "aged", "assumed", "marked"]


_INF = math.inf


def _shifted(us: float, elapsed_us: int) -> float:
    if math.isinf(us):
        return us
    return max(0, round(us * 1_000_000) - elapsed_us) / 1_000_000


def aged(decision: Decision, elapsed_us: int, cost: int, extra: int = 0) -> Decision:
    """``decision`` as seen ``elapsed_us`` later, for a request of ``cost``, ``extra`` more room.

    Built with ``make_decision`` (no frozen-dataclass ``replace``): this is the
    whole cost of a request answered by a lease or the negative cache.
    """
    layers = decision.layers
    if len(layers) == 1:
        layer = layers[0]
        reset, retry, refill = layer.reset_after, layer.retry_after, layer.refill_after
        # _shifted, inline: the lease hit's whole cost is here.
        if abs(reset) != _INF:
            reset = max(0, round(reset * 1_000_000) - elapsed_us) / 1_000_000
        if abs(retry) != _INF:
            retry = max(0, round(retry * 1_000_000) - elapsed_us) / 1_000_000
        if refill:
            refill = max(0, round(refill * 1_000_000) - elapsed_us) / 1_000_000
        aged = make_decision(
            layer.allowed,
            layer.limit,
            layer.remaining + extra,
            reset,
            retry,
            layer.delay,
            layer.rate,
            cost,
            (),
            False,
            "",
            refill,
        )
        if (
            layer.remaining == decision.remaining
            and layer.reset_after == decision.reset_after
            and layer.retry_after == decision.retry_after
            and layer.refill_after == decision.refill_after
            and layer.allowed is decision.allowed
            and layer.rate is decision.rate
            and layer.limit == decision.limit
            and layer.delay == decision.delay
        ):
            # One rate: the decision is its layer (the usual case); age the numbers once.
            return make_decision(
                aged.allowed,
                aged.limit,
                aged.remaining,
                aged.reset_after,
                aged.retry_after,
                aged.delay,
                aged.rate,
                cost,
                (aged,),
                False,
                "",
                aged.refill_after,
            )
        return _aged_one(decision, elapsed_us, cost, extra, (aged,))
    aged_layers = tuple([_aged_one(layer, elapsed_us, cost, extra, ()) for layer in layers])
    return _aged_one(decision, elapsed_us, cost, extra, aged_layers)


def _aged_one(
    d: Decision, elapsed_us: int, cost: int, extra: int, layers: tuple[Decision, ...]
) -> Decision:
    return make_decision(
        d.allowed,
        d.limit,
        d.remaining + extra,
        _shifted(d.reset_after, elapsed_us),
        _shifted(d.retry_after, elapsed_us),
        d.delay,
        d.rate,
        cost,
        layers,
        False,
        "",
        _shifted(d.refill_after, elapsed_us),
    )


#: ``retry_after`` of a ``closed`` answer when no breaker says when the store is tried again:
#: a default breaker's cool-down (``TwoTier``'s), and the 1 s the middlewares' 503 sends. With 0
#: a client retried at once (``Retry-After: 0``) and ``acquire`` spun on the failing store.
NO_BREAKER_WAIT = 1.0


def assumed(rates: tuple[Rate, ...], cost: int, mode: str, wait: float) -> Decision:
    """A decision the store did not make: open (allowed, nothing counted) or closed (denied).

    Closed waits ``wait`` for everything (the store is asked again then), its
    effective window included; open knows no window (0).
    """
    allowed = mode == "open"

    def one(rate: Rate, layers: tuple[Decision, ...]) -> Decision:
        return make_decision(
            allowed,
            rate.limit,
            rate.limit if allowed else 0,
            0.0 if allowed else wait,
            0.0 if allowed else wait,
            0.0,
            rate,
            cost,
            layers,
            degraded=mode,
            refill_after=0.0 if allowed else wait,
        )

    binding = min(rates, key=lambda rate: rate.limit / rate.period_us)
    return one(binding, tuple(one(rate, ()) for rate in rates))


def marked(decision: Decision, mode: str) -> Decision:
    """``decision`` with ``degraded=mode`` (``make_decision``: no dataclasses.replace)."""
    d = decision
    return make_decision(
        d.allowed,
        d.limit,
        d.remaining,
        d.reset_after,
        d.retry_after,
        d.delay,
        d.rate,
        d.cost,
        d.layers,
        shadowed=d.shadowed,
        degraded=mode,
        refill_after=d.refill_after,
    )
