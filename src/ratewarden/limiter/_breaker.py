"""CircuitBreaker: stop paying the store's timeout on every request during an outage.

Three states, with time from an injected clock::

    closed ──(N consecutive failures, or failure ratio over the last W calls)──► open
    open ──(cool-down elapsed, or a longer hold; the next caller becomes the probe)──► half_open
    half_open ──(probe succeeds)──► closed        half_open ──(probe fails)──► open

While open, ``allow()`` answers False at once: callers take their failure mode
without a store call. After ``cooldown`` seconds one caller (``probes`` callers
at most) is let through as a probe; everyone else is still refused until the
probe reports back. A probe that never reports (cancelled, or an error that is
not a storage failure) gives its place back through ``abandon()``. A failure may
carry a ``hold``, the seconds the other side asked for (an HTTP ``Retry-After``):
the circuit it opens stays open that long if it is longer than the cool-down
(``max_hold`` at most), never shorter.

With ``per_node=True`` it keeps one such circuit per store node (a Redis
Cluster's primaries): each method takes the node a call goes to, and an
outage of one primary opens that primary's circuit only, so that calls for
keys on the others still reach the store. A node of ``""`` (a store with one
node, or a call whose node is not known) is the breaker's own circuit.
"""

from __future__ import annotations

import math
import threading
from collections import deque

from ratewarden.checks import check_bool, is_number, keywords_checked
from ratewarden.clock import Clock, SystemClock
from ratewarden.errors import ConfigurationError
from ratewarden.limiter._metrics_check import check_metrics
from ratewarden.metrics import NO_METRICS, Metrics

__all__ = ["CLOSED", "HALF_OPEN", "OPEN", "CircuitBreaker"]

#: Nodes a per-node breaker keeps circuits for; past it, closed ones are forgotten first.
MAX_NODES = 1024

CLOSED = "closed"
OPEN = "open"
HALF_OPEN = "half_open"


def _whole(name: str, value: object, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(
            f"CircuitBreaker {name} {value!r} must be a whole number >= {least}"
        )
    return value


def _seconds(name: str, value: object) -> float:
    if not is_number(value, low_ok=False):
        raise ConfigurationError(
            f"CircuitBreaker {name} {value!r} must be a positive number of seconds"
        )
    return float(value)


def _ratio(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= 1:
        raise ConfigurationError(
            f"CircuitBreaker failure_ratio {value!r} must be above 0 and at most 1, or None"
        )
    return float(value)


class CircuitBreaker:
    """A thread-safe circuit breaker over calls to one store.

    - ``failures``: consecutive failures that open it (default 5).
    - ``failure_ratio`` / ``window`` / ``min_calls``: it also opens when at least
      ``failure_ratio`` of the last ``window`` calls failed, once ``min_calls``
      calls are in the window (default 0.5 of 20, from 10 calls); ``None`` turns
      the ratio off.
    - ``cooldown``: seconds open before a probe is let through (default 1.0).
    - ``max_hold``: the longest a failure's ``hold`` keeps it open (default 300 s).
    - ``probes``: callers let through at once while half open (default 1).
    - ``per_node``: one circuit per store node, named ``<name>@<node>`` (default
      False: one for the whole store). A limiter asks its store for the node of
      each call's key (``node_of``); a store without that method, or with one
      node, has the one circuit either way.

    ``metrics.breaker(name=..., state=...)`` is called on every transition. Share
    one breaker between every limiter that talks to the same store.
    """

    __slots__ = (
        "_calls",
        "_clock",
        "_consecutive",
        "_cooldown_us",
        "_hold_us",
        "_in_flight",
        "_lock",
        "_max_hold_us",
        "_metrics",
        "_nodes",
        "_open_until_us",
        "_state",
        "cooldown",
        "failure_ratio",
        "failures",
        "max_hold",
        "min_calls",
        "name",
        "per_node",
        "probes",
        "window",
    )

    @keywords_checked
    def __init__(
        self,
        *,
        failures: int = 5,
        failure_ratio: float | None = 0.5,
        window: int = 20,
        min_calls: int = 10,
        cooldown: float = 1.0,
        max_hold: float = 300.0,
        probes: int = 1,
        clock: Clock | None = None,
        metrics: Metrics = NO_METRICS,
        name: str = "store",
        per_node: bool = False,
    ) -> None:
        self.failures = _whole("failures", failures, 1)
        self.failure_ratio = _ratio(failure_ratio)
        self.window = _whole("window", window, 1)
        self.min_calls = _whole("min_calls", min_calls, 1)
        if self.min_calls > self.window:
            raise ConfigurationError(
                f"CircuitBreaker min_calls {min_calls!r} is above window {window!r}: "
                "the ratio could never be judged"
            )
        self.cooldown = _seconds("cooldown", cooldown)
        self._cooldown_us = max(1, math.ceil(self.cooldown * 1_000_000))
        self.max_hold = _seconds("max_hold", max_hold)
        self._max_hold_us = math.ceil(self.max_hold * 1_000_000)
        self.probes = _whole("probes", probes, 1)
        if not isinstance(name, str) or not name:
            raise ConfigurationError(f"CircuitBreaker name {name!r} must be a non-empty string")
        self.name = name
        self.per_node = check_bool("CircuitBreaker per_node", per_node)
        #: node -> its own circuit (per_node only); made on a node's first call.
        self._nodes: dict[str, CircuitBreaker] = {}
        self._clock: Clock = clock if clock is not None else SystemClock()
        self._metrics = check_metrics("CircuitBreaker", metrics, ("breaker",), none_ok=False)
        self._lock = threading.Lock()
        self._state = CLOSED
        self._consecutive = 0
        self._calls: deque[bool] = deque(maxlen=self.window)  # True = failed
        self._open_until_us = 0
        self._hold_us = 0  # the longest hold of the failures since the last success or open
        self._in_flight = 0

    @property
    def state(self) -> str:
        """``closed``, ``open`` or ``half_open`` (open turns half open only when a caller asks):
        the circuit of node ``""``, which is every call's unless ``per_node``."""
        return self._state

    def states(self) -> dict[str, str]:
        """Every circuit's state by node, ``""`` first (one entry unless ``per_node``)."""
        with self._lock:
            nodes = list(self._nodes.items())
        return {"": self._state} | {node: circuit._state for node, circuit in nodes}

    def _node(self, node: str) -> CircuitBreaker:
        """The circuit of ``node``: this one for ``""`` or without ``per_node``."""
        if not node or not self.per_node:
            return self
        circuit = self._nodes.get(node)
        if circuit is None:
            circuit = self._add(node)
        return circuit

    def _add(self, node: str) -> CircuitBreaker:
        with self._lock:
            circuit = self._nodes.get(node)
            if circuit is not None:
                return circuit
            if len(self._nodes) >= MAX_NODES:  # nodes renamed by failovers: keep the open ones
                self._nodes = {n: c for n, c in self._nodes.items() if c._state != CLOSED}
            circuit = CircuitBreaker(
                failures=self.failures,
                failure_ratio=self.failure_ratio,
                window=self.window,
                min_calls=self.min_calls,
                cooldown=self.cooldown,
                max_hold=self.max_hold,
                probes=self.probes,
                clock=self._clock,
                metrics=self._metrics,
                name=f"{self.name}@{node}",
            )
            self._nodes[node] = circuit
            return circuit

    def allow(self, node: str = "") -> bool:
        """May a store call go ahead now (to ``node``)? False means: answer by the failure
        mode."""
        if node and self.per_node:
            return self._node(node).allow()
        with self._lock:
            if self._state == CLOSED:
                return True
            if self._state == OPEN:
                if self._clock.now_us() < self._open_until_us:
                    return False
                self._move(HALF_OPEN)
            if self._in_flight >= self.probes:
                return False
            self._in_flight += 1
            return True

    def retry_in(self, node: str = "") -> float:
        """Seconds until the next probe may go (0 unless open); a hint for denied callers."""
        if node and self.per_node:
            return self._node(node).retry_in()
        with self._lock:
            if self._state != OPEN:
                return 0.0
            return max(0, self._open_until_us - self._clock.now_us()) / 1e6

    def success(self, node: str = "") -> None:
        """The call allowed by ``allow()`` got an answer from the store."""
        if node and self.per_node:
            self._node(node).success()
            return
        with self._lock:
            self._consecutive = 0
            self._hold_us = 0
            if self._state == HALF_OPEN:
                self._in_flight = 0
                self._calls.clear()
                self._move(CLOSED)
                return
            self._calls.append(False)

    def failure(self, node: str = "", hold: float = 0.0) -> None:
        """The call allowed by ``allow()`` failed (unavailable, timed out, refused); ``hold``:
        seconds the other side asked to be left alone (a ``Retry-After``), if any."""
        if node and self.per_node:
            self._node(node).failure(hold=hold)
            return
        if not is_number(hold):
            raise ConfigurationError(f"CircuitBreaker failure hold {hold!r}: seconds >= 0")
        with self._lock:
            self._hold_us = max(self._hold_us, min(math.ceil(hold * 1e6), self._max_hold_us))
            if self._state == HALF_OPEN:
                self._open()
                return
            if self._state == OPEN:  # a call let through before it opened, reporting late
                if self._hold_us:
                    until = self._clock.now_us() + self._hold_us
                    self._open_until_us = max(self._open_until_us, until)
                    self._hold_us = 0
                return
            self._consecutive += 1
            self._calls.append(True)
            if self._consecutive >= self.failures or self._ratio_exceeded():
                self._open()

    def recovered(self) -> None:
        """An out-of-band check (a health ping of every node) found the store answering:
        close now, every node's circuit too.

        Does nothing to a circuit unless open or half open. Saves callers the rest
        of the cool-down when something else already probed the store.
        """
        with self._lock:
            nodes = list(self._nodes.values())
        for circuit in nodes:
            circuit.recovered()
        with self._lock:
            if self._state == CLOSED:
                return
            self._in_flight = 0
            self._consecutive = 0
            self._hold_us = 0
            self._calls.clear()
            self._move(CLOSED)

    def abandon(self, node: str = "") -> None:
        """The call allowed by ``allow()`` ended without a verdict (cancelled, or a bug)."""
        if node and self.per_node:
            self._node(node).abandon()
            return
        with self._lock:
            if self._state == HALF_OPEN:
                self._in_flight = max(0, self._in_flight - 1)

    def _ratio_exceeded(self) -> bool:
        if self.failure_ratio is None or len(self._calls) < self.min_calls:
            return False
        return sum(self._calls) >= self.failure_ratio * len(self._calls)

    def _open(self) -> None:
        self._open_until_us = self._clock.now_us() + max(self._cooldown_us, self._hold_us)
        self._hold_us = 0
        self._in_flight = 0
        self._consecutive = 0
        self._calls.clear()
        self._move(OPEN)

    def _move(self, state: str) -> None:
        # Called under the lock. A re-open from half open is a transition too.
        self._state = state
        self._metrics.breaker(name=self.name, state=state)

    def __repr__(self) -> str:
        return (
            f"CircuitBreaker(name={self.name!r}, state={self._state!r}, failures={self.failures}, "
            f"failure_ratio={self.failure_ratio}, cooldown={self.cooldown}"
            f"{', per_node=True' if self.per_node else ''})"
        )
