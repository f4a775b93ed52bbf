"""Load shedding by traffic class: the lowest classes go first, critical keeps a reserve.

Each traffic class has a ceiling, the utilization up to which it is still
admitted; classes are listed from most to least important and the ceilings
fall down the list. The default ``ShedPolicy``:

==========  =======  =====================================================
class       ceiling  admitted while utilization (after this request) is
==========  =======  =====================================================
critical    1.0      within capacity
normal      0.8      at most 80 %: the top 20 % is critical's reserve
batch       0.6      at most 60 %
test        0.4      at most 40 %
==========  =======  =====================================================

Two shedders use it:

- ``LoadShedder``: the app reports utilization (worker CPU, queue depth, GPU
  memory: any number in [0, 1]) through a callable; ``admit(cls)`` decides.
- ``FleetShedder`` / ``AsyncFleetShedder``: utilization is the fleet-wide
  in-flight count on one concurrency key (memory or Redis). A request of
  class ``c`` takes a slot with limit ``floor(ceiling(c) * capacity)``, in the
  store's one atomic step: batch gets a slot only while fewer than 60 % of
  the slots are in use, and critical can always use the last 20 %. The slot is
  the limiter's (``acquire_slot_flow``); the twins are made of the flows.
  ``acquire`` gives a ``ShedAcquired``: the pair ``(decision, lease)``, true only
  when the request was admitted. Its lease id is made before the acquire is sent,
  so an acquire cancelled (or interrupted) while the store decides gives the slot
  back by id, as ``held_slot``'s does (``_slots``): else it would stay held by
  nobody for a whole TTL, and count as load.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import uuid
from collections.abc import AsyncIterator, Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import ClassVar, NamedTuple

from ratewarden.budgets._slots import (
    areleased_after,
    given_back_if_cancelled,
    given_back_if_interrupted,
    release_by_id,
    released_after,
)
from ratewarden.budgets._twins import Driven, L, check_limiter
from ratewarden.checks import keywords_checked
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import (
    AsyncLimiter,
    Flow,
    Lease,
    Limiter,
    awaiting,
    blocking,
    lease_ttl_us,
)

__all__ = [
    "DEFAULT_POLICY",
    "AsyncFleetShedder",
    "FleetShedder",
    "LoadShedder",
    "ShedAcquired",
    "ShedDecision",
    "ShedPolicy",
]


_DEFAULT_CLASSES = (("critical", 1.0), ("normal", 0.8), ("batch", 0.6), ("test", 0.4))


def _pairs(classes: object) -> tuple[tuple[str, float], ...]:
    """``classes`` as ``(name, ceiling)`` pairs: a mapping's items, or each item of a sequence."""
    if isinstance(classes, Mapping):
        return tuple(classes.items())
    if isinstance(classes, set | frozenset):
        raise ConfigurationError(
            f"classes {classes!r} is a set, which has no order: give (name, ceiling) pairs in "
            "a list or tuple, most important first, or a mapping in that order"
        )
    if isinstance(classes, str | bytes) or not isinstance(classes, Iterable):
        raise ConfigurationError(
            f"classes {classes!r} must be (name, ceiling) pairs, most important first, "
            "e.g. (('critical', 1.0), ('batch', 0.5)), or a mapping {'critical': 1.0, ...}"
        )
    found = tuple(classes)
    for item in found:
        if not isinstance(item, tuple | list) or len(item) != 2:
            raise ConfigurationError(
                f"classes item {item!r} must be a (name, ceiling) pair, e.g. ('batch', 0.5)"
            )
    return tuple((name, ceiling) for name, ceiling in found)


@dataclass(frozen=True, slots=True, init=False)
class ShedPolicy:
    """Traffic classes, most important first, each with its utilization ceiling in (0, 1].

    ``classes`` is a sequence of ``(name, ceiling)`` pairs, or a mapping of name to
    ceiling (in its order). The first class must have ceiling 1.0 and every other a
    lower one, so the first class always has a reserve of ``1 - second ceiling``.
    """

    classes: tuple[tuple[str, float], ...]

    @keywords_checked
    def __init__(
        self, classes: Iterable[tuple[str, float]] | Mapping[str, float] = _DEFAULT_CLASSES
    ) -> None:
        found = _pairs(classes)
        if len(found) < 2:
            given = dict(found) if isinstance(classes, Mapping) else found
            raise ConfigurationError(
                f"ShedPolicy: classes {given!r}: a shed policy needs at least two classes (the "
                "first with ceiling 1.0, the others lower), e.g. {'critical': 1.0, 'batch': 0.5}"
            )
        seen: set[str] = set()
        for name, ceiling in found:
            if not isinstance(name, str) or not name:
                raise ConfigurationError(
                    f"classes item {(name, ceiling)!r}: the name must be a non-empty string"
                )
            if name in seen:
                raise ConfigurationError(f"classes name {name!r} twice: names must be distinct")
            seen.add(name)
            if isinstance(ceiling, bool) or not isinstance(ceiling, int | float):
                raise ConfigurationError(f"classes {name!r}: ceiling {ceiling!r} is not a number")
            if not 0 < ceiling <= 1:
                raise ConfigurationError(f"classes {name!r}: ceiling {ceiling!r} must be in (0, 1]")
        ceilings = [ceiling for _, ceiling in found]
        if ceilings[0] != 1 or any(a <= b for a, b in itertools.pairwise(ceilings)):
            raise ConfigurationError(
                f"classes ceilings {ceilings!r} must start at 1.0 (the most important class) and "
                "fall strictly down the list, so that the first class keeps a reserve"
            )
        object.__setattr__(self, "classes", found)

    def ceiling(self, traffic_class: str) -> float:
        """The utilization ceiling of ``traffic_class``; unknown classes are errors."""
        for name, ceiling in self.classes:
            if name == traffic_class:
                return ceiling
        known = [name for name, _ in self.classes]
        raise ConfigurationError(f"unknown traffic class {traffic_class!r}; known: {known}")

    @property
    def reserve(self) -> float:
        """The fraction of capacity only the first class may use."""
        return 1.0 - self.classes[1][1]


DEFAULT_POLICY = ShedPolicy()


@dataclass(frozen=True, slots=True)
class ShedDecision:
    """Whether a request of ``traffic_class`` was admitted at ``utilization``.

    A fleet shedder's denial knows the load only up to the class's limit (the store counts
    slots up to the limit asked for), so its ``utilization`` is then a lower bound: the
    class's whole slots over the capacity (0.6 for batch at capacity 10, were 9 in flight).
    """

    allowed: bool
    traffic_class: str
    utilization: float
    ceiling: float

    def __bool__(self) -> bool:
        return self.allowed


class ShedAcquired(NamedTuple):
    """What ``FleetShedder.acquire`` gives: the decision and the slot's lease. It unpacks as
    the pair (``decision, lease = shedder.acquire("batch")``) and is true only when the
    request was admitted, so ``if shedder.acquire("batch"):`` means what it says. Release
    ``lease`` either way (a denied lease's release is a no-op)."""

    decision: ShedDecision
    lease: Lease

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def __bool__(self) -> bool:
        return self.decision.allowed


def _check_utilization(value: object) -> float:
    if (
        isinstance(value, bool)
        or not isinstance(value, int | float)
        or math.isnan(value)
        or value < 0
    ):
        raise ConfigurationError(
            f"LoadShedder: the utilization callable answered {value!r}; it must answer a "
            "number >= 0 (0.0 idle, 1.0 full)"
        )
    return float(value)


class LoadShedder:
    """Shed by a utilization the app reports: ``LoadShedder(lambda: gpu_busy_fraction())``.

    A request of class ``c`` is admitted while ``utilization < ceiling(c)``
    (``<=`` would admit at exactly full for critical traffic).
    """

    @keywords_checked
    def __init__(self, utilization: Callable[[], float], policy: ShedPolicy = DEFAULT_POLICY):
        if not callable(utilization):
            raise ConfigurationError(f"utilization {utilization!r} must be a callable")
        if not isinstance(policy, ShedPolicy):
            raise ConfigurationError(f"policy {policy!r} must be a ShedPolicy")
        self.utilization = utilization
        self.policy = policy

    def admit(self, traffic_class: str) -> ShedDecision:
        """Read the utilization now and decide for one request of ``traffic_class``."""
        ceiling = self.policy.ceiling(traffic_class)
        now = _check_utilization(self.utilization())
        return ShedDecision(now < ceiling, traffic_class, now, ceiling)


class _FleetBase(Driven[L]):
    """The policy's slot limits and the flows of one acquire and release; ``limiter`` does
    the I/O."""

    #: Whether the shell awaits its limiter (an ``AsyncLimiter``), and the other shell.
    _awaited: ClassVar[bool]
    _twin: ClassVar[str]

    @keywords_checked
    def __init__(
        self,
        limiter: L,
        key: str,
        capacity: int,
        *,
        policy: ShedPolicy = DEFAULT_POLICY,
        ttl: float = 60.0,
    ) -> None:
        owner = type(self).__name__
        check_limiter(owner, limiter, awaited=type(self)._awaited, twin=type(self)._twin)
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 1:
            raise ConfigurationError(f"capacity {capacity!r} must be a whole number >= 1")
        if not isinstance(policy, ShedPolicy):
            raise ConfigurationError(f"policy {policy!r} must be a ShedPolicy")
        if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < math.inf:
            # Refused now, not at the first acquire.
            raise ConfigurationError(f"{owner} ttl {ttl!r} must be a positive number of seconds")
        try:
            lease_ttl_us(ttl)  # 1 ms to a year, as any slot lease
        except ConfigurationError as error:
            raise ConfigurationError(f"{owner} ttl: {error}") from None
        self.limiter = limiter
        self.key = key
        self.capacity = capacity
        self.policy = policy
        self.ttl = ttl
        self.limits = {name: self._limit(ceiling) for name, ceiling in policy.classes}
        if self.limits[policy.classes[-1][0]] < 1:
            raise ConfigurationError(
                f"capacity {capacity} is too small: class {policy.classes[-1][0]!r} would "
                "never get a slot"
            )

    def _limit(self, ceiling: float) -> int:
        return math.floor(ceiling * self.capacity + 1e-9)

    def acquire_flow(
        self, traffic_class: str, *, lease_id: str | None = None
    ) -> Flow[ShedAcquired]:
        """Take one in-flight slot if ``traffic_class`` is under its ceiling; release it later.

        The answer is a ``ShedAcquired``: ``(decision, lease)``, true only when admitted."""
        ceiling = self.policy.ceiling(traffic_class)  # unknown classes are errors
        limit = self.limits[traffic_class]
        lease = yield from self.limiter.acquire_slot_flow(
            self.key, limit, slots=1, ttl=self.ttl, lease_id=lease_id
        )
        # In use as the class's limit sees it: exact when granted, and at least
        # the class's limit when denied (the store reports no room below zero).
        utilization = (lease.limit - lease.decision.remaining) / self.capacity
        return ShedAcquired(ShedDecision(lease.allowed, traffic_class, utilization, ceiling), lease)

    def release_flow(self, lease: Lease) -> Flow[bool]:
        """Give a slot back (False if it had lapsed or was never granted)."""
        return (yield from self.limiter.release_slot_flow(lease))


class FleetShedder(_FleetBase[Limiter]):
    """Shed by fleet-wide in-flight requests on one concurrency key of ``limiter``'s store.

    ::

        shedder = FleetShedder(Limiter(redis_store), "api", capacity=200)
        with shedder.slot("batch") as lease:
            if not lease:
                return 503
            ...
    """

    _awaited = False
    _twin = "AsyncFleetShedder"
    release = blocking(_FleetBase.release_flow)

    def acquire(self, traffic_class: str) -> ShedAcquired:
        """Take one in-flight slot if ``traffic_class`` is under its ceiling; release it later.

        The answer is a ``ShedAcquired``: ``(decision, lease)``, true only when admitted. A
        KeyboardInterrupt while the store decides gives the slot back before it goes on."""
        lease_id = uuid.uuid4().hex
        return given_back_if_interrupted(
            lambda: self.limiter.run(self.acquire_flow(traffic_class, lease_id=lease_id)),
            lambda: self.limiter.run(release_by_id(self.limiter, self.key, lease_id)),
        )

    @contextlib.contextmanager
    def slot(self, traffic_class: str) -> Iterator[ShedDecision]:
        """``with shedder.slot("normal") as decision:`` — released on exit when granted. If
        the block raised and the release fails too, the block's exception goes on (noted)."""
        decision, lease = self.acquire(traffic_class)
        try:
            yield decision
        except BaseException as raised:
            released_after("FleetShedder.slot", raised, lambda: self.release(lease))
            raise
        self.release(lease)


class AsyncFleetShedder(_FleetBase[AsyncLimiter]):
    """The asyncio twin of ``FleetShedder`` over an ``AsyncLimiter``."""

    _awaited = True
    _twin = "FleetShedder"
    release = awaiting(_FleetBase.release_flow)

    async def acquire(self, traffic_class: str) -> ShedAcquired:
        """See ``FleetShedder.acquire``: an acquire cancelled while the store decides gives
        its slot back by id (shielded, waited for a bounded time) before it goes on."""
        lease_id = uuid.uuid4().hex
        return await given_back_if_cancelled(
            self.limiter.run(self.acquire_flow(traffic_class, lease_id=lease_id)),
            lambda: self.limiter.run(release_by_id(self.limiter, self.key, lease_id)),
            f"the fleet shedder slot on {self.key!r} that a cancelled acquire was taking",
        )

    @contextlib.asynccontextmanager
    async def slot(self, traffic_class: str) -> AsyncIterator[ShedDecision]:
        """See ``FleetShedder.slot``; a cancelled block's release is shielded."""
        decision, lease = await self.acquire(traffic_class)
        try:
            yield decision
        except BaseException as raised:
            await areleased_after("AsyncFleetShedder.slot", raised, lambda: self.release(lease))
            raise
        await self.release(lease)
