"""The options of what ``ratewarden serve`` tells the outside about itself: the Prometheus
names of envoyproxy/ratelimit's stats, those stats over StatsD and DogStatsD, and traces over
OTLP (OpenTelemetry). Rows of the options'
table (``options.OPTIONS``), kept here to keep that module readable.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.server.dogstatsd import load_mogrifiers, parse_dogstatsd_address
from ratewarden.server.parsers import (
    Option,
    boolean,
    choice,
    pairs,
    seconds,
    statsd_address,
    statsd_tags,
)
from ratewarden.server.statsd_mapping_file import load_mapping

__all__ = ["TELEMETRY", "TRACING", "fraction", "warn_without_effect", "without_effect"]

log = logging.getLogger("ratewarden.server")

#: ``--tracing``: off, or the OTLP protocol the spans are exported with.
TRACING = ("off", "http", "grpc")


def fraction(value: Any) -> float:
    """A number from 0 to 1, both included."""
    try:
        number = float(str(value).strip())
    except ValueError:
        raise ConfigurationError("must be a number from 0 to 1") from None
    if not 0.0 <= number <= 1.0:
        raise ConfigurationError("must be a number from 0 to 1")
    return number


TELEMETRY: dict[str, Option] = {
    "metrics_mapping": Option(
        "--metrics-mapping",
        load_mapping,
        "a statsd_exporter mapping file (YAML, upstream's PROMETHEUS_MAPPER_YAML): "
        "envoyproxy/ratelimit's stats on /metrics named by it, not by upstream's default "
        "mapping (none)",
    ),
    "metrics_response_time_ms": Option(
        "--metrics-response-time-ms",
        boolean,
        "ratelimit_service_response_time_seconds observed in milliseconds, as upstream's "
        "mapping did before it scaled them to seconds (false)",
    ),
    "metrics_upstream_names": Option(
        "--metrics-upstream-names",
        boolean,
        "envoyproxy/ratelimit's counters on /metrics by its bare names, without _total, and "
        "store failures as err_type=redis_error once a call, as its USE_PROMETHEUS exposes "
        "them (false; upstream's USE_PROMETHEUS=true turns it on)",
    ),
    "statsd": Option(
        "--statsd",
        statsd_address,
        "send envoyproxy/ratelimit's stats to this StatsD server: tcp://HOST:PORT (HOST:PORT "
        "alone is TCP, as upstream) or udp://HOST:PORT (off)",
    ),
    "statsd_tags": Option(
        "--statsd-tags",
        statsd_tags,
        "tags on every StatsD and DogStatsD stat, NAME:VALUE,NAME:VALUE (none)",
    ),
    "statsd_interval": Option(
        "--statsd-interval",
        seconds(0.0, allow_low=False),
        "seconds between sends to --statsd and --dogstatsd (10)",
    ),
    "dogstatsd": Option(
        "--dogstatsd",
        parse_dogstatsd_address,
        "send envoyproxy/ratelimit's stats to this DogStatsD server (a Datadog Agent), tags "
        "as tags: udp://HOST:PORT (HOST:PORT alone is UDP) or unix:///PATH (off)",
    ),
    "dogstatsd_mogrifiers": Option(
        "--dogstatsd-mogrifiers",
        load_mogrifiers,
        "a YAML file of mogrifiers, each a pattern and the name and tags that a --dogstatsd "
        "stat matching it is sent with (none)",
    ),
    "tracing": Option(
        "--tracing",
        choice(TRACING),
        "export a span per ShouldRateLimit call over OTLP: http or grpc, to the endpoint the "
        "OTEL_EXPORTER_OTLP_* variables name (off; pip install 'ratewarden[tracing]')",
    ),
    "tracing_sampling_rate": Option(
        "--tracing-sampling-rate",
        fraction,
        "share of calls traced when Envoy sent no sampling decision; a sampled parent is "
        "always followed (1)",
    ),
    "tracing_resource": Option(
        "--tracing-resource",
        pairs,
        "KEY=VALUE,... of the spans' resource: service.name (ratewarden), service.namespace, "
        "service.instance.id (a random UUID); over OTEL_RESOURCE_ATTRIBUTES",
    ),
}


#: Options that do nothing unless one of the settings after them is on, and what to say then
#: (--dogstatsd-mogrifiers without --dogstatsd is refused in settings.py).
_NEEDS: tuple[tuple[str, tuple[str, ...], str], ...] = (
    ("statsd_tags", ("statsd", "dogstatsd"), "needs --statsd or --dogstatsd"),
    ("statsd_interval", ("statsd", "dogstatsd"), "needs --statsd or --dogstatsd"),
    ("tracing_sampling_rate", ("tracing",), "needs --tracing"),
    ("tracing_resource", ("tracing",), "needs --tracing"),
)


def without_effect(settings: Any) -> list[tuple[str, str]]:
    """The telemetry options ``settings`` give (other than their defaults) that change
    nothing, as ``(flag, what it needs)``: StatsD's with StatsD and DogStatsD off, tracing's
    with ``--tracing off``."""
    defaults = {field.name: field.default for field in dataclasses.fields(settings)}
    found = []
    for name, needs, why in _NEEDS:
        off = all(getattr(settings, need) in (None, "off") for need in needs)
        if off and getattr(settings, name) != defaults[name]:
            found.append((TELEMETRY[name].flag, why))
    return found


def warn_without_effect(settings: Any) -> None:
    """One warning naming the telemetry options ``settings`` give that change nothing (the
    flags' counterpart of the ``upstream_settings_without_effect`` line)."""
    found = without_effect(settings)
    if found:
        log.warning(
            "options that change nothing here: %s",
            "; ".join(f"{flag} {why}" for flag, why in found),
            extra={"event": "options_without_effect", "options": [flag for flag, _ in found]},
        )
