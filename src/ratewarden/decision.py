"""Decision: the answer to "may this request proceed now?"."""

from __future__ import annotations

from dataclasses import dataclass

from ratewarden.rate import Rate

__all__ = ["Decision"]


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one ``hit`` (or ``peek``) on one key.

    ``limit`` and ``remaining`` describe the binding rate: for a denied request,
    the layer that waits longest; for an allowed one, the layer with the least
    room left. ``layers`` holds one Decision per rate, in the order given, for
    callers that report every policy (the RateLimit headers do).

    Times are seconds, derived from whole microseconds and never earlier than the
    exact value:

    - ``retry_after``: how long until this same request (same cost) could be
      allowed; 0 when allowed; ``math.inf`` when it never can (cost above capacity).
    - ``reset_after``: how long until the key is back to full capacity.
    - ``delay``: for the leaky-bucket shaper, how long the caller should wait
      before proceeding with an allowed request; 0 for every other algorithm.

    ``degraded`` is empty for a decision the store made. When the store was
    unavailable and a failure policy answered instead, it names that policy:
    ``"open"`` (allowed without counting), ``"closed"`` (denied) or ``"local"``
    (decided by the in-process bucket).
    """

    allowed: bool
    limit: int
    remaining: int
    reset_after: float
    retry_after: float
    delay: float = 0.0
    rate: Rate | None = None
    cost: int = 1
    shadowed: bool = False
    layers: tuple[Decision, ...] = ()
    degraded: str = ""

    def __bool__(self) -> bool:
        return self.allowed
