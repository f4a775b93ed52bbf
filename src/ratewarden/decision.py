"""Decision: the answer to "may this request proceed now?"."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ParamSpec, cast

from ratewarden.rate import Rate

__all__ = ["Decision", "layered_decision", "make_decision"]

P = ParamSpec("P")


@dataclass(frozen=True, slots=True)
class Decision:
    """The outcome of one ``hit`` (or ``peek``) on one key.

    ``remaining`` is how many more units could be used now: after this request when
    it is allowed; a denied request takes nothing.

    With several rates, ``layers`` holds one Decision per rate, in the order given,
    for callers that report every policy (the RateLimit headers do). ``limit``,
    ``rate`` and ``retry_after`` are then the binding layer's: for a denied request,
    the denied layer that waits longest; for an allowed one, the layer with the
    least ``remaining``, of those the one whose ``refill_after`` is longest.
    ``remaining`` is the least of every layer's, and ``refill_after`` the longest of
    those layers' with that least ``remaining`` (for an allowed request, both the
    binding layer's; for a denied one they may be another layer's than ``limit``),
    so that both mean what they mean for one rate.

    Times are seconds, derived from whole microseconds and never earlier than the
    exact value:

    - ``retry_after``: how long until this same request (same cost) could be
      allowed; 0 when allowed; ``math.inf`` when it never can (cost above capacity).
      A ``shadowed`` decision is a denial reported as allowed: it keeps the denial's
      ``retry_after`` (and ``remaining``, ``reset_after``), what enforcing would have
      answered.
    - ``reset_after``: how long until the key is back to full capacity: with
      several rates, every layer, so the longest of the layers' ``reset_after``
      (not the binding layer's, which ``layers`` has).
    - ``delay``: for the leaky-bucket shaper, how long the caller should wait
      before proceeding with an allowed request (the longest of the layers');
      0 for a denied request and for every other algorithm.
    - ``refill_after``: the effective window, as the IETF RateLimit field's ``t``
      (draft-11) means it: how long the key can give no more than ``remaining``.
      If the caller used all of ``remaining`` now, one more unit could be used
      after exactly this long. GCRA and the buckets: when the next unit drips
      back; fixed window: the window's end; sliding log: when the oldest entry
      ages out; sliding window: when the estimate first admits one more;
      concurrency: when the soonest lease expires. 0 when not known (a decision
      the store did not make, such as the ``open`` failure mode's).

    ``degraded`` is empty for a decision the store made. When the store was
    unavailable and a failure mode answered instead, it names that failure mode:
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
    # Last, so that positional construction written before it existed still works.
    refill_after: float = 0.0

    def __bool__(self) -> bool:
        return self.allowed


class _Draft:
    """The same slots as ``Decision`` without its frozen ``__setattr__``; see ``make_decision``."""

    __slots__ = Decision.__slots__

    def __init__(
        self,
        allowed: bool,
        limit: int,
        remaining: int,
        reset_after: float,
        retry_after: float,
        delay: float,
        rate: Rate | None,
        cost: int,
        layers: tuple[Decision, ...] = (),
        shadowed: bool = False,
        degraded: str = "",
        refill_after: float = 0.0,
    ) -> None:
        self.allowed = allowed
        self.limit = limit
        self.remaining = remaining
        self.reset_after = reset_after
        self.retry_after = retry_after
        self.delay = delay
        self.rate = rate
        self.cost = cost
        self.shadowed = shadowed
        self.layers = layers
        self.degraded = degraded
        self.refill_after = refill_after
        # Identical slot layout, so Python allows the switch; from here on the
        # object is an ordinary frozen Decision.
        self.__class__ = Decision  # type: ignore[assignment]


def _becomes_decision(draft: Callable[P, object]) -> Callable[P, Decision]:
    """``draft`` itself, typed as what calling it gives: a ``Decision`` (see ``_Draft``)."""
    return cast("Callable[P, Decision]", draft)


#: ``Decision(...)`` for the stores' hot path, about 4x cheaper to build, with the
#: fields in the same order (``layers`` before ``shadowed``, ``degraded`` and ``refill_after``).
#:
#: A frozen dataclass sets each field through ``object.__setattr__``, which costs
#: more than the rest of an in-memory decision. The draft sets plain slots and
#: then becomes the Decision it equals in every way (fields, ``==``, ``hash``,
#: ``repr``, frozen-ness, ``dataclasses.replace``). It is the class itself, not a
#: function around it: a wrapper's call would cost a sixth of the construction.
make_decision = _becomes_decision(_Draft)


def layered_decision(layers: Sequence[Decision], cost: int) -> Decision:
    """The Decision of a call over several rates, from one Decision per layer (in the
    order of the rates); see ``Decision`` for what each field says.

    The binding layer gives ``limit``, ``rate`` and ``retry_after``: for a denial, the
    denied layer that waits longest; else the layer with the least room left, of those
    the one whose ``refill_after`` is longest. ``remaining`` is the least of every
    layer's and ``refill_after`` the longest of those layers' (the binding layer's when
    allowed), so that using all of ``remaining`` now leaves one more unit refused until
    ``refill_after``. ``reset_after`` is the longest of the layers', ``delay`` too when
    allowed (0 when denied), and ``layers`` lists them all."""
    least = min(layer.remaining for layer in layers)
    # The first of the layers with the least room whose window is longest.
    tightest = max(
        (layer for layer in layers if layer.remaining == least),
        key=lambda layer: layer.refill_after,
    )
    denied = [layer for layer in layers if not layer.allowed]
    binding = max(denied, key=lambda layer: layer.retry_after) if denied else tightest
    return make_decision(
        not denied,
        binding.limit,
        least,
        max(layer.reset_after for layer in layers),
        binding.retry_after,
        # A denial proceeds at no time, so it has no delay to wait (as one rate's has none).
        0.0 if denied else max(layer.delay for layer in layers),
        binding.rate,
        cost,
        tuple(layers),
        False,
        "",
        tightest.refill_after,
    )
