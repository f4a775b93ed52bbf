"""How long the server asked a client to wait: ``Retry-After``, ``RateLimit``, legacy resets.

Malformed values are ignored (the caller then backs off on its own); parsing never raises.
"""

from __future__ import annotations

import email.utils
import math
import re
from collections.abc import Mapping
from datetime import UTC

from ratewarden.headers import split_outside_quotes

__all__ = ["no_wait_helps", "retry_hint"]

# Up to 15 digits (an sf-integer), an optional fraction: bounded, so never a huge int parse.
_NUMBER = re.compile(r"\d{1,15}(?:\.\d{1,9})?")
# Retry-After's delay-seconds is 1*DIGIT, with no limit on its length (RFC 9110, 10.2.3).
_DELAY_SECONDS = re.compile(r"0*(\d+)(?:\.\d{1,9})?")
#: What a delay-seconds of more than 15 digits (over 31 million years) is read as: past any
#: max_wait, and still a finite number that a breaker's hold can be reckoned from.
LONGEST_WAIT = 999_999_999_999_999.0
# Legacy reset values at or above this are epoch seconds (2001-09-09), below it deltas.
_EPOCH_THRESHOLD = 1_000_000_000


def _seconds(text: str) -> float | None:
    text = text.strip()
    return float(text) if _NUMBER.fullmatch(text) else None


def _retry_after(value: str, now: float) -> float | None:
    """The wait a ``Retry-After`` asks for; for several joined with commas (a proxy and
    the app both set it: ``120, 120``), the longest, so that no sender is answered early.
    An HTTP-date has a comma of its own (``Wed, 21 Oct 2015 …``): a part that is neither a
    delay nor a date is read together with the next one. None when any part is unreadable."""
    parts, waits, i = value.split(","), [], 0
    while i < len(parts):
        wait = _delay(parts[i])
        if wait is None:
            wait = _date(parts[i], now)
        if wait is None and i + 1 < len(parts):
            i += 1
            wait = _date(f"{parts[i - 1]},{parts[i]}", now)
        if wait is None:
            return None
        waits.append(wait)
        i += 1
    return max(waits)


def _delay(text: str) -> float | None:
    delay = _DELAY_SECONDS.fullmatch(text.strip())
    if delay is None:
        return None
    # A server asking for longer than we can count asks for longer than anyone waits.
    return LONGEST_WAIT if len(delay[1]) > 15 else float(delay[0])


def _date(text: str, now: float) -> float | None:
    try:
        when = email.utils.parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return max(when.timestamp() - now, 0.0)
    except (OverflowError, OSError, ValueError):
        return None


def _ratelimit_items(value: str) -> list[tuple[float | None, float | None]]:
    """``(r, t)`` of each item of a ``RateLimit`` field; None where it is not a plain number."""
    items = []
    for item in split_outside_quotes(value, ","):
        params = {}
        for param in split_outside_quotes(item, ";")[1:]:
            name, _, text = param.partition("=")
            params[name.strip().lower()] = _seconds(text)
        items.append((params.get("r"), params.get("t")))
    return items


def _ratelimit_field(value: str) -> float | None:
    """The wait the ``RateLimit`` field asks for: the longest ``t`` among items with ``r=0``.

    Items whose ``r`` or ``t`` is not a plain number are skipped.
    """
    waits = [t for r, t in _ratelimit_items(value) if r == 0 and t is not None]
    return max(waits, default=None)


def no_wait_helps(headers: Mapping[str, str]) -> bool:
    """Does a 429 with these headers say that no wait will let the same request through?

    Yes when it has no ``Retry-After`` and its ``RateLimit`` field reports quota left
    (a plain ``r`` above 0) for every policy it lists: the server refused although no
    policy is exhausted, so the request itself is too large (ratewarden's middleware
    answers so a cost above what the rule can ever allow). A server that wants a retry
    says when, with ``Retry-After`` or an exhausted policy (``r=0``).
    """
    lowered = {str(name).lower(): str(value) for name, value in headers.items()}
    if "retry-after" in lowered or "ratelimit" not in lowered:
        return False
    items = _ratelimit_items(lowered["ratelimit"])
    return all(r is not None and r > 0 for r, _ in items)


def _legacy_reset(headers: Mapping[str, str], prefix: str, now: float) -> float | None:
    reset = headers.get(f"{prefix}reset")
    if reset is None:
        return None
    remaining = headers.get(f"{prefix}remaining")
    if remaining is not None and _seconds(remaining) != 0:
        return None
    seconds = _seconds(reset)
    if seconds is None:
        return None
    return max(seconds - now, 0.0) if seconds >= _EPOCH_THRESHOLD else seconds


def retry_hint(headers: Mapping[str, str], now: float) -> float | None:
    """Seconds the server asked the client to wait, or None when it gave no usable hint.

    ``headers`` is any mapping of response headers; ``now`` is epoch seconds (for
    HTTP-dates and epoch resets). Never raises on malformed values.
    """
    lowered = {str(name).lower(): str(value) for name, value in headers.items()}
    for seconds in (
        _retry_after(lowered["retry-after"], now) if "retry-after" in lowered else None,
        _ratelimit_field(lowered["ratelimit"]) if "ratelimit" in lowered else None,
        _legacy_reset(lowered, "x-ratelimit-", now),
        _legacy_reset(lowered, "ratelimit-", now),
    ):
        if seconds is not None and math.isfinite(seconds):
            return seconds
    return None
