"""The options of Envoy's Rate Limit Quota Service in ``ratewarden serve`` (``--rlqs`` and its
``--rlqs-*`` tuning, docs/rlqs.md). Rows of the options' table (``options.OPTIONS``), kept here
to keep that module readable.
"""

from __future__ import annotations

from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.parsers import Option, boolean, integer, seconds

__all__ = ["MIN_INTERVAL_S", "RLQS"]

#: The shortest ``--rlqs-interval``: the round timer wakes four times an interval, and Envoy
#: 1.40 reports every 5 s, so rounds faster than this follow nothing sooner and cost CPU.
MIN_INTERVAL_S = 0.1


def interval(value: Any) -> float:
    """``--rlqs-interval``: seconds, at least ``MIN_INTERVAL_S``."""
    number = seconds(0.0, allow_low=False)(value)
    if number < MIN_INTERVAL_S:
        raise ConfigurationError(
            f"{number:g} is below {MIN_INTERVAL_S:g} s: the round timer would wake "
            f"{4 / number:g} times a second (0.001 took half a core with no Envoy) while Envoy "
            "reports every 5 s; the value is in seconds, not milliseconds"
        )
    return number


#: The ``--rlqs`` options by their ``Settings`` field name, in ``serve --help``'s order.
RLQS: dict[str, Option] = {
    "rlqs": Option(
        "--rlqs",
        boolean,
        "also serve Envoy's Rate Limit Quota Service (StreamRateLimitQuotas) on the gRPC port "
        "from the same rules; needs --transport grpcio (auto picks it); on Redis or memcached, "
        "replicas and workers share one budget",
    ),
    "rlqs_interval": Option(
        "--rlqs-interval",
        interval,
        "seconds between two share rounds of a quota bucket: renewals, newcomers, new shares; "
        "at least 0.1 (1)",
    ),
    "rlqs_ttl": Option(
        "--rlqs-ttl",
        integer(1, 86_400),
        "whole seconds an RLQS assignment lives in Envoy unless renewed; above --rlqs-interval (5)",
    ),
    "rlqs_idle": Option(
        "--rlqs-idle",
        seconds(0.0, allow_low=False),
        "seconds an Envoy may report no request for a quota bucket before it is told to "
        "abandon it; keep it above Envoy's reporting pace, 5 s in Envoy 1.40 (60)",
    ),
    "rlqs_demand_reports": Option(
        "--rlqs-demand-reports",
        integer(1, 100),
        "an Envoy's demand for a quota bucket is its rate over its last N reports: more is "
        "steadier, fewer follows moving demand sooner (2)",
    ),
    "rlqs_change_rounds": Option(
        "--rlqs-change-rounds",
        integer(1, 100),
        "over any K rounds of a quota bucket, its changed shares hand out at most one full "
        "burst (Envoy starts a changed share full): more is a tighter worst case, shares "
        "follow demand within K rounds (1: every round)",
    ),
    "rlqs_bucket_metrics": Option(
        "--rlqs-bucket-metrics",
        integer(0, 1_000),
        "per-bucket RLQS metrics for the N buckets with the highest demand, the rest summed as "
        'bucket="other"; bucket ids are request values and /metrics is open (0: none)',
    ),
}
