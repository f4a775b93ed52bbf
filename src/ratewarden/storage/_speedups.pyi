"""Types of the optional C extension built from _speedups.c (loaded by storage/_kernel.py)."""

import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

from ratewarden.clock import Clock
from ratewarden.decision import Decision
from ratewarden.rate import Rate

class MemoryKernel:
    """The memory store's base in C: its one-rate gcra and fixed_window steps over the state it is
    handed."""

    clock: Clock
    max_keys: int
    def __init__(
        self,
        *,
        states: OrderedDict[Any, tuple[Any, int]],
        lock: threading.Lock,
        shapes: Any,  # the store's shape cache: shapes.get(algorithm, rates, cost) -> a shape
        fallback: Callable[..., Decision],
        batch_fallback: Callable[[Any, list[tuple[str, Any]]], list[Decision]],
        evict: Callable[[Any], None],
        decision_type: type[Decision],
        rate_type: type[Rate],
        system_clock_type: type[Clock],
    ) -> None: ...
    def decide(
        self, algorithm: str, key: str, rates: Rate | Sequence[Rate], cost: int = 1
    ) -> Decision: ...
    def decide_all(self, found: list[tuple[str, Any]]) -> list[Decision]: ...
    def decide_calls(self, algorithm: str, calls: object) -> list[Decision] | None: ...

class DecisionMaker:
    """``storage._decisions.single`` in C: one-rate Decisions built in their slots."""

    def __init__(
        self, *, decision_type: type[Decision], fallback: Callable[..., Decision]
    ) -> None: ...
    def single(
        self, rate: Rate, outcome: tuple[bool, int, int, int, int, int], cost: int
    ) -> Decision: ...

class BatchDecoder:
    """``storage._decisions.decode_batch`` in C for a ``hit_all`` of one-rate calls."""

    def __init__(
        self, *, decision_type: type[Decision], fallback: Callable[..., list[Decision]]
    ) -> None: ...
    def decode(self, found: list[tuple[str, Any]], reply: Sequence[int]) -> list[Decision]: ...

class BatchPlanner:
    """A Redis store's plan of a plainly valid one-rate ``hit_all`` in C."""

    def __init__(
        self,
        *,
        shapes: Any,  # the store's shape cache: shapes.get(algorithm, rates, cost) -> a shape
        prefix: str,
        script: Callable[[str], Any],  # script(name) -> the algorithm's Script
        now_us: Callable[[], int] | None,
        clustered: bool,
        rate_type: type[Rate],
    ) -> None: ...
    def plan(
        self, algorithm: str, calls: object
    ) -> tuple[tuple[Any, str, bytes], list[tuple[str, Any]]] | None: ...
