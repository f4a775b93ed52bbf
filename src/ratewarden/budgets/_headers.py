"""Provider-style rate limit headers for a budget decision, next to the IETF fields.

LLM providers report each budget axis in headers their SDKs already read::

    x-ratelimit-limit-requests: 500          x-ratelimit-limit-tokens: 100000
    x-ratelimit-remaining-requests: 499      x-ratelimit-remaining-tokens: 95800
    x-ratelimit-reset-requests: 120ms        x-ratelimit-reset-tokens: 2.52s

``reset`` is the time until the axis is full again, as a Go-style duration
(``120ms``, ``2.52s``, ``6m0s``, ``1h0m0s``). Every other axis follows the same
pattern with ``_`` written ``-`` (``x-ratelimit-remaining-input-tokens``).

Beside them, the IETF httpapi draft fields describe every axis with its quota
unit in ``qu``: ``RateLimit-Policy: "tokens";q=100000;w=60;qu="tokens"`` and
``RateLimit: "tokens";r=95800;t=1``. ``t`` is draft-11's effective window: the
seconds within which no more than ``r`` can be used (the time until the next
unit of the axis comes back, rounded up), not the ``reset`` above. A denied
decision adds ``Retry-After`` in whole seconds, rounded up, and never earlier
than the ``t`` of an axis with ``r=0``.
"""

from __future__ import annotations

import math

from ratewarden.budgets._values import AxisState, BudgetDecision

__all__ = ["format_duration", "provider_headers"]

Header = tuple[str, str]

_TOKEN_AXES = {"tokens", "input_tokens", "output_tokens"}


def format_duration(seconds: float) -> str:
    """A Go-style duration, never shorter than ``seconds``: ``20ms``, ``1.5s``, ``6m0s``."""
    if seconds <= 0:
        return "0s"
    if seconds < 1:
        return f"{math.ceil(seconds * 1000)}ms"
    ms = math.ceil(seconds * 1000)
    hours, ms = divmod(ms, 3_600_000)
    minutes, ms = divmod(ms, 60_000)
    secs = f"{ms / 1000:.3f}".rstrip("0").rstrip(".") + "s"
    if hours:
        return f"{hours}h{minutes}m{secs}"
    if minutes:
        return f"{minutes}m{secs}"
    return secs


def _unit(axis: str) -> str:
    return "tokens" if axis in _TOKEN_AXES else axis


def _window_s(state: AxisState) -> int:
    return math.ceil(state.rate.period_us / 1_000_000)


def _window_t(state: AxisState) -> int:
    """The axis' ``t``: its effective window in whole seconds, rounded up."""
    refill = state.refill_after
    return math.ceil(refill) if 0 < refill < math.inf else 0


def provider_headers(decision: BudgetDecision, *, ietf: bool = True) -> list[Header]:
    """The ``(name, value)`` headers for ``decision``: every axis, then the IETF fields."""
    headers: list[Header] = []
    for state in decision.axes:
        suffix = state.name.replace("_", "-")
        headers.append((f"x-ratelimit-limit-{suffix}", str(state.limit)))
        headers.append((f"x-ratelimit-remaining-{suffix}", str(state.remaining)))
        reset = 0.0 if math.isinf(state.reset_after) else state.reset_after
        headers.append((f"x-ratelimit-reset-{suffix}", format_duration(reset)))
    if ietf:
        policy = ", ".join(
            f'"{s.name}";q={s.limit};w={_window_s(s)};qu="{_unit(s.name)}"' for s in decision.axes
        )
        current = ", ".join(f'"{s.name}";r={s.remaining};t={_window_t(s)}' for s in decision.axes)
        headers.append(("RateLimit-Policy", policy))
        headers.append(("RateLimit", current))
    if not decision.allowed and math.isfinite(decision.retry_after):
        wait = max(1, math.ceil(decision.retry_after))
        if ietf:
            # The draft: Retry-After never points before the end of an exhausted axis' window.
            wait = max([wait, *(_window_t(s) for s in decision.axes if s.remaining <= 0)])
        headers.append(("Retry-After", str(wait)))
    return headers
