"""Types of the optional C extension built from _speedups.c (see ratewarden/_native.py)."""

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

class ScopeRule:
    def __init__(
        self,
        header: bytes | None,
        identity: Callable[[str], str | None],
        extract: Callable[[Any], str | None],
        prefix: str,
        fallback: str,
        rates: tuple[Any, ...],
        cost: int,
        policy: tuple[bytes, bytes],
        state: bytes,
        window: str,
    ) -> None: ...
    def __call__(
        self, scope: Any, hit: Callable[..., Decision]
    ) -> list[tuple[bytes, bytes]] | tuple[str, Decision]: ...
    def key(self, scope: Any) -> str: ...
    def headers(self, decision: Decision) -> list[tuple[bytes, bytes]] | None: ...

class AddHeaders:
    def __init__(self, send: Callable[[Any], Any], extra: list[tuple[bytes, bytes]]) -> None: ...
    def __call__(self, message: Any) -> Any: ...
