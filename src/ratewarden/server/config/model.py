"""The rule model: what a loaded rule is made of, and how it writes itself out.

The names a rule may use (units, algorithms, failure modes), the error types a
load raises (``ConfigProblem``, ``ConfigError``) and the frozen rules:
``Limit`` and ``DescriptorRule``, each with ``to_dict`` (normalised, loadable
YAML). The descriptor tree the rules hang in, and its matching, is ``tree``
(``Level``, ``Node``, ``Match``, ``DomainConfig``, ``RateLimitConfig``: they
were here, and still resolve from here with a ``DeprecationWarning``). The other
modules of ``ratewarden.server.config`` read YAML into them; the package
re-exports them.

This module is pure: no I/O, no clock, no store, no YAML.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from ratewarden.deprecation import moved
from ratewarden.errors import ConfigurationError
from ratewarden.limiter import FAILURE_MODES  # re-exported: the core's one tuple
from ratewarden.rate import UNITS, Rate, format_period

__all__ = [
    "ALGORITHM_NAMES",
    "DEFAULT_ALGORITHM",
    "DEFAULT_FAILURE_MODE",
    "FAILURE_MODES",
    "ConfigError",
    "ConfigProblem",
    "Limit",
    "DescriptorRule",
    "UNIT_NAMES",
]

# The descriptor tree moved to its own module; the old import resolves, with a
# DeprecationWarning, for one release (docs/reference.md says so).
__getattr__ = moved(
    __name__,
    dict.fromkeys(
        ("DomainConfig", "Level", "Match", "Node", "RateLimitConfig"),
        "ratewarden.server.config.tree",
    ),
)

#: The units envoyproxy/ratelimit accepts (any case), in the order of the proto enum.
UNIT_NAMES = ("second", "minute", "hour", "day", "week", "month", "year")
#: Every algorithm name ratewarden defines; ``algorithms.ALGORITHMS`` says which are built.
ALGORITHM_NAMES = (
    "fixed_window",
    "gcra",
    "leaky_bucket",
    "sliding_log",
    "sliding_window",
    "token_bucket",
)
#: envoyproxy/ratelimit's only algorithm, so that existing configs behave as before.
DEFAULT_ALGORITHM = "fixed_window"
#: Envoy's own default (``failure_mode_deny: false``) lets requests through.
DEFAULT_FAILURE_MODE = "open"


# ---------------------------------------------------------------- errors


@dataclass(frozen=True, slots=True)
class ConfigProblem:
    """One thing wrong with a config: where (file, 1-based line, key) and what to do. Line 0:
    the file or path as a whole (missing, unreadable, empty), shown without a line."""

    file: str
    line: int
    key: str
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        return f"{where}: {self.key}: {self.message}"


class ConfigError(ConfigurationError):
    """The config did not load; ``errors`` lists every problem found, in file order."""

    def __init__(self, errors: Sequence[ConfigProblem]) -> None:
        self.errors: tuple[ConfigProblem, ...] = tuple(errors)
        lines = [str(problem) for problem in self.errors]
        if len(lines) == 1:
            message = lines[0]
        else:
            message = f"{len(lines)} problems in the rate limit config:\n" + "\n".join(lines)
        super().__init__(message)


# ---------------------------------------------------------------- rules


@dataclass(frozen=True, slots=True)
class Limit:
    """``requests_per_unit`` per ``unit_multiplier`` x ``unit``, with an optional burst.

    ``rate`` is the ``Rate`` a store counts; it is None when ``requests_per_unit``
    is 0, which envoyproxy/ratelimit treats as "always over the limit".
    """

    requests_per_unit: int
    unit: str
    unit_multiplier: int = 1
    burst: int | None = None
    rate: Rate | None = field(default=None, repr=False, compare=False)

    @property
    def period_us(self) -> int:
        return UNITS[self.unit] * self.unit_multiplier

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"unit": self.unit, "requests_per_unit": self.requests_per_unit}
        if self.unit_multiplier != 1:
            out["unit_multiplier"] = self.unit_multiplier
        if self.burst is not None:
            out["burst"] = self.burst
        return out

    def __str__(self) -> str:
        """As ``str(rate)`` spells it: ``"1000/5m"``, ``"3/minute (burst 5)"``."""
        return self._spelled(f"{self.requests_per_unit}/{format_period(self.period_us)}")

    def in_words(self) -> str:
        """For people (the dashboard): ``"1000 per 5 minutes"``, ``"3 per minute (burst 5)"``."""
        words = format_period(self.period_us, words=True)
        return self._spelled(f"{self.requests_per_unit} per {words}")

    def _spelled(self, text: str) -> str:
        return text if self.burst is None else f"{text} (burst {self.burst})"


@dataclass(frozen=True, slots=True)
class DescriptorRule:
    """The ``rate_limit`` of one descriptor node, with its node's flags (was ``Rule``: the
    name is the HTTP middleware's, ``ratewarden.middleware.Rule``).

    ``path`` is envoyproxy/ratelimit's key for the rule (``domain.key_value.key``),
    used in metrics and in ``describe()``; ``source`` is ``file:line``.
    ``limits`` is empty only for an ``unlimited`` rule. ``budget`` marks a
    descriptor's ``budget`` (a token budget, read by ``server/config/budget.py``): one
    GCRA limit whose hits are tokens, checked on hits 0 and charged otherwise.
    """

    domain: str
    path: str
    source: str
    limits: tuple[Limit, ...]
    unlimited: bool = False
    name: str = ""
    replaces: tuple[str, ...] = ()
    algorithm: str = DEFAULT_ALGORITHM
    failure_mode: str = DEFAULT_FAILURE_MODE
    shadow_mode: bool = False
    quota_mode: bool = False
    detailed_metric: bool = False
    budget: bool = False
    #: RLQS only: ``(peer name, weight)`` pairs, sorted, ``default`` among them when given
    #: (the weight of the peers not named; 1 otherwise). Empty: split by demand.
    rlqs_weights: tuple[tuple[str, int], ...] = ()
    #: A limit of 0 requests: every request is over, without asking a store.
    always_over: bool = field(init=False, repr=False, compare=False)
    #: The rates a store counts, made once: stores cache a call's plan by this tuple's identity.
    rates: tuple[Rate, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "always_over", any(lim.rate is None for lim in self.limits))
        rates = tuple(limit.rate for limit in self.limits if limit.rate is not None)
        object.__setattr__(self, "rates", rates)

    def rlqs_weight(self, peer: str) -> int:
        """The weight ``rlqs_weights`` gives the Envoy named ``peer`` ("" for none)."""
        default = 1
        for name, weight in self.rlqs_weights:
            if name == peer:
                return weight
            if name == "default":
                default = weight
        return default

    def limit_for(self, rate: Rate | None) -> Limit | None:
        """The configured ``Limit`` whose rate is ``rate`` (the binding one of a decision)."""
        limits = self.limits
        if limits and limits[0].rate is rate:  # most rules: one limit, its rate as decided
            return limits[0]
        for limit in limits:
            if limit.rate == rate:
                return limit
        return self.limits[0] if self.limits else None

    def to_dict(self) -> dict[str, Any]:
        """The ``rate_limit`` (or ``budget``) block, normalised (loadable YAML)."""
        if self.budget:
            return self._budget_dict()
        out: dict[str, Any] = {}
        if self.name:
            out["name"] = self.name
        if self.replaces:
            out["replaces"] = [{"name": name} for name in self.replaces]
        if self.unlimited:
            out["unlimited"] = True
            return out
        if self.algorithm != DEFAULT_ALGORITHM:
            out["algorithm"] = self.algorithm
        if self.failure_mode != DEFAULT_FAILURE_MODE:
            out["failure_mode"] = self.failure_mode
        if len(self.limits) == 1:
            out.update(self.limits[0].to_dict())
        else:
            out["limits"] = [limit.to_dict() for limit in self.limits]
        return out

    def _budget_dict(self) -> dict[str, Any]:
        # Written here, beside rate_limit's block, so that the model needs no reader to
        # write itself out; server/config/budget.py reads the same keys back.
        limit = self.limits[0]
        out: dict[str, Any] = {"unit": limit.unit, "tokens_per_unit": limit.requests_per_unit}
        if limit.unit_multiplier != 1:
            out["unit_multiplier"] = limit.unit_multiplier
        if limit.burst is not None:
            out["burst"] = limit.burst
        if self.failure_mode != DEFAULT_FAILURE_MODE:
            out["failure_mode"] = self.failure_mode
        if self.name:
            out["name"] = self.name
        return out

    def describe(self) -> str:
        if self.unlimited:
            what = "unlimited"
        else:
            what = ", ".join(str(limit) for limit in self.limits)
            what += f" algorithm={self.algorithm} failure_mode={self.failure_mode}"
        flags = [
            flag
            for flag, on in (
                ("shadow_mode", self.shadow_mode),
                ("quota_mode", self.quota_mode),
                ("detailed_metric", self.detailed_metric),
                ("budget", self.budget),
            )
            if on
        ]
        if self.name:
            flags.append(f"name={self.name}")
        if self.replaces:
            flags.append("replaces=" + ",".join(self.replaces))
        if self.rlqs_weights:
            flags.append("rlqs_weights=" + ",".join(f"{n}:{w}" for n, w in self.rlqs_weights))
        tail = f" [{' '.join(flags)}]" if flags else ""
        return f"{self.path}: {what}{tail}  ({self.source})"
