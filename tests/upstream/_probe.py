"""One rate limit service in process, asked as envoyproxy/ratelimit's config tests ask ``GetLimit``.

``Probe(config).ask(domain, *entries)`` sends one ``ShouldRateLimit`` request of one
descriptor to a real ``RateLimitService`` (memory store, ``ManualClock``, the
``ServiceStats`` that ``ratewarden serve`` installs) and returns what upstream's tests
read off the matched limit: the status, the limit, and the stats key that counted
the hit, written as upstream writes it (``domain.key_value.key``; the Prometheus
``key`` label is that key without its domain).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from envoy.extensions.common.ratelimit.v3 import ratelimit_pb2
from envoy.service.ratelimit.v3 import rls_pb2
from envoy.type.v3 import ratelimit_unit_pb2
from google.protobuf import json_format

from ratewarden.server.config import RateLimitConfig
from ratewarden.server.service import RateLimitService
from ratewarden.server.stats import ServiceStats
from ratewarden.storage.memory import MemoryStore
from ratewarden.testing import ManualClock

#: A whole day since the epoch: every window starts here.
ALIGNED = 1_700_006_400.0
OK = rls_pb2.RateLimitResponse.OK
OVER = rls_pb2.RateLimitResponse.OVER_LIMIT
UNIT = rls_pb2.RateLimitResponse.RateLimit.Unit
STATS = ("total_hits", "over_limit", "near_limit", "within_limit", "shadow_mode")


@dataclass(frozen=True, slots=True)
class Seen:
    """One descriptor's answer: ``limit`` is ``(requests_per_unit, unit name, name)`` or
    None (no rule, or unlimited); ``stats_key`` is the key that counted it, or None."""

    code: int
    limit: tuple[int, str, str] | None
    remaining: int
    stats_key: str | None
    metadata: dict[str, Any]

    @property
    def unlimited(self) -> bool:
        return self.code == OK and self.limit is None and self.remaining == 2**32 - 1


class Probe:
    """A service over ``config``; ``ask`` decides one descriptor and reads the stats."""

    def __init__(self, config: RateLimitConfig, **options: Any) -> None:
        self.clock = ManualClock(ALIGNED)
        self.stats = ServiceStats(clock=self.clock)
        self.service = RateLimitService(
            config, MemoryStore(clock=self.clock), hooks=self.stats, **options
        )

    def ask(
        self, domain: str, *entries: tuple[str, str], limit: tuple[int, str] | None = None
    ) -> Seen:
        """One request of one descriptor; ``limit``: Envoy's override ``(rpu, "DAY")``."""
        descriptor = ratelimit_pb2.RateLimitDescriptor(
            entries=[ratelimit_pb2.RateLimitDescriptor.Entry(key=k, value=v) for k, v in entries]
        )
        if limit is not None:
            descriptor.limit.requests_per_unit = limit[0]
            descriptor.limit.unit = ratelimit_unit_pb2.RateLimitUnit.Value(limit[1])
        before = self.counts("total_hits")
        response = self.service.should_rate_limit(
            rls_pb2.RateLimitRequest(domain=domain, descriptors=[descriptor])
        )
        after = self.counts("total_hits")
        moved = [key for key, count in after.items() if count != before.get(key, 0.0)]
        assert len(moved) <= 1, moved
        (status,) = response.statuses
        current = None
        if status.HasField("current_limit"):
            found = status.current_limit
            current = (found.requests_per_unit, UNIT.Name(found.unit), found.name)
        metadata = json_format.MessageToDict(response.dynamic_metadata)
        return Seen(status.code, current, status.limit_remaining, (moved or [None])[0], metadata)

    def counts(self, stat: str) -> dict[str, float]:
        """``{stats key: count}`` of one of upstream's per-key stats (``STATS``)."""
        name = f"ratelimit_service_rate_limit_{stat}_total"
        found: dict[str, float] = {}
        for metric in self.stats.registry.collect():
            for sample in metric.samples:
                if sample.name == name:
                    labels = sample.labels
                    found[f"{labels['domain']}.{labels['key']}"] = sample.value
        return found

    def count(self, stat: str, stats_key: str) -> int:
        return int(self.counts(stat).get(stats_key, 0))

    def domain_not_found(self, domain: str) -> int:
        """upstream's ``<domain>.domain_not_found``: descriptors asked of an unknown domain."""
        name = "ratelimit_service_rate_limit_domain_not_found_total"
        return int(self.stats.registry.get_sample_value(name, {"domain": domain}) or 0)
