"""A limiter's vocabulary: failure modes, hooks, and the small checks every flow uses."""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, NoReturn

from ratewarden import algorithms
from ratewarden.checks import refuse_class
from ratewarden.decision import Decision
from ratewarden.errors import ConfigurationError
from ratewarden.limiter._aged import aged
from ratewarden.limiter._leases import Balance
from ratewarden.rate import Rate

__all__ = [
    "FAILURE_MODES",
    "LOCAL_ALGORITHM",
    "DecisionHook",
    "FailureHook",
    "Pending",
    "algorithm_name",
    "check_failure_mode",
    "check_store",
    "refuse_limiter",
    "check_timeout",
    "from_lease",
    "balance_ttl_us",
]

#: The failure modes: what answers when the store is unavailable (allow, deny, or decide in
#: this process). The one tuple: the rule files, the tiers and the middleware take theirs from it.
FAILURE_MODES = ("open", "closed", "local")
#: The in-process bucket's algorithm, whatever the global one is.
LOCAL_ALGORITHM = "gcra"

#: Called after every decision with ``(algorithm, key, decision)``; see ``ratewarden.metrics``.
DecisionHook = Callable[[str, str, Decision], None]
#: Called with the exception when a store call fails and the failure mode answers instead.
FailureHook = Callable[[Exception], None]


def check_failure_mode(failure_mode: object, *, none_ok: bool = False) -> str | None:
    """A failure mode (``open``, ``closed``, ``local``), or None where allowed."""
    if failure_mode is None and none_ok:
        return None
    if failure_mode not in FAILURE_MODES:
        raise ConfigurationError(
            f"failure_mode {failure_mode!r} must be one of {', '.join(FAILURE_MODES)}"
        )
    return str(failure_mode)


def check_store(owner: str, store: object, *, awaited: bool) -> None:
    """Refuse, at construction, a ``store`` that is none, a store class (``RedisStore``: the
    ``()`` or ``.from_url(url)`` forgotten), or of the other twin: a blocking limiter over an
    asyncio store (its ``hit`` a coroutine function) would get coroutines for decisions (each
    one true, so ``if limiter.hit(...)`` would admit everything), and an asyncio limiter over
    one of ratewarden's blocking stores fails at the first call. A store of the caller's
    whose plain ``hit`` returns awaitables (a wrapper) is taken by the asyncio twin. The store
    is named by its type only: a URL given by mistake may hold a password."""
    refuse_class(owner, "store", store, needs="hit")
    hit = getattr(store, "hit", None)
    name = type(store).__name__
    kind = f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"
    if not callable(hit):
        stores = (
            "an AsyncMemoryStore, AsyncRedisStore.from_url(url), or another asyncio store"
            if awaited
            else "a MemoryStore, RedisStore.from_url(url), or another blocking store"
        )
        raise ConfigurationError(
            f"{owner}: store is {kind}, not a store (it has no hit); give {stores} of "
            "ratewarden.storage"
        )
    if inspect.iscoroutinefunction(hit) == awaited:
        return
    if awaited:
        if not type(store).__module__.startswith("ratewarden."):
            return  # a wrapper of the caller's may hand on an asyncio store's awaitables
        raise ConfigurationError(
            f"{owner}: store is {kind}, a blocking store; the asyncio twin needs an asyncio "
            "store (AsyncMemoryStore, AsyncRedisStore, ...), or use the blocking twin"
        )
    raise ConfigurationError(
        f"{owner}: store is {kind}, an asyncio store; the blocking twin needs a blocking "
        "store (MemoryStore, RedisStore, ...), or use the asyncio twin"
    )


def refuse_limiter(owner: str, given: object) -> NoReturn:
    """Refuse a limiter given where a store goes (``TwoTier(Limiter(store))``): its ``hit``
    takes other arguments, and it would fail at the first call with a TypeError; or a
    limiter class (``Limiter(Limiter)``)."""
    if isinstance(given, type):
        kind = f"the class {given.__name__}"
    else:
        name = type(given).__name__
        kind = f"{'an' if name[:1] in 'AEIOU' else 'a'} {name}"
    raise ConfigurationError(
        f"{owner}: store is {kind}, not a store; give {owner} the store itself "
        f"({owner}(store, ...)). Limiters do not nest: a TwoTier is a Limiter with the "
        "two-tier defaults: build it over the store in place of a Limiter, not around one"
    )


class Pending(NamedTuple):
    """What a hit hands from its in-process part to its store part: the checked call,
    the local bucket's decision, the time."""

    algorithm: str
    key: str
    rates: tuple[Rate, ...]
    given: Rate | Sequence[Rate]
    cost: int
    failure_mode: str | None
    local: Decision | None
    now: int
    leased: bool
    on_failure: FailureHook | None
    via: Callable[..., Any] | None = None


def algorithm_name(algorithm: str) -> str:
    """The algorithm ``algorithm`` names (a name is its own, the usual case: no lookup),
    or a ConfigurationError listing the choices."""
    if type(algorithm) is str and algorithm in algorithms.ALGORITHMS:
        return algorithm
    if algorithm == "concurrency":  # algorithms.md's table lists it: the name tried first
        raise ConfigurationError(
            "algorithm 'concurrency' is not a rate, so it is not an algorithm=: every limiter "
            "holds concurrency slots itself, with limiter.slot(key, limit, ttl=...) (a context "
            "manager) or limiter.acquire_slot(key, limit, ttl=...) and release_slot(lease) "
            "(docs/algorithms.md#concurrency); algorithm= is one of: "
            + ", ".join(sorted(algorithms.ALGORITHMS))
        )
    name: str = algorithms.get(algorithm).NAME
    return name


def from_lease(held: Balance, cost: int, now: int) -> Decision:
    """An allowed Decision paid from a lease: the grant, aged, with the units still held."""
    return aged(held.grant, now - held.granted_us, cost, held.units)


def balance_ttl_us(ttl: float | None) -> int:
    """Whole microseconds, or 0 for "the longest period of the rates"."""
    if ttl is None:
        return 0
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
        raise ConfigurationError(f"lease_ttl {ttl!r} must be a positive number of seconds")
    return max(1, math.ceil(ttl * 1_000_000))


def check_timeout(timeout: float | None) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout >= 0:
        raise ConfigurationError(f"timeout {timeout!r} must be seconds >= 0, or None to wait")
    return float(timeout)
