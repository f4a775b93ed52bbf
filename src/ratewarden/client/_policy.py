"""What to retry and how long to wait: ``RetryPolicy`` and the full-jitter backoff."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ratewarden.checks import check_bool, init_checked, is_number
from ratewarden.errors import ConfigurationError, RatewardenError

__all__ = [
    "IDEMPOTENCY_KEY",
    "IDEMPOTENT_METHODS",
    "KEYED_METHODS",
    "RetriesExhaustedError",
    "RetryPolicy",
    "backoff_delay",
]

#: Methods RFC 9110 defines as idempotent: retried by default.
IDEMPOTENT_METHODS = frozenset({"DELETE", "GET", "HEAD", "OPTIONS", "PUT", "TRACE"})
#: Methods retried only with an ``Idempotency-Key`` (``idempotency_keys=True``).
KEYED_METHODS = frozenset({"PATCH", "POST"})
IDEMPOTENCY_KEY = "Idempotency-Key"
#: An HTTP method name: a token (RFC 9110, section 5.6.2), as the middleware's rules take.
_METHOD = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


class RetriesExhaustedError(RatewardenError):
    """The retry budget ran out (``raise_on_give_up=True``); ``response`` is the last one."""

    def __init__(self, message: str, response: Any) -> None:
        super().__init__(message)
        self.response = response


def _positive(name: str, value: object, *, zero_ok: bool = False) -> float:
    if not is_number(value, low_ok=zero_ok):
        bound = "zero or more" if zero_ok else "more than zero"
        raise ConfigurationError(f"RetryPolicy.{name}={value!r}: must be a finite number {bound}")
    return float(value)


@init_checked
@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often, how long and what to retry. Durations in seconds.

    - ``max_attempts``: attempts in all, the first one included.
    - ``backoff_base`` / ``backoff_cap``: the full-jitter backoff without a hint.
    - ``max_wait``: the most one request sleeps, summed over its retries.
    - ``hint_jitter``: the window of uniform jitter added above a server hint.
    - ``statuses``: responses that are retried (429 and 503). A 409 that carries
      ``Retry-After`` is retried too on a request that carries an Idempotency-Key: its
      original is still running.
    - ``methods``: methods retried without a key (the idempotent ones). POST or PATCH listed
      here is retried as it is, with no key unless ``idempotency_keys`` adds one: for a
      server where repeating it is safe (a search sent as POST).
    - ``idempotency_keys``: also retry POST and PATCH, each with one Idempotency-Key.
    - ``retry_transport_errors``: retry timeouts and connection failures too.
    - ``raise_on_give_up``: raise ``RetriesExhaustedError`` rather than return the last response.
    """

    max_attempts: int = 5
    backoff_base: float = 0.5
    backoff_cap: float = 30.0
    max_wait: float = 60.0
    hint_jitter: float = 1.0
    statuses: frozenset[int] = field(default=frozenset({429, 503}))
    methods: frozenset[str] = IDEMPOTENT_METHODS
    idempotency_keys: bool = False
    retry_transport_errors: bool = True
    raise_on_give_up: bool = False

    def __post_init__(self) -> None:
        attempts = self.max_attempts
        if isinstance(attempts, bool) or not isinstance(attempts, int) or attempts < 1:
            raise ConfigurationError(
                f"RetryPolicy.max_attempts={attempts!r}: must be a whole number >= 1 "
                "(1 means no retries)"
            )
        for name in ("idempotency_keys", "retry_transport_errors", "raise_on_give_up"):
            check_bool(f"RetryPolicy.{name}", getattr(self, name))
        for name in ("backoff_base", "backoff_cap", "max_wait"):
            object.__setattr__(self, name, _positive(name, getattr(self, name)))
        if self.backoff_cap < self.backoff_base:
            raise ConfigurationError(
                f"RetryPolicy.backoff_cap={self.backoff_cap:g} is below "
                f"backoff_base={self.backoff_base:g}: the cap bounds the doubling ceilings "
                "that start at the base; give a cap at least the base"
            )
        jitter = _positive("hint_jitter", self.hint_jitter, zero_ok=True)
        object.__setattr__(self, "hint_jitter", jitter)
        object.__setattr__(self, "statuses", _statuses(self.statuses))
        object.__setattr__(self, "methods", _methods(self.methods))

    def delay(self, retry: int, hint: float | None, u: float) -> float:
        """Seconds before retry number ``retry`` (0 = first retry) given a hint and U in [0, 1)."""
        u = u if 0.0 <= u <= 1.0 else (1.0 if u > 1.0 else 0.0)  # NaN counts as 0
        if hint is None:
            return backoff_delay(retry, self.backoff_base, self.backoff_cap, u)
        return hint + u * self.hint_jitter


def _statuses(values: Iterable[object]) -> frozenset[int]:
    if isinstance(values, str | bytes | int):
        raise ConfigurationError(
            f"RetryPolicy.statuses={values!r}: pass a set of HTTP statuses such as "
            "{429, 503}, not one value"
        )
    out = frozenset(values)
    for status in out:
        if isinstance(status, bool) or not isinstance(status, int) or not 100 <= status <= 599:
            raise ConfigurationError(
                f"RetryPolicy.statuses has {status!r}: each must be an HTTP status 100..599"
            )
    return out  # type: ignore[return-value]


def _methods(values: Iterable[object]) -> frozenset[str]:
    if isinstance(values, str):
        raise ConfigurationError(
            f"RetryPolicy.methods={values!r}: pass a set of method names, not one string"
        )
    out = set()
    for method in values:
        if not isinstance(method, str) or not _METHOD.fullmatch(method):
            known = sorted(IDEMPOTENT_METHODS | KEYED_METHODS)
            near = difflib.get_close_matches(str(method).upper(), known, n=1)
            hint = f"; did you mean {near[0]!r}?" if near else ""
            raise ConfigurationError(
                f"RetryPolicy.methods has {method!r}: each must be a method name, an HTTP "
                f"token such as 'GET' or 'M-SEARCH'{hint}"
            )
        out.add(method.upper())
    return frozenset(out)


def backoff_delay(retry: int, base: float, cap: float, u: float) -> float:
    """AWS "full jitter": ``u * min(cap, base * 2 ** retry)``, u in [0, 1)."""
    # 2 ** 1100 overflows a float: past the cap the exponent no longer matters.
    ceiling = cap if retry >= 64 else min(cap, base * 2.0**retry)
    return u * ceiling
