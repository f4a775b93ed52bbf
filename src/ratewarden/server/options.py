"""Every option of ``ratewarden serve`` as a flag and an environment variable, and reading them.

``OPTIONS`` is the table (``Settings`` field name -> ``Option``: flag, parser,
help; the variable is ``RATEWARDEN_`` and the flag's name, ``--grpc-port``
``RATEWARDEN_GRPC_PORT``). Flags and variables arrive as text and go through the
same parser, so a bad value reads the same whichever way it was given; ``read``
takes the flags over the environment and names the flag or variable whose value
is wrong. ``settings.resolve`` builds ``Settings`` from what it reads. The
parsers are in ``parsers.py``, and ``masked``, which shows a setting's value with
its secrets hidden.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ratewarden.errors import ConfigurationError
from ratewarden.limiter import FAILURE_MODES
from ratewarden.server.config.directory import FILE_MODES
from ratewarden.server.options_rlqs import RLQS
from ratewarden.server.options_telemetry import TELEMETRY
from ratewarden.server.parsers import (
    Option,
    boolean,
    choice,
    header_names,
    headers,
    integer,
    masked,
    metrics_path,
    pairs,
    paths,
    ratio,
    seconds,
    target,
    text,
)
from ratewarden.server.response_metadata import METADATA_MODES
from ratewarden.server.tls_names import check_san

#: The shortest ``--reload-interval`` but 0 (off). Each check looks at every config file and
#: directory: at 0.001, 15% of a core for two small files, more for a larger directory; a
#: change waits at most 0.1 s here, and a ConfigMap update takes seconds to reach a pod.
MIN_RELOAD_INTERVAL_S = 0.1


def reload_interval(value: Any) -> float:
    """``--reload-interval``: seconds, 0 or at least ``MIN_RELOAD_INTERVAL_S``."""
    number = seconds(0.0, allow_low=True)(value)
    if 0 < number < MIN_RELOAD_INTERVAL_S:
        raise ConfigurationError(
            f"{number:g} is below {MIN_RELOAD_INTERVAL_S:g} s (0 turns reload off): it would "
            f"check every config file {1 / number:g} times a second (0.001 took 15% of a core "
            "for two small files); the value is in seconds, not milliseconds"
        )
    return number


__all__ = ["OPTIONS", "Option", "masked", "read"]

LOG_LEVELS = ("debug", "info", "warning", "error")
LOG_FORMATS = ("json", "text")
ON_ERROR = ("open", "closed")
DASHBOARD = ("loopback", "any", "off")
RESPONSE_HEADERS = ("off", "legacy", "draft-10")
LOOPS = ("auto", "asyncio", "uvloop")
TRANSPORTS = ("auto", "grpcio", "native")


#: Every setting by its ``Settings`` field name.
OPTIONS: dict[str, Option] = {
    "config_paths": Option(
        "--config",
        paths,
        "required (or --config-xds): rule files or directories (envoyproxy/ratelimit YAML); "
        "repeat or list several",
    ),
    "config_files": Option(
        "--config-files",
        choice(FILE_MODES),
        "what a --config directory contributes: yaml, its own *.yaml and *.yml files "
        "(default), or all, every file in it and its subdirectories, as envoyproxy/ratelimit "
        "reads RUNTIME_ROOT (its RUNTIME_* settings choose all); hidden names never",
    ),
    "config_xds": Option(
        "--config-xds",
        target,
        "take the rules from this xDS server (HOST:PORT) over ADS instead of files (docs/xds.md)",
    ),
    "xds_node_id": Option(
        "--xds-node-id",
        text,
        "node id this service gives the xDS server, which keys its snapshots by it "
        "(unset: the id 'default')",
    ),
    "xds_node_metadata": Option(
        "--xds-node-metadata", pairs, "KEY=VALUE,... sent as the node's metadata to the xDS server"
    ),
    "xds_headers": Option(
        "--xds-headers", headers, "KEY=VALUE,... sent as gRPC metadata on the xDS stream"
    ),
    "xds_retry_interval": Option(
        "--xds-retry-interval",
        seconds(0.0, allow_low=False),
        "seconds before connecting to the xDS server again, doubled per failure in a row, "
        "jittered (3)",
    ),
    "xds_retry_max": Option(
        "--xds-retry-max",
        seconds(0.0, allow_low=False),
        "the longest wait between two connections to the xDS server (60)",
    ),
    "xds_max_message_bytes": Option(
        "--xds-max-message-bytes",
        integer(0, 2**31 - 1),
        "largest xDS response accepted, in bytes (0: gRPC's 4 MiB)",
    ),
    "xds_force_start": Option(
        "--xds-force-start",
        boolean,
        "open the ports before the first rules from the xDS server arrive; every call fails "
        "UNAVAILABLE (/json: 503) until then",
    ),
    "xds_tls": Option("--xds-tls", boolean, "connect to the xDS server over TLS"),
    "xds_tls_ca": Option(
        "--xds-tls-ca",
        text,
        "PEM CA certificates that signed the xDS server's certificate (the system's if unset)",
    ),
    "xds_tls_cert": Option(
        "--xds-tls-cert",
        text,
        "PEM client certificate for the xDS server (mutual TLS, with --xds-tls-key)",
    ),
    "xds_tls_key": Option("--xds-tls-key", text, "PEM private key of --xds-tls-cert"),
    "xds_tls_server_name": Option(
        "--xds-tls-server-name",
        text,
        "name the xDS server's certificate must carry, if not its address's host",
    ),
    "store_url": Option(
        "--store",
        text,
        "memory (default), redis://, rediss://, a Sentinel or Cluster URL, or "
        "memcache://HOST:PORT[,HOST:PORT...] (a server /PATH is a Unix socket: memcache:///PATH; "
        "memcaches:// over TLS, memcache+srv://_SERVICE._PROTO.NAME from a DNS SRV record)",
    ),
    "store_per_second": Option(
        "--store-per-second",
        text,
        "a store of their own for the counters of per-second limits (a second Redis or "
        "memcached, as envoyproxy/ratelimit's REDIS_PERSECOND); off: --store holds every counter",
    ),
    "store_timeout": Option(
        "--store-timeout",
        seconds(0.0, allow_low=False),
        "seconds a Redis or memcached connect or reply may take before the call counts as "
        "failed (0.02)",
    ),
    "key_prefix": Option(
        "--key-prefix", text, "what every Redis key (memcached item) of the store starts with (rw)"
    ),
    "merge_domains": Option(
        "--merge-domains",
        boolean,
        "a domain several config files name is one domain with all their descriptors "
        "(otherwise an error)",
    ),
    "host": Option("--host", text, "address both servers bind (127.0.0.1)"),
    "grpc_host": Option("--grpc-host", text, "address the gRPC server binds (--host)"),
    "grpc_port": Option("--grpc-port", integer(0, 65535), "gRPC port (8081)"),
    "grpc_uds": Option(
        "--grpc-uds", text, "serve gRPC on this Unix socket path instead of --grpc-host:--grpc-port"
    ),
    "grpc_max_connection_age": Option(
        "--grpc-max-connection-age",
        seconds(0.0, allow_low=False),
        "seconds after which the gRPC server asks a client to reconnect (GOAWAY), so that "
        "long-lived connections spread over new replicas; needs --transport grpcio (auto "
        "picks it) (off)",
    ),
    "grpc_max_connection_age_grace": Option(
        "--grpc-max-connection-age-grace",
        seconds(0.0, allow_low=True),
        "seconds a connection past --grpc-max-connection-age keeps for its calls in flight "
        "before it is closed (no limit)",
    ),
    "http_port": Option("--http-port", integer(0, 65535), "HTTP port (8080)"),
    "debug_port": Option(
        "--debug-port",
        integer(0, 65535),
        "a second HTTP port with the same endpoints, for operators (off)",
    ),
    "debug_host": Option("--debug-host", text, "address --debug-port binds (--host)"),
    "metrics_port": Option(
        "--metrics-port",
        integer(0, 65535),
        "a port that serves the Prometheus metrics alone, at --metrics-path (off)",
    ),
    "metrics_host": Option("--metrics-host", text, "address --metrics-port binds (--host)"),
    "metrics_path": Option(
        "--metrics-path", metrics_path, "where --metrics-port serves the metrics (/metrics)"
    ),
    "workers": Option(
        "--workers",
        integer(1, 256),
        "processes sharing the ports (1); more than one needs a shared store",
    ),
    "reload_interval": Option(
        "--reload-interval",
        reload_interval,
        "seconds between checks of the config files for changes, at least 0.1 (5; 0 turns "
        "reload off)",
    ),
    "health_interval": Option(
        "--health-interval",
        seconds(0.0, allow_low=False),
        "seconds between pings of the store for the health status (2)",
    ),
    "health_needs_rules": Option(
        "--health-needs-rules",
        boolean,
        "health is NOT_SERVING while no domain is loaded (an xDS update without resources)",
    ),
    "health_follows_store": Option(
        "--health-follows-store",
        boolean,
        "health is NOT_SERVING while the store does not answer its ping (on; off: health "
        "ignores the store, as envoyproxy/ratelimit's does unless "
        "REDIS_HEALTH_CHECK_ACTIVE_CONNECTION=true)",
    ),
    "grace": Option(
        "--grace",
        seconds(0.0, allow_low=True),
        "seconds in-flight calls get to finish on SIGTERM (10)",
    ),
    "drain": Option(
        "--drain",
        seconds(0.0, allow_low=True),
        "seconds health reports NOT_SERVING on SIGTERM while calls are still answered, so that "
        "Envoy's health check moves traffic away before the ports close (5; 0: close at once)",
    ),
    "shadow": Option(
        "--shadow",
        boolean,
        "global shadow mode: count and report, but the overall answer is always OK",
    ),
    "quota_mode": Option(
        "--quota-mode",
        boolean,
        "deny only when every descriptor but unlimited ones is over (one without a rule or "
        "in shadow_mode counts too and is never over)",
    ),
    "charge_denied": Option(
        "--charge-denied",
        boolean,
        "charge every descriptor of a denied request (envoyproxy/ratelimit's old behaviour)",
    ),
    "near_limit_ratio": Option(
        "--near-limit-ratio",
        ratio,
        "share of a limit above which a hit counts as near the limit (0.8)",
    ),
    "failure_mode": Option(
        "--failure-mode",
        choice(FAILURE_MODES),
        "what a rule without its own failure_mode answers while the store is down: open "
        "allows (default), closed denies (as Envoy's failure_mode_deny: true did with "
        "envoyproxy/ratelimit), local counts in this process; a budget takes open for local",
    ),
    "on_error": Option(
        "--on-error",
        choice(ON_ERROR),
        "answer when a call fails unexpectedly (a bug, not a store outage: --failure-mode): "
        "open allows (default), closed denies",
    ),
    "log_level": Option("--log-level", choice(LOG_LEVELS), "debug, info, warning, error"),
    "log_format": Option(
        "--log-format", choice(LOG_FORMATS), "json (one object a line, default) or text"
    ),
    "dashboard": Option(
        "--dashboard",
        choice(DASHBOARD),
        "who may open /dashboard on the HTTP port: loopback clients (default), any, or off",
    ),
    "tls_cert": Option(
        "--tls-cert", text, "PEM certificate chain: serve gRPC over TLS (with --tls-key)"
    ),
    "tls_key": Option("--tls-key", text, "PEM private key of --tls-cert"),
    "tls_client_ca": Option(
        "--tls-client-ca",
        text,
        "PEM CA certificates: require client certificates they signed (mutual TLS)",
    ),
    "tls_client_san": Option("--tls-client-san", check_san, "a client cert must name this host"),
    "max_values_per_rule": Option(
        "--max-values-per-rule",
        integer(0, 100_000_000),
        "distinct counters one rule may hold per window before new values share one overflow "
        "counter (100000; 0 turns the cap off)",
    ),
    "response_headers": Option(
        "--response-headers",
        choice(RESPONSE_HEADERS),
        "rate limit headers Envoy adds to responses: off (default), legacy "
        "(RateLimit-Limit/Remaining/Reset) or draft-10 (RateLimit-Policy and RateLimit)",
    ),
    "response_metadata": Option(
        "--response-metadata",
        choice(METADATA_MODES),
        "the answers' dynamic_metadata: merged (the passing rules' metadata, default) or "
        "upstream (envoyproxy/ratelimit's RESPONSE_DYNAMIC_METADATA shape: domain, "
        "descriptors, hitsAddend, metadata)",
    ),
    "legacy_header_names": Option(
        "--legacy-header-names",
        header_names,
        "names of the legacy headers: LIMIT,REMAINING,RESET "
        "(RateLimit-Limit,RateLimit-Remaining,RateLimit-Reset)",
    ),
    "breaker_failures": Option(
        "--breaker-failures",
        integer(0, 1_000_000),
        "consecutive store failures that open the circuit breaker, after which failure_mode "
        "answers without waiting on the store (5; 0 turns the breaker off)",
    ),
    "breaker_cooldown": Option(
        "--breaker-cooldown",
        seconds(0.0, allow_low=False),
        "seconds the open breaker waits before one probe call tries the store again (1)",
    ),
    "breaker_failure_ratio": Option(
        "--breaker-failure-ratio",
        ratio,
        "also open the circuit breaker when at least this share of the last --breaker-window "
        "store calls failed (above 0, at most 1; off by default)",
    ),
    "breaker_window": Option(
        "--breaker-window",
        integer(2, 1_000_000),
        "store calls --breaker-failure-ratio is judged over, once that many are in (100)",
    ),
    "loop": Option(
        "--loop",
        choice(LOOPS),
        "event loop: auto (uvloop when it is installed, else asyncio's; default), asyncio, uvloop",
    ),
    "transport": Option(
        "--transport",
        choice(TRANSPORTS),
        "what serves the gRPC port: auto (native when pygrpc-native is installed and TLS is "
        "off, else grpcio; default), grpcio, native (pip install 'ratewarden[native]')",
    ),
    **RLQS,
    "over_limit_cache": Option(
        "--over-limit-cache",
        integer(0, 10_000_000),
        "counters denied by the store that are remembered until their retry time and denied "
        "without a store call (10000; 0 turns the cache off)",
    ),
    **TELEMETRY,
}


def read(flags: Mapping[str, Any], environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings' values from parsed flags (``None`` = not given) over ``environ``.

    Raises ``ConfigurationError`` naming the flag or variable whose value is wrong.
    """
    values: dict[str, Any] = {}
    for name, option in OPTIONS.items():
        raw = flags.get(name)
        source = option.flag
        if raw is None:
            raw = environ.get(option.env)
            source = option.env
        if raw is None:
            continue
        try:
            values[name] = option.parse(raw)
        except ConfigurationError as exc:
            shown = masked(name, " ".join(raw) if isinstance(raw, list) else raw)
            raise ConfigurationError(f"{source} {shown!r}: {exc}") from None
    return values
