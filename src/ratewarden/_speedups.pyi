"""Types of the optional C extension built from _speedups.c (see storage/memory.py)."""

from collections.abc import Callable
from typing import Any

from ratewarden.decision import Decision

class MemoryGcra:
    def __init__(
        self,
        store: Any,
        fallback: Callable[..., Decision],
        system_clock_type: type,
        rate_type: type,
        decision_type: type,
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Decision: ...
    def reload(self) -> None: ...

class LimiterHit:
    def __init__(
        self, core: MemoryGcra, algorithm: str, fallback: Callable[..., Decision]
    ) -> None: ...
    def __call__(self, *args: Any, **kwargs: Any) -> Decision: ...
