"""What every traffic pattern is: a ``Pattern`` started on a ``Horizon`` gives a ``Stream``."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from ratewarden.errors import ConfigurationError

__all__ = ["MAX_ARRIVALS", "SECOND_US", "Arrival", "Horizon", "Pattern", "Stream", "is_whole"]

SECOND_US = 1_000_000

#: The most arrivals one run may generate: a run is a picture, not a load test.
MAX_ARRIVALS = 5_000_000

#: ``(time_us, client, cost)``
Arrival = tuple[int, int, int]


@dataclass(frozen=True, slots=True)
class Horizon:
    """What a pattern is generated for: ``[start_us, start_us + duration_us)`` against a rate."""

    start_us: int
    duration_us: int
    limit: int
    period_us: int

    @property
    def end_us(self) -> int:
        """The first microsecond after the run."""
        return self.start_us + self.duration_us

    def gap_us(self, load: float) -> float:
        """Microseconds between requests offered at ``load`` x the rate."""
        return self.period_us / (self.limit * load)

    def check_volume(self, pattern: str, expected: float) -> None:
        """Refuse a run that would generate more than ``MAX_ARRIVALS`` arrivals."""
        if expected > MAX_ARRIVALS:
            raise ConfigurationError(
                f"pattern {pattern}: about {expected:,.0f} requests in "
                f"{self.duration_us / SECOND_US:g} s is more than {MAX_ARRIVALS:,}; "
                "shorten the duration or lower the load"
            )


class Stream:
    """One run of a pattern: its first arrivals, and (when reactive) the clients' next ones."""

    def __init__(self, arrivals: list[Arrival]) -> None:
        self.arrivals = arrivals

    def after(self, arrival: Arrival, allowed: bool, retry_after_us: int) -> Arrival | None:
        """The client's next arrival once ``arrival`` was decided; open-loop traffic has none."""
        return None


class Pattern:
    """A traffic shape; ``start(horizon)`` begins one run of it.

    A pattern is a frozen dataclass; the parameters it names in ``positive`` are
    checked to be numbers above 0 when it is made.
    """

    __slots__ = ()
    name = "pattern"
    positive: ClassVar[tuple[str, ...]] = ()

    def __post_init__(self) -> None:
        for what in self.positive:
            value = getattr(self, what)
            if not math.isfinite(value) or value <= 0:
                raise ConfigurationError(
                    f"pattern {self.name}: {what}={value!r} must be a number above 0"
                )

    def start(self, horizon: Horizon) -> Stream:
        """Begin one run: its first arrivals, and how clients react to decisions."""
        return Stream(self.arrivals(horizon))

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        """The arrivals known before any decision, in time order (each pattern defines them)."""
        raise NotImplementedError

    def volume(self, horizon: Horizon) -> float:
        """About how many arrivals a run on ``horizon`` makes, known without making them (a
        run of several patterns is checked against ``MAX_ARRIVALS`` before any starts)."""
        raise NotImplementedError

    def describe(self) -> str:
        """A short label for tables and plot titles."""
        return self.name


def is_whole(raw: str) -> bool:
    """ASCII digits only: ``str.isdigit`` also accepts "²", which ``int`` refuses."""
    return raw.isascii() and raw.isdigit()
