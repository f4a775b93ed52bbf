"""Traffic patterns: when requests arrive, and how throttled clients react.

A pattern is told the ``Horizon`` (start, length, and the rate it is run
against) and answers the first arrivals as ``(time_us, client, cost)``. A
reactive pattern (the retry storm) also answers, after each decision, when that
client comes back. Loads are multiples of the rate: ``load=1.5`` offers half
again the limit. All randomness comes from a seeded ``random.Random``, so a
pattern with the same seed gives the same traffic every run.

Patterns, by name, as NAME[:KEY=VALUE,...] (defaults in brackets):

  steady       evenly spaced requests at load x the rate. [load=1]
  poisson      random (exponential) gaps averaging load x the rate. [load=1, seed=1]
  onoff        on seconds at load x the rate, then off seconds of silence.
               [load=6, on=5, off=25]
  boundary     size requests in the last microsecond before every other window
               edge and size more on the edge: the attack that doubles a fixed
               window. [size=the limit]
  retry-storm  "clients" callers start together, each offering its share of load x
               the rate; a denied call retries after base x 2**attempt seconds (at
               most cap): the whole wait (jitter=no) or a uniform random part of it
               (jitter=yes, "full jitter"). [clients=50, load=1.5, jitter=no, base=1,
               cap=30, seed=1]
  replay       the requests in a log file: one per line, "TIME [COST]", TIME in
               seconds (absolute or relative) or ISO 8601 (2026-12-03T07:42:30.5Z;
               UTC when no offset); the earliest starts the run; # starts a comment.
               [file=PATH, required]

Example: onoff:load=6,on=5,off=25
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from dataclasses import dataclass

from ratewarden.checks import init_checked
from ratewarden.errors import ConfigurationError
from ratewarden.simulate._pattern import (
    MAX_ARRIVALS,
    SECOND_US,
    Arrival,
    Horizon,
    Pattern,
    Stream,
    is_whole,
)
from ratewarden.simulate._replay import Replay

__all__ = [
    "MAX_ARRIVALS",
    "PATTERNS",
    "Arrival",
    "BoundaryBurst",
    "Horizon",
    "OnOff",
    "Pattern",
    "Poisson",
    "Replay",
    "RetryStorm",
    "Steady",
    "Stream",
    "parse",
    "pattern_help",
]

#: The most clients a retry storm may have (each keeps a little state).
MAX_CLIENTS = 100_000


@init_checked
@dataclass(frozen=True, slots=True)
class Steady(Pattern):
    """Evenly spaced requests at ``load`` x the rate."""

    load: float = 1.0
    name = "steady"
    positive = ("load",)

    def volume(self, horizon: Horizon) -> float:
        return math.ceil(horizon.duration_us / horizon.gap_us(self.load))

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        gap = horizon.gap_us(self.load)
        count = math.ceil(horizon.duration_us / gap)
        horizon.check_volume(self.name, count)
        times = (horizon.start_us + int(i * gap) for i in range(count))
        return [(t, 0, 1) for t in times if t < horizon.end_us]

    def describe(self) -> str:
        return f"steady x{_num(self.load)}"


@init_checked
@dataclass(frozen=True, slots=True)
class Poisson(Pattern):
    """Exponential gaps averaging ``load`` x the rate (independent callers)."""

    load: float = 1.0
    seed: int = 1
    name = "poisson"
    positive = ("load",)

    def volume(self, horizon: Horizon) -> float:
        # Poisson counts rarely exceed their mean by much; 10% covers any run this large.
        return 1.1 * horizon.duration_us / horizon.gap_us(self.load)

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        rng = random.Random(self.seed)
        gap = horizon.gap_us(self.load)
        horizon.check_volume(self.name, self.volume(horizon))
        out: list[Arrival] = []
        # Whole microseconds and a fraction below one kept apart: a float time near the start
        # (1.7e15 us) is 0.25 us coarse and would drop or round every shorter gap.
        whole, fraction = 0, 0.0
        while True:
            fraction += rng.expovariate(1 / gap)
            step = int(fraction)
            whole, fraction = whole + step, fraction - step
            if whole >= horizon.duration_us:
                return out
            if len(out) == MAX_ARRIVALS:
                horizon.check_volume(self.name, MAX_ARRIVALS + 1)
            out.append((horizon.start_us + whole, 0, 1))

    def describe(self) -> str:
        return f"poisson x{_num(self.load)}{_seed(self.seed)}"


@init_checked
@dataclass(frozen=True, slots=True)
class OnOff(Pattern):
    """``on`` seconds of steady traffic at ``load`` x the rate, then ``off`` seconds of none."""

    load: float = 6.0
    on: float = 5.0
    off: float = 25.0
    name = "onoff"
    positive = ("load", "on", "off")

    def volume(self, horizon: Horizon) -> float:
        gap = horizon.gap_us(self.load)
        on_us, cycle_us = self.on * SECOND_US, (self.on + self.off) * SECOND_US
        # Every cycle that starts in the run sends ceil(on / gap) requests, the last one only
        # those of its on phase that fall before the end.
        full, rest = divmod(horizon.duration_us, cycle_us)
        return full * math.ceil(on_us / gap) + math.ceil(min(on_us, rest) / gap)

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        gap = horizon.gap_us(self.load)
        on_us, cycle_us = self.on * SECOND_US, (self.on + self.off) * SECOND_US
        per_cycle = math.ceil(on_us / gap)
        horizon.check_volume(self.name, self.volume(horizon))
        out: list[Arrival] = []
        cycle = 0
        # Times from the start, each computed afresh (no sum of gaps to drift or lose them).
        while (cycle_start := cycle * cycle_us) < horizon.duration_us:
            on_end = min(cycle_start + on_us, horizon.duration_us)
            index = 0
            while (t := cycle_start + index * gap) < on_end and index < per_cycle:
                out.append((horizon.start_us + int(t), 0, 1))
                index += 1
            cycle += 1
        return out

    def describe(self) -> str:
        return f"onoff x{_num(self.load)} {_num(self.on)}s/{_num(self.off)}s"


@init_checked
@dataclass(frozen=True, slots=True)
class BoundaryBurst(Pattern):
    """``size`` requests just before every other window edge and ``size`` on it."""

    size: int | None = None
    name = "boundary"

    def __post_init__(self) -> None:
        if self.size is not None and self.size < 1:
            raise ConfigurationError(f"pattern boundary: size={self.size!r} must be at least 1")

    def volume(self, horizon: Horizon) -> float:
        size = self.size or horizon.limit
        return 2 * size * math.ceil(horizon.duration_us / (2 * horizon.period_us))

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        size = self.size or horizon.limit
        period = horizon.period_us
        edge = (horizon.start_us // period + 1) * period
        horizon.check_volume(self.name, self.volume(horizon))
        out: list[Arrival] = []
        while edge < horizon.end_us:
            out.extend((edge - 1, 0, 1) for _ in range(size))
            out.extend((edge, 0, 1) for _ in range(size))
            edge += 2 * period
        return out

    def describe(self) -> str:
        return "boundary" if self.size is None else f"boundary {self.size}"


@init_checked
@dataclass(frozen=True, slots=True)
class RetryStorm(Pattern):
    """Clients that start together and retry denials with exponential backoff."""

    clients: int = 50
    load: float = 1.5
    jitter: bool = False
    base: float = 1.0
    cap: float = 30.0
    seed: int = 1
    name = "retry-storm"
    positive = ("load", "base", "cap")

    def __post_init__(self) -> None:
        if not 1 <= self.clients <= MAX_CLIENTS:
            raise ConfigurationError(
                f"pattern retry-storm: clients={self.clients!r} must be from 1 to {MAX_CLIENTS:,}"
            )
        Pattern.__post_init__(self)  # zero-argument super() fails in a slots dataclass

    def start(self, horizon: Horizon) -> Stream:
        """A reactive stream: each client's next arrival depends on its last decision."""
        return _Storm(self, horizon)

    def volume(self, horizon: Horizon) -> float:
        """Its clients' first calls, or what they offer when every call is admitted (each
        paces itself at its share of ``load``) if more; denials add retries, which the run
        counts as it makes them."""
        return max(self.clients, horizon.duration_us / horizon.gap_us(self.load))

    def arrivals(self, horizon: Horizon) -> list[Arrival]:
        return [(horizon.start_us, client, 1) for client in range(self.clients)]

    def describe(self) -> str:
        jitter = "jitter" if self.jitter else "no jitter"
        label = f"retry-storm {self.clients} clients x{_num(self.load)} {jitter}"
        if self.base != 1.0:
            label += f" base {_num(self.base)}s"
        if self.cap != 30.0:
            label += f" cap {_num(self.cap)}s"
        # Without jitter the seed draws nothing: storms that differ only in it are the same.
        return label + (_seed(self.seed) if self.jitter else "")


class _Storm(Stream):
    """A retry storm in progress: each client's failed attempts and its jitter source."""

    def __init__(self, pattern: RetryStorm, horizon: Horizon) -> None:
        super().__init__(pattern.arrivals(horizon))
        self.pattern = pattern
        self.horizon = horizon
        self.attempts = [0] * pattern.clients
        self.rng = random.Random(pattern.seed)
        # Each client offers its share: clients x gap apart, so together they offer `load`.
        self.think_us = horizon.gap_us(pattern.load) * pattern.clients

    def after(self, arrival: Arrival, allowed: bool, retry_after_us: int) -> Arrival | None:
        time_us, client, cost = arrival
        storm = self.pattern
        if allowed:
            self.attempts[client] = 0
            wait_us = self.think_us
        else:
            attempt = self.attempts[client]
            self.attempts[client] = attempt + 1
            wait_us = min(storm.base * 2**attempt, storm.cap) * SECOND_US
            if storm.jitter:
                wait_us = self.rng.uniform(0, wait_us)
        next_us = time_us + max(int(wait_us), 1)
        return (next_us, client, cost) if next_us < self.horizon.end_us else None


def _num(value: float) -> str:
    """``value`` as short as it reads back exactly: 1.5, 1e-05 (labels of different traffic
    differ)."""
    short = f"{value:g}"
    return short if float(short) == value else repr(value)


def _seed(seed: int) -> str:
    """A seed other than the default, for a label."""
    return "" if seed == 1 else f" seed {seed}"


def _number(name: str, key: str, raw: str) -> float:
    try:
        return float(raw)
    except ValueError:
        raise ConfigurationError(f"pattern {name}: {key}={raw!r} is not a number") from None


def _whole(name: str, key: str, raw: str) -> int:
    if not is_whole(raw):
        sign = ", not negative" if raw.startswith("-") and is_whole(raw[1:]) else ""
        raise ConfigurationError(f"pattern {name}: {key}={raw!r} must be a whole number{sign}")
    return int(raw)


def _flag(name: str, key: str, raw: str) -> bool:
    if raw.lower() in ("yes", "true", "1", "on"):
        return True
    if raw.lower() in ("no", "false", "0", "off"):
        return False
    raise ConfigurationError(f"pattern {name}: {key}={raw!r} must be yes or no")


_Parser = Callable[[str, str, str], object]

#: Pattern name -> (class, {parameter: parser}).
PATTERNS: dict[str, tuple[type[Pattern], dict[str, _Parser]]] = {
    "steady": (Steady, {"load": _number}),
    "poisson": (Poisson, {"load": _number, "seed": _whole}),
    "onoff": (OnOff, {"load": _number, "on": _number, "off": _number}),
    "boundary": (BoundaryBurst, {"size": _whole}),
    "retry-storm": (
        RetryStorm,
        {
            "clients": _whole,
            "load": _number,
            "jitter": _flag,
            "base": _number,
            "cap": _number,
            "seed": _whole,
        },
    ),
    "replay": (Replay, {"file": lambda _n, _k, raw: raw}),
}


def pattern_help() -> str:
    """The patterns and their parameters, as listed in this module's docstring."""
    text = (__doc__ or "").partition("Patterns, by name, as ")[2]
    return "patterns: " + text.rstrip() + "\n"


def parse(spec: str) -> Pattern:
    """``"poisson"``, ``"onoff:load=6,on=5,off=25"``, ``"replay:file=log.txt"``."""
    name, _, rest = spec.strip().partition(":")
    entry = PATTERNS.get(name)
    if entry is None:
        raise ConfigurationError(
            f"unknown pattern {name!r} in {spec!r}; choose one of: {', '.join(PATTERNS)}"
        )
    cls, parsers = entry
    kwargs: dict[str, object] = {}
    for item in filter(None, (part.strip() for part in rest.split(","))):
        key, eq, raw = item.partition("=")
        key = key.strip()
        if not eq or key not in parsers:
            known = ", ".join(parsers) or "none"
            raise ConfigurationError(
                f"pattern {name}: bad parameter {item!r} in {spec!r}; parameters: {known}"
            )
        if key in kwargs:
            raise ConfigurationError(
                f"pattern {name}: {key} is given twice in {spec!r}; give each parameter once"
            )
        kwargs[key] = parsers[key](name, key, raw.strip())
    return cls(**kwargs)
