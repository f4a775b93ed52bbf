"""Settings of ``ratewarden serve``: a flag, else its variable, else envoyproxy/ratelimit's, else
the default.

Every option has one flag and one ``RATEWARDEN_*`` variable (the table is ``OPTIONS``, in
``server/options.py`` with the parsers). Flags and variables arrive as text and go through the
same parser, so a bad value reads the same whichever way it was given, and the message names the
flag or variable it came from::

    --config PATH...       RATEWARDEN_CONFIG          (several paths: separate with ":")
    --config-files yaml|all RATEWARDEN_CONFIG_FILES   yaml (all: every file, subdirectories too)
    --config-xds HOST:PORT RATEWARDEN_CONFIG_XDS      rules from an xDS server instead (and the
                                                      --xds-* options below it; docs/xds.md)
    --xds-node-id ID       RATEWARDEN_XDS_NODE_ID     the id 'default'
    --xds-node-metadata KV RATEWARDEN_XDS_NODE_METADATA (KEY=VALUE,...)
    --xds-headers KV       RATEWARDEN_XDS_HEADERS     (KEY=VALUE,...: the stream's gRPC metadata)
    --xds-retry-interval S RATEWARDEN_XDS_RETRY_INTERVAL 3 (doubled per failure, jittered)
    --xds-retry-max S      RATEWARDEN_XDS_RETRY_MAX   60
    --xds-max-message-bytes N RATEWARDEN_XDS_MAX_MESSAGE_BYTES 0 (gRPC's 4 MiB)
    --[no-]xds-force-start RATEWARDEN_XDS_FORCE_START false (ports open before the first rules)
    --[no-]xds-tls         RATEWARDEN_XDS_TLS         false (and --xds-tls-ca, --xds-tls-cert,
                                                      --xds-tls-key, --xds-tls-server-name)
    --store URL            RATEWARDEN_STORE           memory (default), redis://, memcache://, ...
    --host H               RATEWARDEN_HOST            127.0.0.1
    --grpc-port N          RATEWARDEN_GRPC_PORT       8081
    --http-port N          RATEWARDEN_HTTP_PORT       8080
    --workers N            RATEWARDEN_WORKERS         1
    --reload-interval S    RATEWARDEN_RELOAD_INTERVAL 5 (0 turns hot reload off)
    --health-interval S    RATEWARDEN_HEALTH_INTERVAL 2
    --[no-]health-needs-rules RATEWARDEN_HEALTH_NEEDS_RULES false
    --[no-]health-follows-store RATEWARDEN_HEALTH_FOLLOWS_STORE true (upstream's env: false)
    --grace S              RATEWARDEN_GRACE           10
    --drain S              RATEWARDEN_DRAIN           5 (NOT_SERVING but answering, on SIGTERM)
    --[no-]shadow          RATEWARDEN_SHADOW          false
    --[no-]quota-mode      RATEWARDEN_QUOTA_MODE      false
    --[no-]charge-denied   RATEWARDEN_CHARGE_DENIED   false
    --near-limit-ratio R   RATEWARDEN_NEAR_LIMIT_RATIO 0.8
    --failure-mode open|closed|local RATEWARDEN_FAILURE_MODE open (rules without their own)
    --on-error open|closed RATEWARDEN_ON_ERROR        open
    --log-level L          RATEWARDEN_LOG_LEVEL       info
    --log-format F         RATEWARDEN_LOG_FORMAT      json
    --dashboard W          RATEWARDEN_DASHBOARD       loopback (also: any, off)
    --tls-cert PATH        RATEWARDEN_TLS_CERT        PEM certificate chain: gRPC over TLS
    --tls-key PATH         RATEWARDEN_TLS_KEY         its PEM private key
    --tls-client-ca PATH   RATEWARDEN_TLS_CLIENT_CA   PEM CA for client certs (mTLS)
    --tls-client-san HOST  RATEWARDEN_TLS_CLIENT_SAN  the host a client cert must name
    --max-values-per-rule N RATEWARDEN_MAX_VALUES_PER_RULE 100000 (0 turns the cap off)
    --response-headers M   RATEWARDEN_RESPONSE_HEADERS off (also: legacy, draft-10)
    --legacy-header-names NAMES RATEWARDEN_LEGACY_HEADER_NAMES RateLimit-Limit,-Remaining,-Reset
    --response-metadata M  RATEWARDEN_RESPONSE_METADATA merged (also: upstream)
    --breaker-failures N   RATEWARDEN_BREAKER_FAILURES 5 (0 turns the circuit breaker off)
    --breaker-cooldown S   RATEWARDEN_BREAKER_COOLDOWN 1
    --over-limit-cache N   RATEWARDEN_OVER_LIMIT_CACHE 10000 (0 turns it off)
    --loop L               RATEWARDEN_LOOP            auto (uvloop if installed), asyncio, uvloop
    --transport T          RATEWARDEN_TRANSPORT       auto (native when installed), grpcio, native
    --grpc-host H          RATEWARDEN_GRPC_HOST       --host
    --grpc-uds PATH        RATEWARDEN_GRPC_UDS        off (gRPC on a Unix socket, not TCP)
    --grpc-max-connection-age S RATEWARDEN_GRPC_MAX_CONNECTION_AGE off (GOAWAY at that age)
    --grpc-max-connection-age-grace S RATEWARDEN_GRPC_MAX_CONNECTION_AGE_GRACE no limit
    --debug-port N         RATEWARDEN_DEBUG_PORT      off (the HTTP endpoints on a second port)
    --debug-host H         RATEWARDEN_DEBUG_HOST      --host
    --metrics-port N       RATEWARDEN_METRICS_PORT    off (the metrics alone on a port of their own)
    --metrics-host H       RATEWARDEN_METRICS_HOST    --host
    --metrics-path P       RATEWARDEN_METRICS_PATH    /metrics
    --metrics-mapping F    RATEWARDEN_METRICS_MAPPING none (statsd_exporter's mapping file)
    --[no-]metrics-response-time-ms RATEWARDEN_METRICS_RESPONSE_TIME_MS false
    --[no-]metrics-upstream-names RATEWARDEN_METRICS_UPSTREAM_NAMES false (USE_PROMETHEUS: true)
    --[no-]merge-domains   RATEWARDEN_MERGE_DOMAINS   false
    --key-prefix P         RATEWARDEN_KEY_PREFIX      rw
    --store-per-second URL RATEWARDEN_STORE_PER_SECOND off (per-second limits on their own store)
    --store-timeout S      RATEWARDEN_STORE_TIMEOUT   0.02
    --statsd URL           RATEWARDEN_STATSD          off (tcp://HOST:PORT or udp://HOST:PORT)
    --statsd-tags T        RATEWARDEN_STATSD_TAGS     none (NAME:VALUE,NAME:VALUE)
    --statsd-interval S    RATEWARDEN_STATSD_INTERVAL 10 (also --dogstatsd's)
    --dogstatsd URL        RATEWARDEN_DOGSTATSD       off (udp://HOST:PORT or unix:///PATH)
    --dogstatsd-mogrifiers F RATEWARDEN_DOGSTATSD_MOGRIFIERS none (YAML: pattern, name, tags)
    --tracing P            RATEWARDEN_TRACING         off, http or grpc (OTLP; OTEL_EXPORTER_OTLP_*)
    --tracing-sampling-rate R RATEWARDEN_TRACING_SAMPLING_RATE 1 (calls without Envoy's decision)
    --tracing-resource KV  RATEWARDEN_TRACING_RESOURCE service.name=ratewarden,...
    --[no-]rlqs            RATEWARDEN_RLQS            false (Envoy's quota service, docs/rlqs.md)
    --rlqs-interval S      RATEWARDEN_RLQS_INTERVAL   1 (at least 0.1)
    --rlqs-ttl S           RATEWARDEN_RLQS_TTL        5 (whole seconds)
    --rlqs-idle S          RATEWARDEN_RLQS_IDLE       60 (no request reported: abandon)
    --rlqs-demand-reports N RATEWARDEN_RLQS_DEMAND_REPORTS 2 (reports a demand is read over)
    --rlqs-change-rounds K RATEWARDEN_RLQS_CHANGE_ROUNDS 1 (rounds of the budget of changes)
    --rlqs-bucket-metrics N RATEWARDEN_RLQS_BUCKET_METRICS 0 (per-bucket metrics: top N by demand)

Under the ``RATEWARDEN_*`` variables come envoyproxy/ratelimit's own (``PORT``,
``REDIS_URL``, ``RUNTIME_ROOT``...): ``server/upstream_env.py`` reads them.

Secrets stay out of output: ``repr(settings)`` and every error message show the store URL with its
password replaced by ``***`` (``redacted``, in ``server/store_url.py``), and the xDS headers'
values as ``***`` (``parsers.hidden``; both by ``options.masked``). Here: ``Settings``, the values
and their checks, and ``resolve``, which builds them; which source of rules the settings name, and
the checks of the ``--xds-*`` options, are in ``server/rules_source.py``.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ratewarden.checks import is_number
from ratewarden.errors import ConfigurationError

# OPTIONS, Option, XDS_OPTIONS, redacted and store_scheme live beside what they serve
# and are re-exported here, where callers have always imported them from (__all__).
from ratewarden.server import upstream_env
from ratewarden.server.dogstatsd import Mogrifier
from ratewarden.server.options import OPTIONS, Option, masked, read
from ratewarden.server.response_headers import LEGACY_NAMES
from ratewarden.server.rules_source import (
    XDS_OPTIONS,
    check_reload_given,
    check_rules_source,
    own_source_wins,
)
from ratewarden.server.statsd_mapping import StatsdMapping
from ratewarden.server.store_url import redacted, store_scheme
from ratewarden.server.tls_names import TLS_FLAGS, check_tls
from ratewarden.server.tracing import check_tracing
from ratewarden.server.transport_checks import (
    check_rlqs,
    check_rlqs_given,
    check_transport,
    check_transport_given,
    tls_given_as,
)

__all__ = ["OPTIONS", "XDS_OPTIONS", "Option", "Settings", "redacted", "resolve", "store_scheme"]


def native_installed() -> bool:
    """Whether ``pygrpc_native`` can be imported here (``--transport auto`` then uses it)."""
    return importlib.util.find_spec("pygrpc_native") is not None


def uvloop_installed() -> bool:
    """Whether the ``uvloop`` package can be imported here (``--loop auto`` then uses it)."""
    return importlib.util.find_spec("uvloop") is not None


@dataclass(frozen=True, slots=True)
class Settings:
    """What one ``ratewarden serve`` runs with; validated when built."""

    config_paths: tuple[str, ...]
    config_files: str = "yaml"
    config_xds: str | None = None
    xds_node_id: str = "default"
    xds_node_metadata: tuple[tuple[str, str], ...] = ()
    xds_headers: tuple[tuple[str, str], ...] = ()
    xds_retry_interval: float = 3.0
    xds_retry_max: float = 60.0
    xds_max_message_bytes: int = 0
    xds_force_start: bool = False
    xds_tls: bool = False
    xds_tls_ca: str | None = None
    xds_tls_cert: str | None = None
    xds_tls_key: str | None = None
    xds_tls_server_name: str | None = None
    store_url: str = "memory"
    store_per_second: str | None = None
    host: str = "127.0.0.1"
    grpc_port: int = 8081
    http_port: int = 8080
    workers: int = 1
    reload_interval: float = 5.0
    health_interval: float = 2.0
    health_needs_rules: bool = False
    health_follows_store: bool = True
    grace: float = 10.0
    drain: float = 5.0
    shadow: bool = False
    quota_mode: bool = False
    charge_denied: bool = False
    near_limit_ratio: float = 0.8
    failure_mode: str = "open"
    on_error: str = "open"
    log_level: str = "info"
    log_format: str = "json"
    dashboard: str = "loopback"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_client_ca: str | None = None
    tls_client_san: str | None = None
    max_values_per_rule: int = 100_000
    response_headers: str = "off"
    legacy_header_names: tuple[str, str, str] = LEGACY_NAMES
    response_metadata: str = "merged"
    breaker_failures: int = 5
    breaker_cooldown: float = 1.0
    breaker_failure_ratio: float | None = None
    breaker_window: int | None = None
    over_limit_cache: int = 10_000
    loop: str = "auto"
    transport: str = "auto"
    grpc_host: str | None = None
    grpc_uds: str | None = None
    grpc_max_connection_age: float | None = None
    grpc_max_connection_age_grace: float | None = None
    debug_port: int | None = None
    debug_host: str | None = None
    metrics_port: int | None = None
    metrics_host: str | None = None
    metrics_path: str = "/metrics"
    metrics_mapping: StatsdMapping | None = None
    metrics_response_time_ms: bool = False
    metrics_upstream_names: bool = False
    merge_domains: bool = False
    key_prefix: str = "rw"
    store_timeout: float = 0.02
    statsd: str | None = None
    statsd_tags: tuple[tuple[str, str], ...] = ()
    statsd_interval: float = 10.0
    dogstatsd: str | None = None
    dogstatsd_mogrifiers: tuple[Mogrifier, ...] = ()
    tracing: str = "off"
    tracing_sampling_rate: float = 1.0
    tracing_resource: tuple[tuple[str, str], ...] = ()
    rlqs: bool = False
    rlqs_interval: float = 1.0
    rlqs_ttl: int = 5
    rlqs_idle: float = 60.0
    rlqs_demand_reports: int = 2
    rlqs_change_rounds: int = 1
    rlqs_bucket_metrics: int = 0

    def __repr__(self) -> str:
        shown = (
            f"{name}={masked(name, getattr(self, name))!r}" for name in self.__dataclass_fields__
        )
        return f"Settings({', '.join(shown)})"

    def __post_init__(self) -> None:
        check_tls(self.tls_cert, self.tls_key, self.tls_client_ca, self.tls_client_san)
        check_rules_source(self)
        if not store_scheme(self.store_url):
            raise ConfigurationError(
                f"store URL {redacted(self.store_url)!r} has no scheme; use memory, "
                "redis://host:6379/0, rediss://..., a Sentinel or Cluster URL, or "
                "memcache://host:11211[,host:port...]"
            )
        self._check_per_second()
        self._check_breaker()
        if self.workers > 1 and store_scheme(self.store_url) == "memory":
            raise ConfigurationError(
                f"{self.workers} workers on the memory store would each keep their own counters, "
                "admitting up to that many times every limit; use --store redis://... or "
                "memcache://... to share them, or one worker"
            )
        if self.workers > 1 and 0 in (self.grpc_port, self.http_port):
            raise ConfigurationError(
                f"{self.workers} workers need fixed ports to share; port 0 picks a different "
                "port in every process"
            )
        self._check_ports()
        if "{" in self.key_prefix or "}" in self.key_prefix:
            raise ConfigurationError(
                f"--key-prefix {self.key_prefix!r} must not hold '{{' or '}}': every key's "
                "own part goes between braces (its Redis Cluster hash tag)"
            )
        check_transport(self, native_installed())
        check_rlqs(self)
        if self.metrics_response_time_ms and self.metrics_mapping is not None:
            raise ConfigurationError(
                "--metrics-response-time-ms and --metrics-mapping: the mapping's scale says "
                "what unit response_time is in; unset --metrics-response-time-ms"
            )
        if self.dogstatsd_mogrifiers and self.dogstatsd is None:
            raise ConfigurationError("--dogstatsd-mogrifiers rewrite --dogstatsd's stats: set it")
        check_tracing(self.tracing)
        if self.loop == "uvloop" and not uvloop_installed():
            raise ConfigurationError(
                "--loop uvloop: the uvloop package is not installed; pip install uvloop "
                "('ratewarden[server]' brings it on Linux and macOS) or use --loop asyncio"
            )

    def _check_breaker(self) -> None:
        ratio, window = self.breaker_failure_ratio, self.breaker_window
        if ratio is not None and not (is_number(ratio, low_ok=False) and ratio <= 1):
            raise ConfigurationError(
                f"--breaker-failure-ratio {ratio!r}: must be a number above 0 and at most 1"
            )
        if window is not None and (type(window) is not int or not 2 <= window <= 1_000_000):
            raise ConfigurationError(
                f"--breaker-window {window!r}: must be a whole number from 2 to 1000000"
            )
        if window is not None and ratio is None:
            raise ConfigurationError(
                "--breaker-window counts the calls --breaker-failure-ratio judges: set the "
                "ratio too, or neither"
            )
        if ratio is not None and self.breaker_failures == 0:
            raise ConfigurationError(
                "--breaker-failure-ratio opens the circuit breaker, which --breaker-failures 0 "
                "turns off: give --breaker-failures a count, or drop the ratio"
            )

    def _check_per_second(self) -> None:
        url = self.store_per_second
        if url is None:
            return
        if not store_scheme(url):
            raise ConfigurationError(
                f"--store-per-second {redacted(url)!r} has no scheme; use a Redis URL such as "
                "redis://host:6379/0, or memcache://host:11211"
            )
        if self.workers > 1 and store_scheme(url) == "memory":
            raise ConfigurationError(
                f"--store-per-second memory with {self.workers} workers would keep each "
                "worker's per-second counters apart; use a Redis or memcache URL, or one worker"
            )

    def _check_ports(self) -> None:
        ports = [("--grpc-port", self.grpc_port), ("--http-port", self.http_port)]
        for flag, extra in (
            ("--debug-port", self.debug_port),
            ("--metrics-port", self.metrics_port),
        ):
            if extra is not None:
                ports.append((flag, extra))
                if self.workers > 1 and extra == 0:
                    raise ConfigurationError(
                        f"{self.workers} workers need a fixed {flag} to share; port 0 picks a "
                        "different port in every process"
                    )
        for index, (flag, port) in enumerate(ports):
            for other, other_port in ports[index + 1 :]:
                if port == other_port != 0:
                    raise ConfigurationError(
                        f"{flag} and {other} are both {port}; give them different ports"
                    )
        if self.workers > 1 and self.grpc_uds is not None:
            raise ConfigurationError(
                f"{self.workers} workers cannot share --grpc-uds {self.grpc_uds!r}: a Unix "
                "socket has one listener; use one worker, or --grpc-port for several"
            )

    @property
    def grpc_transport(self) -> str:
        """What serves the gRPC port: ``native`` or ``grpcio`` (``auto`` resolved; RLQS, TLS
        and a maximum connection age need grpcio)."""
        if self.transport != "auto":
            return self.transport
        native = (
            native_installed()
            and self.tls_cert is None
            and not self.rlqs
            and self.grpc_max_connection_age is None
        )
        return "native" if native else "grpcio"

    @property
    def tls(self) -> bool:
        """Whether the gRPC port speaks TLS (mutual TLS when ``tls_client_ca`` is set)."""
        return self.tls_cert is not None

    @property
    def reuse_port(self) -> bool:
        """Share the listening ports between worker processes (SO_REUSEPORT).

        Off for one process, so that a second server on the same port fails loudly
        instead of silently splitting the traffic.
        """
        return self.workers > 1


def resolve(flags: Mapping[str, Any], environ: Mapping[str, str]) -> Settings:
    """Build ``Settings`` from parsed flags (``None`` = not given) over ``environ``.

    A flag wins over its ``RATEWARDEN_*`` variable, which wins over the
    envoyproxy/ratelimit variable of the same setting (``upstream_env``), which
    wins over the default. Raises ``ConfigurationError`` naming the flag or
    variable whose value is wrong, or that was given without the option it needs.
    """
    upstream = upstream_env.read(environ, flags)
    own = read(flags, environ)
    check_rlqs_given(flags, environ, own.get("rlqs", False))
    own_source_wins(own, upstream)
    values = {**upstream, **own}
    values.setdefault("config_paths", ())
    check_reload_given(flags, environ, values.get("config_xds"))
    cert, key, client_ca, client_san = (values.get(name) for name in TLS_FLAGS)
    names = tls_given_as(flags, environ)  # each as given: flag, its variable, or upstream's
    check_tls(cert, key, client_ca, client_san, names)
    check_transport_given(values, flags, environ, native_installed())
    return Settings(**values)
