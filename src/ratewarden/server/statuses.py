"""Envoy's ``RateLimit`` units both ways: the enum a ``DescriptorStatus``'s current limit
names its unit with (``UNIT_ENUM``), and a descriptor's limit override read into a rule
(``override``).
Nothing here touches a store.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any, Protocol

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.errors import ConfigurationError
from ratewarden.rate import UNITS, Rate
from ratewarden.server.config import DEFAULT_ALGORITHM, DescriptorRule, Limit

__all__ = ["UNIT_ENUM", "Ignored", "Reporting", "override"]

#: How ``override`` reports an override it ignored: ``(domain, kind, why)``, where ``kind``
#: is the override's unit name, or ``"unknown unit"`` for every unit Envoy does not define
#: (a client cannot make kinds without end).
Ignored = Callable[[str, str, str], None]

_Response = rls_pb2.RateLimitResponse
UNIT_ENUM = {
    "second": _Response.RateLimit.SECOND,
    "minute": _Response.RateLimit.MINUTE,
    "hour": _Response.RateLimit.HOUR,
    "day": _Response.RateLimit.DAY,
    "week": _Response.RateLimit.WEEK,
    "month": _Response.RateLimit.MONTH,
    "year": _Response.RateLimit.YEAR,
}
_UNIT_NAME = {number: name for name, number in UNIT_ENUM.items()}


def override(
    domain: str,
    entries: tuple[tuple[str, str], ...],
    base: DescriptorRule | None,
    limit: Any,
    failure_mode: str,
    ignored: Ignored,
) -> DescriptorRule | None:
    """A rule for Envoy's per-descriptor ``limit``; it keeps the base rule's algorithm,
    failure mode and kind (a token budget stays a budget, at the given rate). A descriptor
    no rule matches takes ``failure_mode``: the service's default (``serve --failure-mode``),
    as a rule without its own does.

    As envoyproxy/ratelimit does, an override is never in shadow mode and has no
    name or replaces. An override with an unknown unit, or a rate the service cannot count,
    is ignored (the config applies) and told to ``ignored``: the service logs it, at most once
    a minute per domain and kind, not once per request.
    """
    unit = _UNIT_NAME.get(limit.unit)
    if unit is None:
        ignored(domain, "unknown unit", f"its unit {limit.unit} is not a RateLimit unit")
        return None
    algorithm = DEFAULT_ALGORITHM if base is None else base.algorithm
    rate = None
    if limit.requests_per_unit > 0:
        try:
            rate = Rate(limit.requests_per_unit, timedelta(microseconds=UNITS[unit]))
        except ConfigurationError as exc:
            ignored(domain, unit, str(exc))
            return None
    path = domain + "." + ".".join(f"{k}_{v}" if v else k for k, v in entries)
    return DescriptorRule(
        domain=domain,
        path=path,
        source="the request's limit override",
        limits=(Limit(limit.requests_per_unit, unit, rate=rate),),
        algorithm=algorithm,
        failure_mode=failure_mode if base is None else base.failure_mode,
        budget=base is not None and base.budget,
    )


class Reporting(Protocol):
    """What preparing a request's descriptors tells the service's reports (``hooks.Reports``
    has both): an override it could not apply, a value past its rule's cap."""

    def override_ignored(self, domain: str, kind: str, why: str) -> None: ...

    def overflow(self, rule: DescriptorRule, limit: int | None, *, override: bool) -> None: ...
