"""The values of token budgets: a request's usage, and what a decision, a reservation, a
settlement and a charge report. No I/O; checked where they are built (a ``Usage`` by its
constructor, so no path takes a bad one).
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ratewarden.algorithms import NEVER
from ratewarden.checks import check_name
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate

__all__ = [
    "BUILTIN_AXES",
    "MAX_AXES",
    "MAX_SECONDS",
    "AxisState",
    "BudgetDecision",
    "Charge",
    "Reservation",
    "Settlement",
    "Usage",
    "check_axis_name",
    "check_count",
    "check_reservation",
    "check_seconds_us",
    "us_to_s",
]

#: Axes whose usage is derived from the request itself; any other name is a custom unit.
BUILTIN_AXES = ("requests", "tokens", "input_tokens", "output_tokens")

#: At most this many axes per budget (each is one key in the one store step).
MAX_AXES = 16

#: The longest ``reservation_ttl`` and ``active_window``: a year. Far past any request's
#: life, and every store can take it: Redis refused an expiry of 1e14 s ("value is not an
#: integer or out of range") where the memory store took it, and ``now + ttl`` in
#: microseconds stays exact in the scripts' doubles.
MAX_SECONDS = 365 * 86_400


def check_axis_name(owner: str, name: object) -> None:
    """An axis name: a custom unit's, or an understood one's, but not one spelt almost as an
    understood one (``token``): taken as a custom unit, that would fail only at the first
    reserve, asking for ``units=``."""
    check_name("axis", name)
    assert isinstance(name, str)
    close = difflib.get_close_matches(name, BUILTIN_AXES, n=1, cutoff=0.85)
    if close and name not in BUILTIN_AXES:
        raise ConfigurationError(
            f"{owner}: axis {name!r}: did you mean {close[0]!r}? The understood axes are "
            f"{', '.join(BUILTIN_AXES)}; another name is a custom unit, and one this close "
            "to them is taken for a typo"
        )


def check_count(what: str, value: object) -> int:
    """A count of units: a whole number >= 0."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ConfigurationError(f"{what} {value!r} must be a whole number >= 0")
    return value


def check_seconds_us(what: str, seconds: object) -> int:
    """Positive seconds up to ``MAX_SECONDS``, as whole microseconds (at least 1)."""
    if (
        isinstance(seconds, bool)
        or not isinstance(seconds, int | float)
        or not 0 < seconds <= MAX_SECONDS
    ):
        raise ConfigurationError(
            f"{what} {seconds!r} must be a positive number of seconds, at most "
            f"{MAX_SECONDS:,} (365 days)"
        )
    return max(1, math.ceil(seconds * 1_000_000))


@dataclass(frozen=True, slots=True)
class Usage:
    """What one request uses (or is estimated to use) on each axis.

    ``tokens`` is ``input_tokens + output_tokens``; ``requests`` is 1 per call
    (0 for a request that was never sent); ``units`` counts custom axes.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    requests: int = 1
    units: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        # Checked here, not by each caller: a negative or fractional count would otherwise
        # refund a budget, or be rounded differently by each store.
        check_count("Usage input_tokens", self.input_tokens)
        check_count("Usage output_tokens", self.output_tokens)
        check_count("Usage requests", self.requests)
        if not isinstance(self.units, tuple):
            raise ConfigurationError(
                f"Usage units {self.units!r} must be a tuple of (axis name, count) pairs; "
                "Usage.of(units={...}) takes a mapping"
            )
        seen: set[str] = set()
        for pair in self.units:
            if not isinstance(pair, tuple) or len(pair) != 2:
                raise ConfigurationError(
                    f"Usage units item {pair!r} must be an (axis name, count) pair"
                )
            name, count = pair
            check_name("Usage units", name)
            if name in BUILTIN_AXES:
                raise ConfigurationError(
                    f"Usage units names {name!r}, a built-in axis: pass it as input_tokens, "
                    "output_tokens or requests"
                )
            if name in seen:
                raise ConfigurationError(f"Usage units names {name!r} twice")
            seen.add(name)
            check_count(f"Usage units[{name!r}]", count)
        object.__setattr__(self, "units", tuple(sorted(self.units)))

    @classmethod
    def of(
        cls,
        input_tokens: int = 0,
        output_tokens: int = 0,
        requests: int = 1,
        units: Mapping[str, int] | None = None,
    ) -> Usage:
        """A ``Usage`` whose ``units`` maps custom axis names to counts (checked as any is)."""
        if units is not None and not isinstance(units, Mapping):
            raise ConfigurationError(f"units {units!r} must be a mapping of axis name to count")
        return cls(input_tokens, output_tokens, requests, tuple((units or {}).items()))

    def amount(self, axis: str) -> int:
        """Units this usage costs on ``axis``; a custom axis must be named in ``units``."""
        if axis == "requests":
            return self.requests
        if axis == "tokens":
            return self.input_tokens + self.output_tokens
        if axis == "input_tokens":
            return self.input_tokens
        if axis == "output_tokens":
            return self.output_tokens
        for name, count in self.units:
            if name == axis:
                return count
        raise ConfigurationError(
            f"the budget has a custom axis {axis!r}: pass its count in units={{{axis!r}: N}}"
        )


@dataclass(frozen=True, slots=True)
class AxisState:
    """One axis after a decision: its limit, what is left, and times in seconds.

    ``refill_after`` is the axis' effective window (``Decision.refill_after``):
    were all of ``remaining`` used now, one more unit fits after that long.
    """

    name: str
    rate: Rate
    remaining: int
    reset_after: float
    retry_after: float
    cost: int
    refill_after: float = 0.0

    @property
    def limit(self) -> int:
        return self.rate.limit

    @property
    def allowed(self) -> bool:
        return self.retry_after == 0


@dataclass(frozen=True, slots=True)
class BudgetDecision:
    """All axes of one budget decision; ``retry_after`` is the longest wait of a denying axis."""

    allowed: bool
    retry_after: float
    axes: tuple[AxisState, ...]

    def axis(self, name: str) -> AxisState:
        """The state of axis ``name``."""
        for state in self.axes:
            if state.name == name:
                return state
        raise KeyError(name)

    def __bool__(self) -> bool:
        return self.allowed


@dataclass(frozen=True, slots=True)
class Reservation:
    """A reserve: held when ``allowed``; settle it with the actual usage when done.

    ``replayed`` is True when this id had been reserved before (nothing was
    charged again); ``estimate`` and ``costs`` are then this call's, not what the record
    holds (a settle refunds against the record).
    """

    key: str
    reservation_id: str
    estimate: Usage
    costs: tuple[int, ...]
    decision: BudgetDecision
    replayed: bool = False

    @property
    def allowed(self) -> bool:
        return self.decision.allowed

    def __bool__(self) -> bool:
        return self.decision.allowed


@dataclass(frozen=True, slots=True)
class Settlement:
    """The result of ``settle``.

    ``status`` is ``"settled"`` (the difference was applied), ``"already-settled"``
    (an earlier settle of this id applied it; nothing changed) or ``"unknown"``
    (no such reservation: never granted, or its record expired; nothing changed).
    ``refunded`` maps each axis to the units given back (negative: an overrun charged).
    """

    status: str
    refunded: Mapping[str, int] = field(default_factory=dict)
    decision: BudgetDecision | None = None

    @property
    def applied(self) -> bool:
        return self.status == "settled"


@dataclass(frozen=True, slots=True)
class Charge:
    """The result of ``charge``: units charged per axis (up to an empty budget) and the state."""

    charged: Mapping[str, int]
    decision: BudgetDecision


def check_reservation(reservation: object, what: str = "settle") -> None:
    """What ``settle`` (or ``what``: ``cancel``) was given must be a ``Reservation``."""
    if not isinstance(reservation, Reservation):
        raise ConfigurationError(
            f"{what} needs the Reservation that reserve returned, not {reservation!r}"
        )


def us_to_s(us: int) -> float:
    """A store's microseconds as seconds; ``NEVER`` (cannot happen) is ``math.inf``."""
    return math.inf if us == NEVER else us / 1_000_000
