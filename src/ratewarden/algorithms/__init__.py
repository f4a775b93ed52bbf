"""Pure rate limiting algorithms: state + now + cost -> outcome + new state.

Nothing here does I/O or reads a clock; a test walks these imports and fails on
``time``, ``asyncio``, ``redis`` or ``ratewarden.storage``. Each module has a Lua
twin of the same stem in ``ratewarden/storage/lua/``.
"""

from __future__ import annotations

from types import ModuleType

from ratewarden.algorithms import _charged_window as charged_window
from ratewarden.algorithms import _fair_share as fair_share
from ratewarden.algorithms import _gcra_multi as gcra_multi
from ratewarden.algorithms import (
    fixed_window,
    gcra,
    leaky_bucket,
    sliding_log,
    sliding_window,
    token_bucket,
)
from ratewarden.algorithms._base import (
    NEVER,
    Algorithm,
    Outcome,
    Step,
    layered,
    layered_each,
    new_outcome,
)
from ratewarden.errors import ConfigurationError
from ratewarden.rate import Rate

# The rate algorithms, the two operations beyond them (``gcra_multi``: several axes of
# one budget; ``fair_share``: weighted shares of a pool), and the shared vocabulary
# every store and adapter uses (``Outcome``, ``NEVER``, the layering loops).
__all__ = [
    "ALGORITHMS",
    "NEVER",
    "WINDOWS",
    "Algorithm",
    "Outcome",
    "Step",
    "charged_window",
    "fair_share",
    "gcra_multi",
    "get",
    "layered",
    "layers",
    "layered_each",
    "new_outcome",
    "state_suffix",
]

#: Rate algorithms by name (the ``algorithm=`` value everywhere).
ALGORITHMS: dict[str, ModuleType] = {
    module.NAME: module
    for module in (fixed_window, gcra, leaky_bucket, sliding_log, sliding_window, token_bucket)
}


def get(name: str) -> ModuleType:
    """The algorithm module called ``name``, or a ConfigurationError listing the choices
    (and the one meant, for ``'GCRA'``, ``'sliding-window'`` or ``'token bucket'``)."""
    module = ALGORITHMS.get(name) if isinstance(name, str) else None
    if module is None:
        choices = ", ".join(sorted(ALGORITHMS))
        words = name.lower().replace("-", " ").replace("_", " ") if isinstance(name, str) else ""
        meant = "_".join(words.split())
        hint = f"; did you mean {meant!r}?" if meant in ALGORITHMS else ""
        raise ConfigurationError(f"unknown algorithm {name!r}; choose one of: {choices}{hint}")
    return module


#: The rate algorithms whose state counts what was admitted in a window (or the trailing
#: period) whatever the limit: the limit is only compared with the count, so their state is
#: named without it and a changed limit goes on counting (as envoyproxy/ratelimit's keys).
#: A bucket's state (a TAT, a level) means something only at its rate, so it is named with
#: the whole rate and a changed rate starts afresh.
WINDOWS = frozenset({fixed_window.NAME, sliding_log.NAME, sliding_window.NAME})


def state_suffix(algorithm: str, rate: Rate) -> str:
    """What names the state ``algorithm`` keeps for ``rate``, after the key: a store's state
    key is ``<prefix>:{<escaped key>}`` and this. Two (algorithm, rate) pairs with the same
    suffix count the same state: a window's ``:<algorithm>:<period_us>``, a bucket's
    ``:<algorithm>:<limit>:<period_us>:<capacity>``."""
    if algorithm in WINDOWS:
        return f":{algorithm}:{rate.period_us}"
    return f":{algorithm}:{rate.limit}:{rate.period_us}:{rate.capacity}"


def layers(
    module: ModuleType, rates: tuple[Rate, ...]
) -> tuple[tuple[tuple[int, ...], ...], tuple[str, ...]]:
    """Each rate's params and state suffix under the algorithm ``module``, for rates
    ``checks.check_rates`` passed: the algorithm's own checks, run by the store's plan and
    by a limiter before it spends anything in this process. Raises ``ConfigurationError``
    for a rate the algorithm refuses (a window's burst) or two rates that name one state."""
    params = tuple(module.params(rate) for rate in rates)
    suffixes = tuple(state_suffix(module.NAME, rate) for rate in rates)
    if len(set(suffixes)) != len(suffixes):
        _refuse_shared(module.NAME, rates, suffixes)
    return params, suffixes


def _refuse_shared(name: str, rates: tuple[Rate, ...], suffixes: tuple[str, ...]) -> None:
    """Two rates of one call name one state: a window's count is per period whatever the
    limit; a bucket's state is per limit, period and capacity, however the burst is written."""
    first: dict[str, Rate] = {}
    for rate, suffix in zip(rates, suffixes, strict=True):
        other = first.setdefault(suffix, rate)
        if other is rate:
            continue
        if name in WINDOWS:
            smaller = min(other, rate, key=lambda r: r.limit)
            raise ConfigurationError(
                f"rates {other} and {rate} of the {name} algorithm count the same window: "
                f"its count does not depend on the limit, so they would share one count and "
                f"the smaller limit ({smaller}) decides alone; keep one of them"
            )
        raise ConfigurationError(
            f"rates {other} and {rate} of the {name} algorithm are one bucket: a bucket has no "
            "window or count, its state is named by its limit, period and capacity (the burst, "
            f"or the limit when there is none: {rate.capacity} for both), so these two would "
            "share one state and decide as one rate; keep one of them"
        )
