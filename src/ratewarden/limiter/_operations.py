"""The operations beyond a hit, each a flow: waiting, slots, batches, resets, store ops.

``Operations`` is half of ``DecisionCore`` (see ``_core``): it holds no state of
its own and uses the settings and parts ``DecisionCore.__init__`` makes.
"""

from __future__ import annotations

import math
import reprlib
import time
import uuid
import warnings
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, ClassVar

from ratewarden.checks import check_cost, check_key, check_rates, check_slot_request
from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.deprecation import UNSET, renamed
from ratewarden.errors import CircuitOpenError, ConfigurationError, StorageError
from ratewarden.limiter._aged import marked
from ratewarden.limiter._breaker import CircuitBreaker
from ratewarden.limiter._flows import Ask, Flow, Gather, Wait
from ratewarden.limiter._leases import LeaseBook
from ratewarden.limiter._negative import NegativeCache
from ratewarden.limiter._settings import (
    LOCAL_ALGORITHM,
    algorithm_name,
    check_timeout,
)
from ratewarden.limiter._shaping import SHAPER, too_late
from ratewarden.limiter._slots import Lease, lease_ttl_us
from ratewarden.metrics import NO_METRICS, Metrics
from ratewarden.rate import Rate
from ratewarden.storage import joined_ops

if TYPE_CHECKING:
    from ratewarden.storage.memory import MemoryStore

__all__ = ["Operations"]


def _check_lease(method: str, lease: object) -> None:
    """Refuse what is not a Lease before anything is sent (a lease id would otherwise fail
    deep inside with an AttributeError)."""
    if not isinstance(lease, Lease):
        raise ConfigurationError(
            f"{method}: {reprlib.repr(lease)} ({type(lease).__name__}) is not a Lease; "
            "pass the Lease that acquire_slot returned"
        )


Calls = Sequence[tuple[str, Rate | Sequence[Rate], int]]


class Operations:
    """Every flow but the hit's; mixed into ``DecisionCore``."""

    # Made by DecisionCore.__init__; declared here for the type checker.
    algorithm: str
    clock: Clock
    failure_mode: str | None
    metrics: Metrics
    breaker: CircuitBreaker | None
    store: Any
    local: MemoryStore
    leases: LeaseBook | None
    negative: NegativeCache | None
    memory_store: ClassVar[Callable[..., Any]]
    _local_for: Callable[[tuple[Rate, ...]], tuple[Rate, ...]] | None

    if TYPE_CHECKING:  # DecisionCore's own

        def hit_flow(
            self, key: str, rates: Rate | Sequence[Rate], cost: int = 1
        ) -> Flow[Decision]: ...

        def _peek(
            self, key: str, rates: Rate | Sequence[Rate], failure_mode: str | None
        ) -> Flow[Decision]: ...

        def _check(self, algorithm: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]: ...

    # -- the breaker: which node a call goes to, and what it let through ------------------

    def _node_of(
        self, key: str, *, stored: bool = False, rates: Rate | Sequence[Rate] | None = None
    ) -> str:
        """The store node holding ``key`` (a store key with ``stored``) for a call on
        ``rates`` (None: not a rate call), for a breaker kept per node; ``""`` otherwise,
        or when the store does not say."""
        breaker = self.breaker
        if breaker is None or not breaker.per_node:
            return ""
        node_of = getattr(self.store, "node_of", None)
        if node_of is None:
            return ""
        found: str = node_of(key, stored=stored, rates=rates)
        return found

    def _refused(self, node: str = "") -> CircuitOpenError | None:
        """The error standing for a store call the open breaker does not let through."""
        breaker = self.breaker
        if breaker is None or breaker.allow(node):
            return None
        where = f" of {node}" if node and breaker.per_node else ""
        return CircuitOpenError(
            f"circuit breaker{where} open after store failures; "
            f"next probe in {breaker.retry_in(node):.3f}s"
        )

    def _sent(self, step: Ask, *nodes: str) -> Flow[Any]:
        """``step``'s reply, a store call the breaker let through (to each of ``nodes``).
        Every flow asks the store through the breaker here: a call that ends without a reply
        (cancelled, its flow closed, an interrupt) gives its place back (``abandon``), or a
        half-open circuit's probe that never reports keeps every later call out for ever."""
        try:
            return (yield step)
        except BaseException:
            breaker = self.breaker
            if breaker is not None:
                for node in nodes:
                    breaker.abandon(node)
            raise

    def _verdict(self, reply: object, node: str = "") -> None:
        """Tell the breaker how a call it let through (to ``node``) went."""
        breaker = self.breaker
        if breaker is None:
            return
        if not isinstance(reply, Exception):
            breaker.success(node)
        elif isinstance(reply, StorageError):
            breaker.failure(node)
        else:
            breaker.abandon(node)  # a bug, not an outage: no verdict on the store

    def peek_flow(
        self,
        key: str,
        rates: Rate | Sequence[Rate],
        *,
        failure_mode: str | None = None,
        failure: str | None = UNSET,
    ) -> Flow[Decision]:
        """The state of ``key``, consuming nothing (a hit of cost 0, not reported to hooks).

        ``failure_mode`` overrides the limiter's for this call (``failure`` is its
        deprecated name).
        """
        if failure is not UNSET:  # the deprecated name; stacklevel 4: the caller of ``peek``
            failure_mode = renamed(
                "peek", "failure", "failure_mode", failure, failure_mode, None, stacklevel=4
            )
        return self._peek(key, rates, failure_mode)

    def acquire_flow(
        self, key: str, rates: Rate | Sequence[Rate], cost: int = 1, *, timeout: float | None = None
    ) -> Flow[Decision]:
        """Wait (on the store's clock) until allowed, then return the allowing Decision.

        Gives up and returns the denied Decision when the wait would pass
        ``timeout`` seconds or can never succeed. For the leaky-bucket shaper it
        also sleeps the allowed request's ``delay``, which counts in the timeout:
        when the queue ahead would hold the request past it, acquire gives up at
        once without queueing (it peeks first; see ``_shaping``).
        """
        limit = check_timeout(timeout)
        check_cost(cost)
        deadline = math.inf if limit is None else limit
        shaped = limit is not None and self.algorithm == SHAPER
        if shaped and any(cost > rate.capacity for rate in check_rates(rates)):
            # It can never fit: the hit says so (retry_after inf) and consumes nothing; the
            # peek's queue would only say when the queue ahead drains.
            shaped = False
        waited = 0.0
        while True:
            if shaped:
                ahead = yield from self._peek(key, rates, None)
                if waited + ahead.delay > deadline:
                    return too_late(ahead, cost, deadline - waited)
            decision = yield from self.hit_flow(key, rates, cost)
            if decision.allowed:
                if shaped and waited + decision.delay > deadline:
                    # Another caller queued between the peek and the hit. The place taken
                    # is lost (the key counts it, as if used): conservative, and rare.
                    return too_late(decision, cost, deadline - waited)
                yield Wait(decision.delay)
                return decision
            wait = decision.retry_after
            if math.isinf(wait) or waited + wait > deadline:
                return decision
            yield Wait(wait)
            waited += wait

    def acquire_slot_flow(
        self,
        key: str,
        limit: int,
        *,
        slots: int = 1,
        ttl: float = 60.0,
        lease_id: str | None = None,
    ) -> Flow[Lease]:
        """Take ``slots`` of ``limit`` concurrent slots on ``key`` for at most ``ttl`` seconds.

        Returns a Lease whether or not it was granted (check ``lease.allowed``).
        A holder that crashes loses its slots after ``ttl``; long work renews.
        Acquiring again with the same ``lease_id`` renews it.
        """
        if lease_id is None:  # "" is refused below, as 5 is: a falsy id is no id to renew by
            lease_id = uuid.uuid4().hex
        ttl_us = lease_ttl_us(ttl)
        check_slot_request(limit, slots, ttl_us, lease_id)
        decision = yield from self.slot_flow("acquire_slot", key, limit, lease_id, slots, ttl_us)
        return Lease(key, lease_id, limit, slots, ttl, decision)

    def release_slot_flow(self, lease: Lease) -> Flow[bool]:
        """Give the lease's slots back; False if it had lapsed or was never granted."""
        _check_lease("release_slot", lease)
        if not lease.allowed:
            return False
        return bool((yield from self.slot_flow("release_slot", lease.key, lease.lease_id)))

    def renew_slot_flow(self, lease: Lease, ttl: float | None = None) -> Flow[bool]:
        """Extend a held lease by ``ttl`` (default: its own ttl) from now."""
        _check_lease("renew_slot", lease)
        ttl_us = lease_ttl_us(lease.ttl if ttl is None else ttl)
        if not lease.allowed:
            return False
        return bool((yield from self.slot_flow("renew_slot", lease.key, lease.lease_id, ttl_us)))

    def hit_all_flow(
        self,
        calls: Sequence[tuple[str, Rate | Sequence[Rate], int]],
        *,
        algorithm: str | None = None,
    ) -> Flow[list[Decision] | None]:
        """Several ``(key, rates, cost)`` decisions in one atomic store step, all or nothing.

        None when the store cannot take these keys together (a Cluster's keys on
        several slots): nothing was sent. A store failure raises
        ``StorageUnavailableError`` (the breaker is told); no failure mode
        answers for a batch, since its parts may have different failure modes.
        """
        name = self.algorithm if algorithm is None else algorithm_name(algorithm)
        # A batch the store takes has its keys on one node (else it sends nothing): keys on
        # several primaries are declined here, not refused by the first key's circuit.
        node = self._node_of(calls[0][0], rates=calls[0][1]) if calls else ""
        if any(self._node_of(key, rates=rates) != node for key, rates, _ in calls[1:]):
            return None
        refused = self._refused(node)
        if refused is not None:
            raise refused
        timed = self.metrics is not NO_METRICS
        started = time.perf_counter() if timed else 0.0
        reply = yield from self._sent(Ask("hit_all", (name, calls)), node)
        if reply is None:
            if self.breaker is not None:
                self.breaker.abandon(node)
            return None
        if timed:  # a declined batch (None) sent nothing: no round trip to time
            self.metrics.store_latency(seconds=time.perf_counter() - started)
        self._verdict(reply, node)
        if isinstance(reply, Exception):
            raise reply
        decisions: list[Decision] = list(reply)
        negative = self.negative
        if negative is not None:
            now = self.clock.now_us()
            for (key, rates, cost), decision in zip(calls, decisions, strict=True):
                if cost > 0 and not decision.allowed:
                    negative.remember((name, key, check_rates(rates)), decision, now)
        return decisions

    def local_all(
        self,
        calls: Sequence[tuple[str, Rate | Sequence[Rate], int]],
        *,
        algorithm: str | None = None,
    ) -> list[Decision]:
        """The ``local`` failure mode's answer for a batch the store failed: ``calls`` decided
        together on the in-process store (all or nothing), each marked ``degraded="local"``.

        ``hit_all_flow`` raises on a failure, since a batch's parts may have different
        failure modes; its caller answers each part, the ``local`` ones with this.
        """
        name = self.algorithm if algorithm is None else algorithm_name(algorithm)
        decisions = self.local.hit_all(name, calls)
        assert decisions is not None  # the in-process store takes any keys together
        return [marked(decision, "local") for decision in decisions]

    def reset_flow(self, key: str, rates: Rate | Sequence[Rate]) -> Flow[None]:
        """Forget ``key``'s usage: the store's, and this process's (bucket, lease, denial)."""
        self._forget(key, rates)
        reply = yield Ask("reset", (self.algorithm, key, rates))
        if isinstance(reply, Exception):
            raise reply

    def apply_flow(self, op: Any) -> Flow[list[int]]:
        """Run one store operation (``ratewarden.storage.Op``: token budgets, fair shares).

        Through the breaker; a failure raises ``StorageUnavailableError``.
        """
        node = self._node_of(op.keys[0], stored=True) if op.keys else ""
        refused = self._refused(node)
        if refused is not None:
            raise refused
        reply = yield from self._sent(Ask("apply", (op,)), node)
        self._verdict(reply, node)
        if isinstance(reply, Exception):
            raise reply
        return list(reply)

    def apply_all_flow(self, ops: Sequence[Any]) -> Flow[list[list[int] | Exception]]:
        """Run several store operations, each atomic as ``apply_flow`` runs it, in order;
        each one's reply, or the exception standing for it (a failure answers only its op).

        As few store steps as the store allows: without a breaker, the in-process store
        runs them in one step under its lock (``joined_ops``: each sees what the ones
        before it wrote), and a store with ``apply_all`` (``RedisStore``: one pipeline, one
        per Cluster primary; the region stores) takes them in one call, which answers each
        op (its reply or its error, in its place) and raises only when the store failed as a
        whole (every op is answered with that).
        Otherwise, and always with a breaker (asked for each op's node), one ``apply_flow``
        each: side by side (an asyncio store pipelines the calls of one event-loop turn),
        or one after the other on a blocking driver.
        """
        if len(ops) > 1 and self.breaker is None:
            if isinstance(self.store, self.memory_store):  # type: ignore[arg-type]
                reply = yield Ask("apply", (joined_ops(ops),))
                if isinstance(reply, Exception):
                    return [reply] * len(ops)
                return [list(each) for each in reply]
            if callable(getattr(self.store, "apply_all", None)):
                replies = yield Ask("apply_all", (ops,))
                if isinstance(replies, Exception):
                    return [replies] * len(ops)
                return list(replies)
        found: list[list[int] | Exception] = yield Gather(tuple(self._caught(op) for op in ops))
        return found

    def _caught(self, op: Any) -> Flow[list[int] | Exception]:
        try:
            return (yield from self.apply_flow(op))
        except Exception as error:  # one op's failure is its own answer
            return error

    def slot_flow(self, method: str, *args: Any) -> Flow[Any]:
        """A concurrency-slot call (``acquire_slot``, ``release_slot``, ``renew_slot``)."""
        node = self._node_of(args[0])  # the slot's key
        refused = self._refused(node)
        if refused is not None:
            raise refused
        reply = yield from self._sent(Ask(method, args), node)
        self._verdict(reply, node)
        if isinstance(reply, Exception):
            raise reply
        return reply

    @property
    def failure(self) -> str | None:
        """Deprecated (one release): ``failure_mode``, with a ``DeprecationWarning``."""
        warnings.warn(
            "limiter.failure is deprecated; read limiter.failure_mode",
            DeprecationWarning,
            stacklevel=2,
        )
        return self.failure_mode

    def _options(self) -> str:
        """The options that are on, for ``repr``."""
        parts = []
        if self.failure_mode is not None:
            parts.append(f"failure_mode={self.failure_mode!r}")
        if self.leases is not None:
            parts.append(f"lease={self.leases.units}")
        if self._local_for is not None:
            parts.append("local=...")
        if self.negative is not None:
            parts.append(f"negative_cache={self.negative.max_keys}")
        return "".join(", " + part for part in parts)

    def _forget(self, key: str, rates: Rate | Sequence[Rate]) -> tuple[Rate, ...]:
        """Drop what this process holds for ``key``: cached denial, lease, local bucket."""
        found = self._check(self.algorithm, rates)
        check_key(key)
        ident = (self.algorithm, key, found)
        if self.negative is not None:
            self.negative.forget(ident)
        if self.leases is not None:
            self.leases.forget(ident)
        self.local.reset(LOCAL_ALGORITHM, key, found)
        if self._local_for is not None:
            self.local.reset(LOCAL_ALGORITHM, key, self._local_for(found))
        return found
