"""Envoy's ``RateLimit`` units both ways: the enum a ``DescriptorStatus``'s current limit
names its unit with (``UNIT_ENUM``), and a descriptor's limit override read into a rule.
Nothing here touches a store.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from envoy.service.ratelimit.v3 import rls_pb2  # type: ignore[import-untyped, unused-ignore]

from ratewarden.errors import ConfigurationError
from ratewarden.rate import UNITS, Rate
from ratewarden.server.config import DEFAULT_ALGORITHM, DEFAULT_FAILURE_MODE, DescriptorRule, Limit

__all__ = ["UNIT_ENUM", "override"]

log = logging.getLogger("ratewarden.server.service")

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
    failure_mode: str = DEFAULT_FAILURE_MODE,
) -> DescriptorRule | None:
    """A rule for Envoy's per-descriptor ``limit``; it keeps the base rule's algorithm,
    failure mode and kind (a token budget stays a budget, at the given rate). A descriptor
    no rule matches takes ``failure_mode``: the service's default (``serve --failure-mode``),
    as a rule without its own does.

    As envoyproxy/ratelimit does, an override is never in shadow mode and has no
    name or replaces. An override with an unknown unit is ignored (the config applies).
    """
    unit = _UNIT_NAME.get(limit.unit)
    if unit is None:
        log.warning(
            "ignoring a limit override with unit %s in domain %r",
            limit.unit,
            domain,
            extra={"event": "limit_override_ignored", "domain": domain},
        )
        return None
    algorithm = DEFAULT_ALGORITHM if base is None else base.algorithm
    rate = None
    if limit.requests_per_unit > 0:
        try:
            rate = Rate(limit.requests_per_unit, timedelta(microseconds=UNITS[unit]))
        except ConfigurationError as exc:
            log.warning(
                "ignoring a limit override in domain %r: %s",
                domain,
                exc,
                extra={"event": "limit_override_ignored", "domain": domain},
            )
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
