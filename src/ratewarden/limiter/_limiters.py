"""Limiter / AsyncLimiter: the two drivers of the decision core.

Every operation is a flow of ``DecisionCore``; ``Limiter`` runs it with a
blocking loop, ``AsyncLimiter`` with an awaiting one. The methods are made from
the flows once (``blocking`` / ``awaiting``: the flow's signature and docstring,
the driver's loop), so a flow is written, documented and typed in one place.
``hit`` is written out in both: a plain limiter (every in-process part off)
answers it with the store's own call, without building the flow, and that
shortcut is the hot path of every in-process decision.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator, Callable, Coroutine, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from types import FunctionType, MethodType
from typing import Any, Concatenate, ParamSpec, TypeVar

from ratewarden.checks import check_bool
from ratewarden.decision import Decision
from ratewarden.deprecation import UNSET, renamed
from ratewarden.errors import ConfigurationError
from ratewarden.limiter._arguments import argument_error, arguments_checked, placed, public_name
from ratewarden.limiter._core import DecisionCore, hook_refused
from ratewarden.limiter._flows import Flow, adrive, drive
from ratewarden.limiter._settings import FAILURE_MODES, FailureHook
from ratewarden.limiter._slots import Lease
from ratewarden.limiter._undo import given_back_if_interrupted, undo_cancelled
from ratewarden.rate import Rate
from ratewarden.storage import AsyncStore, Store
from ratewarden.storage.memory import AsyncMemoryStore, MemoryStore

__all__ = ["AsyncLimiter", "Limiter", "awaiting", "blocking"]

T = TypeVar("T")
P = ParamSpec("P")
Rates = Rate | Sequence[Rate]


def blocking(flow: Callable[Concatenate[Any, P], Flow[T]]) -> Callable[Concatenate[Any, P], T]:
    """A flow method as a blocking method: the same arguments, run with ``self.run``."""

    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            result: T = self.run(flow(self, *args, **kwargs))
        except TypeError as exc:  # the arguments' (or one raised inside, as it was)
            error = argument_error(self, flow, exc, args, kwargs)
            if error is exc:
                raise
            raise error from None
        except ConfigurationError as exc:  # bad input, the store's or the flow's refusal
            placed(exc, public_name(self, flow))
            raise
        return result

    _named(method, flow)
    return method


def awaiting(
    flow: Callable[Concatenate[Any, P], Flow[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """A flow method as a coroutine method: the same arguments, run with ``await self.run``."""

    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        try:
            result: T = await self.run(flow(self, *args, **kwargs))
        except TypeError as exc:  # the arguments' (or one raised inside, as it was)
            error = argument_error(self, flow, exc, args, kwargs)
            if error is exc:
                raise
            raise error from None
        except ConfigurationError as exc:  # bad input, the store's or the flow's refusal
            placed(exc, public_name(self, flow))
            raise
        return result

    _named(method, flow, coroutine=True)
    return method


def _named(method: Any, flow: Callable[..., Any], *, coroutine: bool = False) -> None:
    """Give ``method`` the flow's name (without ``_flow``), docstring and signature, with the
    flow's result as what it returns (``help`` and ``inspect`` show the method as written)."""
    name = flow.__name__.removesuffix("_flow")
    method.__name__ = name
    method.__qualname__ = name
    method.__doc__ = flow.__doc__
    signature = inspect.signature(flow)
    returns = str(signature.return_annotation)
    if returns.startswith("Flow[") and returns.endswith("]"):
        returns = returns[len("Flow[") : -1]
    if coroutine:
        returns = f"Coroutine[Any, Any, {returns}]"
    method.__signature__ = signature.replace(return_annotation=returns)


def _refuse_shadow(limiter: object, shadow: object) -> None:
    """Refuse a ``shadow`` that is not True or False, naming the method called: a truthy
    string (``"false"`` from an environment variable) would switch enforcement off.
    Called only when ``shadow`` is neither, so the hot path pays two identity tests."""
    check_bool(f"{_hit_called(limiter)}: shadow", shadow)


def _hit_called(limiter: object) -> str:
    """The method a hit was called as: ``TwoTier.hit``, or ``AsyncLimiter.hit_now``."""
    if isinstance(limiter, _Blocking):
        return f"{type(limiter._limiter).__name__}.hit_now"
    return f"{type(limiter).__name__}.hit"


def _renamed(failure: str | None, failure_mode: str | None) -> str | None:
    """``hit(failure=...)``, the deprecated name of ``failure_mode=``: its value, with a
    DeprecationWarning naming the caller of ``hit``."""
    return renamed("hit", "failure", "failure_mode", failure, failure_mode, None, stacklevel=4)


class Limiter(DecisionCore):
    """Decisions over a synchronous ``Store`` (a ``MemoryStore`` when none is given).

    ``hit(key, rates, cost)`` returns a ``Decision``; several rates on one key
    are checked and consumed all or nothing in one atomic store step. Every
    option below is off by default, and then a hit is one store call:

    - ``on_decision(algorithm, key, decision)``: called after every hit.
    - ``local``: the local bucket, checked first (a fraction of each key's rates,
      fixed rates, or None). A local denial never reaches the store.
    - ``negative_cache``: keys remembered as denied until their retry time (a
      number of keys, or a ``NegativeCache`` to share).
    - ``lease``: buy ``k`` units per store call and spend them here;
      ``lease_ttl``: seconds a balance lives (default: the longest period).
    - ``failure_mode``: ``"open"``, ``"closed"`` or ``"local"``, answering when
      the store is unavailable or the breaker is open. None (the default) raises
      ``StorageUnavailableError`` instead. ``failure`` is its deprecated name.
    - ``breaker``: a ``CircuitBreaker`` in front of the store (share one per store).
    - ``metrics``: ``ratewarden.metrics.Metrics`` hooks; ``name`` is the rule label.
    - ``clock``: time for the in-process parts (default: the store's clock); without a
      store, the in-process ``MemoryStore`` made for the limiter runs on it too
      (``Limiter(clock=ManualClock())`` for tests and simulations).

    ``TwoTier`` is a Limiter with the two-tier defaults (a negative cache, a
    breaker, fail open).
    """

    memory_store = MemoryStore
    awaited = False
    store: Store

    def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` (one of this limiter's ``*_flow`` methods, or a composition of
        them) on the store, blocking."""
        return drive(self.store, flow, self.store.clock)

    def hit(
        self,
        key: str,
        rates: Rates,
        cost: int = 1,
        *,
        shadow: bool = False,
        failure_mode: str | None = None,
        on_failure: FailureHook | None = None,
        failure: str | None = UNSET,
    ) -> Decision:
        """Consume ``cost`` from every rate on ``key`` if all allow; never raises when over.

        With ``shadow=True`` a denial is reported as ``allowed=True, shadowed=True``
        (evaluated and counted, never enforced); like any denial it consumes nothing and
        keeps its ``retry_after`` (how long enforcing would have made it wait). A shadow
        hit the limit allows consumes as any hit does, so the shadow limit counts the real
        traffic and denies what it would deny if enforced. ``failure_mode``
        overrides the limiter's failure mode for this call; ``on_failure`` reports
        the failures it answers (see ``hit_flow``). ``failure`` is the deprecated
        name of ``failure_mode``.
        """
        if shadow is not False and shadow is not True:
            _refuse_shadow(self, shadow)
        if failure is not UNSET:  # the deprecated name
            failure_mode = _renamed(failure, failure_mode)
        # A plain limiter's hit is the store's one call, whatever failure mode answers its
        # error (the test written out: a function's frame costs a tenth of a kernel's hit).
        if self.plain and not shadow and (failure_mode is None or failure_mode in FAILURE_MODES):
            try:
                return self.store.hit(self.algorithm, key, rates, cost)
            except Exception as error:
                return _failed(self, error, key, rates, cost, failure_mode, on_failure)
        try:
            flow = self.hit_flow(
                key, rates, cost, shadow=shadow, failure_mode=failure_mode, on_failure=on_failure
            )
            return drive(self.store, flow)
        except ConfigurationError as error:
            placed(error, _hit_called(self))
            raise

    peek = blocking(DecisionCore.peek_flow)
    hit_all = blocking(DecisionCore.hit_all_flow)
    reset = blocking(DecisionCore.reset_flow)
    acquire = wait = blocking(DecisionCore.acquire_flow)
    acquire_slot = given_back_if_interrupted(
        blocking(DecisionCore.acquire_slot_flow), awaited=False
    )
    release_slot = blocking(DecisionCore.release_slot_flow)
    renew_slot = blocking(DecisionCore.renew_slot_flow)

    @arguments_checked  # a misspelt keyword named as TwoTier.slot's, not Limiter.slot()'s
    @contextmanager
    def slot(self, key: str, limit: int, *, slots: int = 1, ttl: float = 60.0) -> Iterator[Lease]:
        """``with limiter.slot(key, 10) as lease:``, released on exit when it was granted."""
        lease = self.acquire_slot(key, limit, slots=slots, ttl=ttl)
        try:
            yield lease
        finally:
            self.release_slot(lease)


class AsyncLimiter(DecisionCore):
    """The asyncio twin of ``Limiter`` over an ``AsyncStore``; the same options."""

    memory_store = AsyncMemoryStore
    awaited = True
    store: AsyncStore

    async def run(self, flow: Flow[T]) -> T:
        """Drive ``flow`` on the store, awaiting each call; see ``Limiter.run``."""
        return await adrive(self.store, flow, self.store.clock)

    @property
    def hit_now(self) -> Callable[..., Decision] | None:
        """``hit`` without an await when the store decides in this process, else None.

        An ``AsyncMemoryStore`` has a blocking view of the same state
        (``store.immediate``): ``Limiter.hit`` then runs on it at once. Middleware
        calls this to skip two coroutines per request.
        """
        immediate = getattr(self.store, "immediate", None)
        if immediate is None:
            return None
        # A bound method: a call with keywords makes no dict of them.
        return MethodType(_hit_now(type(self)), _Blocking(self, immediate))

    async def hit(
        self,
        key: str,
        rates: Rates,
        cost: int = 1,
        *,
        shadow: bool = False,
        failure_mode: str | None = None,
        on_failure: FailureHook | None = None,
        failure: str | None = UNSET,
    ) -> Decision:
        """See ``Limiter.hit``."""
        if shadow is not False and shadow is not True:
            _refuse_shadow(self, shadow)
        if failure is not UNSET:  # the deprecated name
            failure_mode = _renamed(failure, failure_mode)
        if self.plain and not shadow and (failure_mode is None or failure_mode in FAILURE_MODES):
            try:
                return await self.store.hit(self.algorithm, key, rates, cost)
            except Exception as error:
                return _failed(self, error, key, rates, cost, failure_mode, on_failure)
        try:
            flow = self.hit_flow(
                key, rates, cost, shadow=shadow, failure_mode=failure_mode, on_failure=on_failure
            )
            return await adrive(self.store, flow)
        except ConfigurationError as error:
            placed(error, _hit_called(self))
            raise

    peek = awaiting(DecisionCore.peek_flow)
    hit_all = awaiting(DecisionCore.hit_all_flow)
    reset = awaiting(DecisionCore.reset_flow)
    acquire = wait = awaiting(DecisionCore.acquire_flow)
    acquire_slot = given_back_if_interrupted(awaiting(DecisionCore.acquire_slot_flow), awaited=True)
    release_slot = awaiting(DecisionCore.release_slot_flow)
    renew_slot = awaiting(DecisionCore.renew_slot_flow)

    @arguments_checked
    @asynccontextmanager
    async def slot(
        self, key: str, limit: int, *, slots: int = 1, ttl: float = 60.0
    ) -> AsyncIterator[Lease]:
        """See ``Limiter.slot``; a cancelled block's release is shielded from a second cancel."""
        lease = await self.acquire_slot(key, limit, slots=slots, ttl=ttl)
        try:
            yield lease
        except asyncio.CancelledError:
            # Awaited here, the release would be cut by the next cancel (anyio's scopes cancel
            # again at every loop turn), and a store may drop a call cancelled before it was
            # sent (memcached): the slot would stay taken until its ttl.
            await undo_cancelled(f"slot {lease.lease_id!r} of {key!r}", self.release_slot(lease))
            raise
        except BaseException:
            await self.release_slot(lease)
            raise
        await self.release_slot(lease)


#: ``Limiter.hit`` as each AsyncLimiter class's ``hit_now``: see ``_hit_now``.
_HIT_NOW: dict[type, Callable[..., Decision]] = {}


def _hit_now(cls: type) -> Callable[..., Decision]:
    """``Limiter.hit``'s code under the name ``Cls.hit_now``, made once per class.

    Python names a bad call (a misspelt keyword) by the code's qualified name, which
    would be ``Limiter.hit()`` for a call of ``AsyncLimiter.hit_now``. Wrapping it to say
    otherwise would cost the middleware's hot path a frame; a renamed copy costs nothing.
    """
    found = _HIT_NOW.get(cls)
    if found is None:
        hit: Any = Limiter.hit
        name = f"{cls.__name__}.hit_now"
        code = hit.__code__.replace(co_name="hit_now", co_qualname=name)
        made: Any = FunctionType(code, hit.__globals__, "hit_now", hit.__defaults__)
        made.__kwdefaults__ = hit.__kwdefaults__
        made.__qualname__ = name
        made.__doc__ = hit.__doc__
        found = _HIT_NOW[cls] = made
    return found


class _Blocking:
    """An ``AsyncLimiter`` as ``Limiter.hit`` sees it, over its store's blocking view."""

    __slots__ = ("_limiter", "store")

    def __init__(self, limiter: AsyncLimiter, store: Store) -> None:
        self._limiter = limiter
        self.store = store

    # What Limiter.hit reads on every call, as properties: a miss that falls through to
    # __getattr__ costs a raised AttributeError first.
    @property
    def plain(self) -> bool:
        return self._limiter.plain

    @property
    def algorithm(self) -> str:
        return self._limiter.algorithm

    def __getattr__(self, name: str) -> Any:
        return getattr(self._limiter, name)


class _Failing:
    """A store whose every method raises ``error``: what a plain hit's one call did."""

    __slots__ = ("error",)

    def __init__(self, error: Exception) -> None:
        self.error = error

    def __getattr__(self, name: str) -> Any:
        raise self.error


def _failed(
    limiter: DecisionCore,
    error: Exception,
    key: str,
    rates: Rates,
    cost: int,
    failure_mode: str | None,
    on_failure: FailureHook | None,
) -> Decision:
    """A plain limiter's hit whose one store call raised ``error``.

    Without a per-call failure mode the error is raised, as the store raised it.
    With one, the flow runs on a store raising the same error, so the failure
    mode answers (or the error is raised) exactly as the flow would have.
    """
    try:
        if failure_mode is None:
            raise error
        if on_failure is not None and not callable(on_failure):
            # hit_flow refuses it; in an outage the failure mode answers, the refusal logged.
            on_failure = _refusing(on_failure)
        flow = limiter.hit_flow(key, rates, cost, failure_mode=failure_mode, on_failure=on_failure)
        return drive(_Failing(error), flow, limiter.clock)
    except ConfigurationError as refused:  # bad input, which the store or the flow refused
        placed(refused, _hit_called(limiter))
        raise


def _refusing(hook: object) -> FailureHook:
    """A hook that raises the refusal of ``hook`` (not callable) when told of a failure,
    so the limiter logs it as a failing hook and the answer stands."""

    def refuse(error: Exception) -> None:
        raise hook_refused(hook) from error

    return refuse
