"""``--charge-denied``'s fixed window: every hit charged counts, a denied call's too.

envoyproxy/ratelimit counts a descriptor with ``INCRBY`` on every call, whatever it
decides, and calls it over when the count passes the limit (unless
``STOP_CACHE_KEY_INCREMENT_WHEN_OVERLIMIT=true``). ratewarden's ``fixed_window`` never
counts a denied call, so its count stops at the limit, and a check (``hits_addend`` 0) at
a full counter fits. Upstream's "check on the request, charge when the stream is done"
pattern relies on the other way: the charge that passes the limit makes every later check
over until the window ends. With ``charge_denied`` the service decides every
``fixed_window`` descriptor, checks and charges, with this step in place of the store's
``hit`` (the limiter's ``via``: the same breaker, failure mode, over-limit cache and
metrics).

Per rate of the descriptor, in its window ``now // period`` (epoch-aligned, as
``fixed_window``): the count is every hit charged in the window; the call's cost is added
to every rate (a cost of 0 checks, adding nothing); a rate is over when the count passes
its limit, and the call is allowed when none is. An over rate reports ``remaining`` 0 and
the window's end as its retry time (never, for a cost above the limit); the rest as
``fixed_window`` reports them.

The step is one store operation (an ``Op``: ``storage/lua/charged_window.lua`` on Redis,
its pure twin ``algorithms.charged_window.run`` under the memory store's lock or on a
memcached item; the same ARGV, reply and writes), on counters of its own
(``<prefix>:{<key>}:charged_window:<period_us>``), not the ``fixed_window`` ones: a service
started with the other setting counts afresh. The key holds no limit, as upstream's holds
none: an edited limit, or an Envoy limit override, counts on the same window.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from ratewarden.algorithms import NEVER, charged_window
from ratewarden.decision import Decision, layered_decision, make_decision
from ratewarden.limiter import Op, record_key
from ratewarden.rate import Rate

__all__ = ["NAME", "async_via", "charged_window_op", "decision", "via"]

#: The operation's name: its script's, its keys' kind.
NAME = "charged_window"

Via = Callable[[str, str, Rate | Sequence[Rate], int], Decision]
AsyncVia = Callable[[str, str, Rate | Sequence[Rate], int], Coroutine[Any, Any, Decision]]


def _rates(rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
    return (rates,) if isinstance(rates, Rate) else tuple(rates)


def charged_window_op(prefix: str, key: str, rates: Sequence[Rate], cost: int) -> Op:
    """The step of ``key`` (a checked counter key) at ``cost`` over ``rates``."""
    keys = tuple(record_key(prefix, key, NAME, str(rate.period_us)) for rate in rates)
    args: list[int | str] = ["", cost]
    for rate in rates:
        args += [rate.limit, rate.period_us]
    return Op(NAME, keys, tuple(args), charged_window.run)


def decision(rates: Sequence[Rate], cost: int, reply: Sequence[int]) -> Decision:
    """The Decision of a reply, as a store's ``hit`` would give it for these rates."""
    layers = []
    for i, rate in enumerate(rates):
        numbers = [int(v) for v in reply[2 + 6 * i : 8 + 6 * i]]
        allowed, remaining, reset_us, retry_us, _, refill_us = numbers
        layers.append(
            make_decision(
                bool(allowed),
                rate.limit,
                remaining,
                reset_us / 1_000_000,
                math.inf if retry_us == NEVER else retry_us / 1_000_000,
                0.0,
                rate,
                cost,
                (),
                False,
                "",
                refill_us / 1_000_000,
            )
        )
    if len(layers) > 1:
        return layered_decision(layers, cost)
    layer = layers[0]
    return make_decision(
        layer.allowed,
        layer.limit,
        layer.remaining,
        layer.reset_after,
        layer.retry_after,
        0.0,
        layer.rate,
        cost,
        (layer,),
        False,
        "",
        layer.refill_after,
    )


def via(store: Any) -> Via:
    """What a ``Limiter`` asks in place of ``store.hit`` (``hit_flow``'s ``via``)."""
    prefix: str = getattr(store, "prefix", "rw")

    def charged(algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int) -> Decision:
        found = _rates(rates)
        return decision(found, cost, store.apply(charged_window_op(prefix, key, found, cost)))

    return charged


def async_via(store: Any) -> AsyncVia:
    """``via`` for an ``AsyncLimiter`` over an asyncio store."""
    prefix: str = getattr(store, "prefix", "rw")

    async def charged(
        algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int
    ) -> Decision:
        found = _rates(rates)
        reply = await store.apply(charged_window_op(prefix, key, found, cost))
        return decision(found, cost, reply)

    return charged
