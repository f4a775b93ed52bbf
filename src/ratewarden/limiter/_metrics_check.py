"""The one check of a ``metrics=`` option, made where an object taking one is built.

A metrics object is an instance of a ``Metrics`` subclass (``PrometheusMetrics()``), or of a
class of the caller's with the hooks that are called: the check looks for those methods on
its class once, at construction, so a decision costs nothing more. A class given for an
instance (``metrics=PrometheusMetrics``), ``object()`` or a misplaced value would otherwise be
taken, and fail at every decision after the store was charged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import cast

from ratewarden.errors import ConfigurationError
from ratewarden.metrics import NO_METRICS, Metrics

__all__ = ["DECISION_HOOKS", "check_metrics"]

#: The hooks a limiter's decisions call.
DECISION_HOOKS = ("decision", "degraded", "store_latency")


def check_metrics(
    owner: str, metrics: object, hooks: Sequence[str], *, none_ok: bool = True
) -> Metrics:
    """``metrics`` (``NO_METRICS`` for None where ``none_ok``), or a ``ConfigurationError``
    naming ``owner``, the value and what is expected. A ``Metrics`` instance passes as is;
    any other object passes when its class has every method of ``hooks`` (what ``owner``
    calls), as a user's own metrics class written without subclassing ``Metrics`` does."""
    if isinstance(metrics, Metrics):
        return metrics
    if metrics is None and none_ok:
        return NO_METRICS
    offer = "give ratewarden.metrics.PrometheusMetrics() or an instance of a Metrics subclass"
    if metrics is None:
        why = f"leave metrics out for none; {offer}"
    elif isinstance(metrics, type):
        why = f"that is a class; give an instance, {metrics.__name__}()"
    else:
        missing = [h for h in hooks if not callable(getattr(type(metrics), h, None))]
        if not missing:
            return cast(Metrics, metrics)
        name = type(metrics).__name__
        kind = f"{'an' if name[:1] in 'AEIOUaeiou' else 'a'} {name}"
        lacks = ", ".join(f"{hook}()" for hook in missing)
        why = f"{kind} has no {lacks}; {offer}, or of a class with {', '.join(hooks)}"
    raise ConfigurationError(f"{owner}: metrics {metrics!r:.60} must be a Metrics: {why}")
